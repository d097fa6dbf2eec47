// One party's whole private generation job (`generate_party`), under rss3
// or add2, over its Endpoint: the client's public job header, pairwise keys,
// the model owner's weights, the policy, then `generate` (:generate), with
// the client's per-step word to go on carried over the endpoint.
module;
#include "backends.hpp"
export module mpcache.model:generate_party;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import :config;
import :weights;
import :prefill_memory;
import :decoder;
import :step_driver;
import :draft;
import :speculate;
import :generate;

export namespace mpcache {

// One party's whole generation job.
struct GenerationJob {
  std::filesystem::path model_dir;  // config.json (public shape, read by all) + model.safetensors (owner only)
  PartyId client = 0;               // gives the prompt, learns the text
  PartyId owner = 1;                // alone reads the weights file
  // At the client only: the prompt and how many tokens to generate. The
  // client announces the prompt length and token count to the others (both
  // are public: they fix the shapes), so other parties ignore these.
  std::optional<std::vector<std::uint32_t>> prompt;
  std::size_t new_tokens = 16;
  // At the client only: generation ends once it chooses one of these (EOS
  // ids; empty: never before new_tokens). The others learn it step by step.
  std::vector<std::uint32_t> stop_tokens;
  // At the client only: drafts a decode step verifies (0: none; the others
  // learn it from the job header) and who drafts them (empty: lookup_drafter).
  std::size_t speculate = 0;
  Drafter draft;
  // Every party passes these; they must agree with the client's.
  std::string policy = "mpcache";
  std::optional<std::size_t> budget;  // nullopt: the policy's default (kv::default_budget)
  // Bytes of the prefill's working set per party (prefill_memory.cppm): it
  // fixes the prefill's waves, hence its messages, so all parties agree.
  std::size_t memory_budget = default_prefill_memory_budget;
  UnusedTensors unused_weights = UnusedTensors::reject;  // owner: tensors the config leaves unused
  // The backend, its truncation and comparisons, and the offline budgets:
  // every party must give the same (the client's job header carries it).
  // The default is rss3 with exact truncation and circuit comparisons.
  ProtocolMode mode;
  // What the mode leaves to each party (its compute pool, insecure test
  // seeds, compact weights). Their truncation, comparison and budget fields
  // are ignored: the mode sets them.
  Rss3Options rss3;  // under rss3
  Add2Options add2;  // under add2: client and owner are parties 0 and 1, party 2 deals
};

// Why a generation ended: it chose new_tokens tokens, or a stop token.
enum class GenerationEnd { budget, eos };

inline const char* end_name(GenerationEnd end) noexcept { return end == GenerationEnd::eos ? "eos" : "budget"; }

struct GenerationResult {
  std::vector<std::uint32_t> tokens;  // at the client only
  std::size_t prompt_length = 0;
  std::size_t new_tokens = 0;  // the budget
  // Tokens chosen, at every party (only the client knows which). `end`:
  // eos where the generation stopped at a stop token before the budget ran
  // out; at the client also when the budget's last token is one (the others
  // hear nothing after the last step and say budget).
  std::size_t generated = 0;
  GenerationEnd end = GenerationEnd::budget;
  double setup_seconds = 0;  // keys, job header, weight sharing
  CostCounters setup_costs;
  // This party's KV cache at the end: bytes the decoder holds, bytes the
  // policy holds (nullopt: a policy that does not count them; it holds at
  // most a selection's worth besides), bytes in its backing file.
  // Bytes of weights this party holds (DecoderWeights::resident_bytes) and
  // the checkpoint's weight count (ModelConfig::weight_count).
  std::size_t weight_bytes = 0, weights = 0;
  std::size_t kv_decoder_bytes = 0;
  std::optional<std::size_t> kv_policy_bytes;
  std::size_t kv_backing_bytes = 0;
};

// The public job header the client sends to every other party first. The
// config digest (ModelConfig::digest) lets a party whose config.json gives
// other shapes refuse the job here, instead of failing at the first message
// whose size the shapes fix; the mode, one started with another protocol.
//
// Layout (version 2): u32 "MPGH" | u32 version | u64 prompt length | u64 new
// tokens | u64 budget | u64 config digest | u64 memory budget | the mode
// (ProtocolMode::encode) | policy (u64 length, at most 64 bytes) | u64
// drafts a step (speculation; 0: none). Version 1 had no magic, version or
// mode, version 2 no speculation: they are refused by name.
struct GenerationHeader {
  static constexpr std::uint32_t magic = 0x4847504Du;  // "MPGH"
  static constexpr std::uint32_t version = 3;
  static constexpr std::size_t max_policy_name = 64;

  std::uint64_t prompt_length = 0, new_tokens = 0, budget = 0, config_digest = 0, memory_budget = 0;
  ProtocolMode mode;
  std::string policy;
  std::uint64_t speculate = 0;

  std::vector<std::byte> encode() const {
    ByteWriter w;
    w.u64(std::uint64_t{version} << 32 | magic);
    for (std::uint64_t word : {prompt_length, new_tokens, budget, config_digest, memory_budget}) w.u64(word);
    w.raw(mode.encode());
    w.text(policy);
    w.u64(speculate);
    return std::move(w.out);
  }
  static GenerationHeader decode(std::span<const std::byte> bytes, PartyId from) {
    const std::string what = "generation header from party " + std::to_string(from);
    ByteReader r(bytes, what);
    const std::uint64_t lead = r.u64();
    if (static_cast<std::uint32_t>(lead) != magic || lead >> 32 != version)
      r.fail("not a version " + std::to_string(version) +
             " header (an older mpcache sends version 1 or 2): every party must run the same mpcache");
    GenerationHeader h;
    h.prompt_length = r.u64();
    h.new_tokens = r.u64();
    h.budget = r.u64();
    h.config_digest = r.u64();
    h.memory_budget = r.u64();
    h.mode = ProtocolMode::decode(r.raw(ProtocolMode::encoded_bytes), what);
    h.policy = r.text(max_policy_name);
    h.speculate = r.u64();
    if (h.speculate > max_speculated_tokens)
      r.fail("speculation of " + std::to_string(h.speculate) + " tokens a step, outside 0.." +
             std::to_string(max_speculated_tokens));
    r.end();
    return h;
  }
};

inline constexpr StreamId generation_header_stream = 0x67656E6572617465ull;  // "generate"
// The client's per-step word (one byte: 1 go on, 0 stop) to each other party.
inline constexpr StreamId generation_stop_stream = 0x676F2D6F6E3F3F3Full;  // "go-on???"
// add2: the dealer's word to party 1 that it is done (it may have dealt a
// step that did not happen; party 1 leaves once none of that is in flight).
inline constexpr StreamId generation_dealt_stream = 0x6465616C7420616Cull;  // "dealt al"

namespace detail {
inline std::string hex_digest(std::uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

// The client's public job header, sent to every other party (the dealer
// too: shapes and the policy fix its program). `job.budget` is set.
Task<GenerationHeader> exchange_header(Endpoint& endpoint, GenerationJob& job, const ModelConfig& config) {
  const PartyId id = endpoint.id();
  const std::size_t budget = job.budget.value();
  GenerationHeader header;
  if (id == job.client) {
    if (!job.prompt) throw Error(ErrorCode::invalid_argument, "generate: the client has no prompt");
    header = {job.prompt->size(), job.new_tokens, budget,  config.digest(), job.memory_budget,
              job.mode,           job.policy,     job.speculate};
    for (PartyId peer = 0; peer < 3; ++peer)
      if (peer != id) endpoint.send(peer, generation_header_stream, header.encode());
    co_return header;
  }
  header = GenerationHeader::decode(co_await endpoint.recv(job.client, generation_header_stream), job.client);
  if (header.mode.effective() != job.mode.effective())
    throw Error(ErrorCode::invalid_argument,
                "generate: the client (party " + std::to_string(job.client) + ") runs " + header.mode.describe() +
                    " (offline budgets " + std::to_string(header.mode.truncation_pairs_budget) + " and " +
                    std::to_string(header.mode.comparison_store_budget) + " bytes), but party " + std::to_string(id) +
                    " was started with " + job.mode.describe() + " (" +
                    std::to_string(job.mode.truncation_pairs_budget) + " and " +
                    std::to_string(job.mode.comparison_store_budget) +
                    " bytes): every party must give the same protocol mode");
  if (header.config_digest != config.digest())
    throw Error(ErrorCode::invalid_argument,
                "generate: party " + std::to_string(id) + "'s " + (job.model_dir / "config.json").string() +
                    " is not the client's (party " + std::to_string(job.client) + "): config digest " +
                    hex_digest(config.digest()) + " here, " + hex_digest(header.config_digest) +
                    " at the client; every party must read the same public config. This one gives " +
                    config.summary());
  if (header.policy != job.policy || header.budget != budget)
    throw Error(ErrorCode::invalid_argument,
                "generate: the client (party " + std::to_string(job.client) + ") asks for policy " + header.policy +
                    " with budget " + std::to_string(header.budget) + ", but party " + std::to_string(id) +
                    " was started with policy " + job.policy + " and budget " + std::to_string(budget));
  if (header.memory_budget != job.memory_budget)
    throw Error(ErrorCode::invalid_argument,
                "generate: the client (party " + std::to_string(job.client) + ") prefills within a memory budget of " +
                    std::to_string(header.memory_budget) + " bytes, but party " + std::to_string(id) +
                    " was started with " + std::to_string(job.memory_budget) +
                    " (--memory-budget fixes the prefill's messages: every party must give the same)");
  job.prompt.reset();
  co_return header;
}

// The client's word after each step, over the endpoint (GenerationStopSignal).
// Its round is the client's next input's: counted under that input's tag.
// `go_words` counts the words "go on": the steps after the first.
Task<bool> receive_go_on(Endpoint& endpoint, PartyId client, std::size_t& go_words) {
  const auto word = co_await endpoint.recv(client, generation_stop_stream, CostTag::linear);
  if (word.size() != 1 || std::to_integer<unsigned>(word[0]) > 1)
    throw Error(ErrorCode::protocol, "generate: the client (party " + std::to_string(client) +
                                         ") sent a stop signal that is not one byte 0 or 1");
  if (word[0] == std::byte{1}) ++go_words;
  co_return word[0] == std::byte{1};
}

GenerationStopSignal stop_signal(Endpoint& endpoint, PartyId client, std::size_t& go_words) {
  if (endpoint.id() != client)
    return {{}, [&endpoint, client, &go_words] { return receive_go_on(endpoint, client, go_words); }};
  return {[&endpoint, client](bool go_on) {
            const std::byte word = go_on ? std::byte{1} : std::byte{0};
            for (PartyId peer = 0; peer < endpoint.parties(); ++peer)
              if (peer != client) endpoint.send(peer, generation_stop_stream, std::vector<std::byte>{word});
          },
          {}};
}

// Everything after the job header and the backend's key set-up, the same
// on every backend.
template <Protocol P>
Task<GenerationResult> generate_on(P& p, Endpoint& endpoint, GenerationJob job, const GenerationHeader& header,
                                   const ModelConfig& config, std::chrono::steady_clock::time_point t0,
                                   CostCounters start, GenerationObserver observer, std::stop_token stop) {
  const PartyId id = endpoint.id();
  // Only the model owner reads the weights file.
  const WeightSource source = id == job.owner ? weights_from_file(job.model_dir / "model.safetensors", job.unused_weights)
                                                : no_weights();
  auto weights = co_await load_decoder(p, config, source, job.owner);
  // Choosing the next token needs only the last position's logits.
  Decoder<P> decoder(weights, DecoderOptions{job.memory_budget, PrefillLogits::last});
  auto policy = kv::make_policy<P>(job.policy, *job.budget);
  GenerationResult result;
  result.prompt_length = header.prompt_length;
  result.new_tokens = header.new_tokens;
  result.weight_bytes = weights.resident_bytes();
  result.weights = config.weight_count();
  result.setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.setup_costs = endpoint.costs() - start;
  if (!observer.costs) observer.costs = [&endpoint] { return endpoint.costs(); };
  GenerationRequest request{job.client, std::move(job.prompt), header.prompt_length, header.new_tokens,
                            std::move(stop)};
  if (id == job.client) request.stop_tokens = job.stop_tokens;
  request.speculate = header.speculate;
  if (id == job.client && header.speculate > 0) request.draft = job.draft ? std::move(job.draft) : lookup_drafter();
  std::size_t go_words = 0;
  request.stop_signal = stop_signal(endpoint, job.client, go_words);
  // Tokens chosen, as every party counts them (a speculative step chooses
  // its accepted drafts and a correction).
  std::size_t chosen = 0;
  observer.step = [&chosen, inner = std::move(observer.step)](const GenerationStep& s) {
    chosen += 1 + s.accepted;
    if (inner) inner(s);
  };
  const bool dealt = job.mode.backend == ProtocolBackend::add2;
  if (dealt && id == add2_dealer) request.stop_signal.lag = 1;
  result.tokens = co_await generate(p, decoder, policy, std::move(request), std::move(observer));
  if (dealt && id == add2_dealer) endpoint.send(1, generation_dealt_stream, std::vector<std::byte>{std::byte{1}});
  if (dealt && id == 1) (void)co_await endpoint.recv(add2_dealer, generation_dealt_stream);
  // A stop token within a step's accepted drafts ends the client's text
  // there; the others count the step's tokens whole.
  result.generated = id == job.client ? result.tokens.size() : header.speculate > 0 ? chosen : 1 + go_words;
  if (id == job.client) {
    const auto& stops = job.stop_tokens;
    const bool ends_with_stop =
        !result.tokens.empty() && std::find(stops.begin(), stops.end(), result.tokens.back()) != stops.end();
    result.end = ends_with_stop ? GenerationEnd::eos : GenerationEnd::budget;
  } else {
    result.end = result.generated < header.new_tokens ? GenerationEnd::eos : GenerationEnd::budget;
  }
  result.kv_decoder_bytes = decoder.cache_bytes();
  result.kv_policy_bytes = policy.resident_bytes();
  result.kv_backing_bytes = policy.backing_bytes();
  co_return result;
}
}  // namespace detail

namespace detail {
template <class Party, class Options>
Task<GenerationResult> setup_and_generate(Endpoint& endpoint, GenerationJob job, const Options& options,
                                          const ModelConfig& config, GenerationObserver observer,
                                          std::stop_token stop) {
  const auto t0 = std::chrono::steady_clock::now();
  const CostCounters start = endpoint.costs();
  auto state = co_await Party::setup(endpoint, options);
  // The backends' set-up refuses parties whose truncation or comparisons
  // differ; the header then names any other difference of mode, model,
  // policy or budget.
  const GenerationHeader header = co_await exchange_header(endpoint, job, config);
  auto p = state->session();
  co_return co_await generate_on(p, endpoint, std::move(job), header, config, t0, start, std::move(observer),
                                 std::move(stop));
}
}  // namespace detail

// `stop`: see the header. Every party's own stop cancels every party.
// Not inline: its rss3 and add2 instantiations are compiled once, in the
// library, instead of in every program that calls it.
Task<GenerationResult> generate_party(Endpoint& endpoint, GenerationJob job,
                                      GenerationObserver observer = {}, std::stop_token stop = {}) {
  const char* name = protocol_backend_name(job.mode.backend);
  if (endpoint.parties() != 3)
    throw Error(ErrorCode::invalid_argument, std::string("generate: ") + name + " needs 3 parties, not " +
                                                 std::to_string(endpoint.parties()));
  if (job.client >= 3 || job.owner >= 3)
    throw Error(ErrorCode::invalid_argument, "generate: client and model owner must be parties 0-2");
  if (job.mode.backend == ProtocolBackend::add2 && (job.client == add2_dealer || job.owner == add2_dealer))
    throw Error(ErrorCode::invalid_argument,
                "generate: under add2 party 2 is the dealer; the client and the model owner must be parties 0 and 1");
  job.mode.check();
  if (job.speculate > 0 && job.mode.backend != ProtocolBackend::rss3)
    throw Error(ErrorCode::invalid_argument, std::string("generate: speculation runs under rss3, not ") + name);
  if (job.speculate > max_speculated_tokens)
    throw Error(ErrorCode::invalid_argument, "generate: speculate " + std::to_string(job.speculate) +
                                                 " tokens a step, outside 0.." + std::to_string(max_speculated_tokens));
  // Shapes and the budget first, so that a bad model folder or policy fails
  // before any traffic.
  const ModelConfig config = ModelConfig::from_json_file(job.model_dir / "config.json");
  if (!job.budget) job.budget = kv::default_budget(job.policy);
  {
    const auto policy = kv::make_policy<Rss3>(job.policy, *job.budget);  // refuses a budget below its minimum (on any backend)
    if (job.speculate > 0) check_speculative_policy<kv::AnyPolicy<Rss3>, Rss3>(policy);
  }
  endpoint.cancel_when(stop);
  try {
    if (job.mode.backend == ProtocolBackend::add2) {
      const Add2Options options = job.mode.add2(job.add2);
      co_return co_await detail::setup_and_generate<Add2Party>(endpoint, std::move(job), options, config,
                                                               std::move(observer), std::move(stop));
    }
    const Rss3Options options = job.mode.rss3(job.rss3);
    co_return co_await detail::setup_and_generate<Rss3Party>(endpoint, std::move(job), options, config,
                                                             std::move(observer), std::move(stop));
  } catch (const Error& e) {
    // A stop seen between steps: the peers learn it now, as cancellation.
    if (e.code() == ErrorCode::cancelled) {
      std::string_view why = e.what();
      why.remove_prefix(std::min(why.size(), std::string_view(to_string(ErrorCode::cancelled)).size() + 2));
      endpoint.cancel(std::string(why));
    }
    throw;
  }
}

}  // namespace mpcache
