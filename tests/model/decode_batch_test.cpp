// Decoder::decode_batch (continuous batching): one step of several
// sequences, each with its own cache, position and policy, must give each
// the logits its own decode gives (within fixed-point error: the runs draw
// different randomness), in about the rounds of one decode and with no more
// traffic than the decodes one by one.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"

using namespace mpcache;

namespace {
const std::filesystem::path source_dir = MPCACHE_SOURCE_DIR;

using Slot = Decoder<Rss3>::BatchSlot<kv::AnyPolicy<Rss3>>;

// A sequence: its prompt (token ids), its policy, the token it decodes next.
struct Sequence {
  std::vector<std::uint32_t> prompt;
  std::string policy;
  std::uint32_t next;
};

struct PartyResult {
  std::vector<RingTensor> alone;  // each sequence's decode on its own, revealed (1, vocab)
  RingTensor batched;             // the batched step, revealed (B, vocab)
  std::vector<std::uint64_t> alone_rounds, alone_bytes;
  std::uint64_t batched_rounds = 0, batched_bytes = 0;
};

Task<Rss3Share> one_hot_row(Rss3& p, std::uint32_t token, std::size_t vocab) {
  std::optional<RingTensor> hot;
  if (p.holds_input(0)) {
    hot = ring_zeros({1, vocab});
    (*hot)(0, token) = 1;
  }
  co_return co_await p.input(0, std::move(hot), {1, vocab});
}

// Prefills a fresh decoder and policy per sequence; they live in `decoders`
// and `policies`, which the caller keeps.
Task<void> prefill_all(Rss3& p, const DecoderWeights<Rss3>& weights, const std::vector<Sequence>& seqs,
                       std::vector<std::unique_ptr<Decoder<Rss3>>>& decoders,
                       std::vector<std::unique_ptr<kv::AnyPolicy<Rss3>>>& policies) {
  for (const auto& s : seqs) {
    decoders.push_back(std::make_unique<Decoder<Rss3>>(weights));
    policies.push_back(std::make_unique<kv::AnyPolicy<Rss3>>(kv::make_policy<Rss3>(s.policy, kv::default_budget(s.policy))));
    std::optional<std::vector<std::uint32_t>> ids;
    if (p.holds_input(0)) ids = s.prompt;
    (void)co_await decoders.back()->prefill(p, *policies.back(), 0, ids, s.prompt.size());
  }
}

std::array<PartyResult, 3> run_batch(const std::filesystem::path& model, const std::vector<Sequence>& seqs) {
  const ModelConfig c = ModelConfig::from_json_file(model / "config.json");
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto party_main = [&](PartyId id) -> Task<PartyResult> {
    Endpoint& ep = network.endpoint(id);
    auto party = co_await Rss3Party::setup(ep, {.exact_truncation = true, .insecure_seed = 5});
    Rss3 p = party->session();
    auto weights = co_await load_decoder(p, c, id == 0 ? weights_from_file(model / "model.safetensors") : no_weights(), 0);
    PartyResult out;
    {  // each sequence alone
      std::vector<std::unique_ptr<Decoder<Rss3>>> decoders;
      std::vector<std::unique_ptr<kv::AnyPolicy<Rss3>>> policies;
      co_await prefill_all(p, weights, seqs, decoders, policies);
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        auto hot = co_await one_hot_row(p, seqs[i].next, c.vocab_size);
        const auto before = ep.costs();
        auto logits = co_await decoders[i]->decode_one_hot(p, *policies[i], hot);
        const auto spent = ep.costs() - before;
        out.alone_rounds.push_back(spent.rounds);
        out.alone_bytes.push_back(spent.payload_bytes_sent());
        out.alone.push_back(co_await p.reveal(logits));
      }
    }
    {  // all at once
      std::vector<std::unique_ptr<Decoder<Rss3>>> decoders;
      std::vector<std::unique_ptr<kv::AnyPolicy<Rss3>>> policies;
      co_await prefill_all(p, weights, seqs, decoders, policies);
      std::vector<Slot> slots;
      for (std::size_t i = 0; i < seqs.size(); ++i)
        slots.push_back({decoders[i].get(), policies[i].get(), co_await one_hot_row(p, seqs[i].next, c.vocab_size)});
      const auto before = ep.costs();
      auto logits = co_await Decoder<Rss3>::decode_batch(p, std::move(slots));
      const auto spent = ep.costs() - before;
      out.batched_rounds = spent.rounds;
      out.batched_bytes = spent.payload_bytes_sent();
      out.batched = co_await p.reveal(logits);
      for (std::size_t i = 0; i < seqs.size(); ++i) CHECK(decoders[i]->length() == seqs[i].prompt.size() + 1);
    }
    co_return out;
  };
  auto results = run_parties(scheduler, network, party_main);
  return {std::move(results[0]), std::move(results[1]), std::move(results[2])};
}

std::vector<std::uint32_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

// Each sequence's row of the batched logits against its decode alone:
// within fixed-point error (the two runs draw different randomness, and
// truncation's last bit follows it), and the same greedy token.
void check_logits(const std::array<PartyResult, 3>& r, const std::vector<Sequence>& seqs) {
  const FixedPoint fp;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    INFO("sequence " << i << " (" << seqs[i].policy << ", " << seqs[i].prompt.size() << " tokens)");
    const RingTensor& alone = r[0].alone[i];
    double worst = 0;
    std::size_t best_alone = 0, best_batched = 0;
    for (std::size_t j = 0; j < alone.shape()[1]; ++j) {
      worst = std::max(worst, std::fabs(fp.decode(r[0].batched(i, j)) - fp.decode(alone(0, j))));
      if (fp.decode(alone(0, j)) > fp.decode(alone(0, best_alone))) best_alone = j;
      if (fp.decode(r[0].batched(i, j)) > fp.decode(r[0].batched(i, best_batched))) best_batched = j;
    }
    CHECK(worst < 0.02);
    CHECK(best_batched == best_alone);
  }
}

// Total bytes over the three parties (which party sends a comparison's
// larger half depends on stream ids, so per party it moves).
std::uint64_t total_batched_bytes(const std::array<PartyResult, 3>& r) {
  return r[0].batched_bytes + r[1].batched_bytes + r[2].batched_bytes;
}
std::uint64_t total_alone_bytes(const std::array<PartyResult, 3>& r) {
  std::uint64_t sum = 0;
  for (const auto& p : r) sum += std::accumulate(p.alone_bytes.begin(), p.alone_bytes.end(), std::uint64_t{0});
  return sum;
}
// Rounds on the critical path (the most any party counted). Which party
// leads a comparison follows the stream ids, so the same work may count one
// round more or less in another place of a run: the claims below allow 1.
std::uint64_t critical(const std::array<PartyResult, 3>& r, std::optional<std::size_t> alone) {
  std::uint64_t most = 0;
  for (const auto& p : r) most = std::max(most, alone ? p.alone_rounds[*alone] : p.batched_rounds);
  return most;
}
}  // namespace

TEST_CASE("a batched decode step gives each sequence its own logits, sharing rounds, adding no traffic") {
  const std::string a = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy",
                    b = "It is a truth universally acknowledged, that a single man in possession",
                    c = "Mr. Knightley, a sensible man about seven or eight and thirty, was";
  // Different policies and lengths: each row at its own position, each
  // policy's own selection; the GPT-2 fixture has 64 positions.
  for (const auto& [model, limit] : {std::pair{"tools/model/fixture", 80}, std::pair{"tests/fixtures/model/gpt2-tiny", 60}}) {
    CAPTURE(model);
    const std::vector<Sequence> seqs = {{bytes_of(a.substr(0, limit)), "mpcache", 'x'},
                                        {bytes_of(b.substr(0, limit - 15)), "full", ' '},
                                        {bytes_of(c.substr(0, limit - 8)), "h2o", 'e'}};
    const auto r = run_batch(source_dir / model, seqs);
    check_logits(r, seqs);
    CHECK(total_batched_bytes(r) <= total_alone_bytes(r));
    // The sequences' attention and selections run side by side, the rest
    // once: fewer rounds than one after the other.
    std::uint64_t one_after_another = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) one_after_another += critical(r, i);
    MESSAGE(std::string(model) << ": a step of 3 in " << critical(r, std::nullopt) << " rounds, one after another "
                  << one_after_another);
    CHECK(critical(r, std::nullopt) < one_after_another);
  }
}

TEST_CASE("a batch of sequences alike costs the rounds of one of them") {
  const std::vector<Sequence> seqs = {
      {bytes_of("Emma Woodhouse, handsome, clever, and rich, with a comfortable home"), "mpcache", 'a'},
      {bytes_of("It is a truth universally acknowledged, that a single man in possess"), "mpcache", 'b'},
      {bytes_of("Mr. Knightley, a sensible man about seven or eight and thirty, was no"), "mpcache", 'c'},
      {bytes_of("Miss Taylor married. It was Miss Taylor's loss which first brought grief"), "mpcache", 'd'}};
  const auto r = run_batch(source_dir / "tools/model/fixture", seqs);
  check_logits(r, seqs);
  // The shared parts move the rows' bytes in fewer messages.
  MESSAGE("a step of 4: " << total_batched_bytes(r) << " bytes, one by one " << total_alone_bytes(r));
  CHECK(total_batched_bytes(r) <= total_alone_bytes(r));
  std::uint64_t longest = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) longest = std::max(longest, critical(r, i));
  MESSAGE("a step of 4 in " << critical(r, std::nullopt) << " rounds, the longest alone " << longest);
  // 2, not 1 (critical, above), since exp's polynomial (46fe996): most
  // likely because, under exact truncation without pairs, it and exp's
  // clipping comparison take the same 8 rounds (exp.cppm), so a comparison's
  // rotated lead can add its round in more places.
  CHECK(critical(r, std::nullopt) <= longest + 2);
}

TEST_CASE("a batch of one is a decode") {
  const std::vector<Sequence> seqs = {{bytes_of("Emma Woodhouse, handsome, clever, and rich, with a comfortable home"), "mpcache", 'a'}};
  const auto r = run_batch(source_dir / "tools/model/fixture", seqs);
  check_logits(r, seqs);
  CHECK(total_batched_bytes(r) == total_alone_bytes(r));
  CHECK(critical(r, std::nullopt) <= critical(r, 0) + 1);
  CHECK(critical(r, 0) <= critical(r, std::nullopt) + 1);
}

TEST_CASE("a batch the decoder cannot run is refused naming why") {
  Ref p;
  const ModelConfig c = ModelConfig::from_json_file(source_dir / "tools/model/fixture/config.json");
  auto weights = testing::run(load_decoder(p, c, weights_from_file(source_dir / "tools/model/fixture/model.safetensors")));
  auto other_weights = weights;
  using RefSlot = Decoder<Ref>::BatchSlot<kv::AnyPolicy<Ref>>;
  Decoder<Ref> a(weights), b(weights), stranger(other_weights), fresh(weights);
  auto pa = kv::make_policy<Ref>("full", 8), pb = kv::make_policy<Ref>("full", 8), ps = kv::make_policy<Ref>("full", 8),
       pf = kv::make_policy<Ref>("full", 8);
  for (auto* d : {&a, &b, &stranger}) (void)testing::run(d->prefill(p, d == &a ? pa : d == &b ? pb : ps, 0, std::vector<std::uint32_t>{1, 2, 3}, 3));
  auto hot = testing::run(p.input(0, std::optional<RingTensor>(ring_zeros({1, c.vocab_size})), {1, c.vocab_size}));
  auto two = testing::run(p.input(0, std::optional<RingTensor>(ring_zeros({2, c.vocab_size})), {2, c.vocab_size}));
  auto error_of = [&](std::vector<RefSlot> slots) -> std::string {
    try {
      (void)testing::run(Decoder<Ref>::decode_batch(p, std::move(slots)));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of({}) == "invalid argument: a decode batch of no sequences");
  CHECK(error_of({{&a, &pa, hot}, {&a, &pb, hot}}) ==
        "invalid argument: decode batch: slot 1 repeats slot 0's sequence (its decoder or policy)");
  CHECK(error_of({{&a, &pa, hot}, {&stranger, &ps, hot}}) ==
        "invalid argument: decode batch: slot 1 runs other weights than slot 0");
  CHECK(error_of({{&a, &pa, hot}, {&fresh, &pf, hot}}) == "invalid argument: decode before prefill");
  CHECK(error_of({{&a, &pa, hot}, {&b, &pb, two}}) == "invalid argument: decode of 2 tokens at once");
  CHECK(error_of({{&a, nullptr, hot}}) == "invalid argument: decode batch: slot 0 has no decoder or no policy");
  CHECK(a.length() == 3);  // nothing ran
}
