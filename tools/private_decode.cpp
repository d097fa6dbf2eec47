// The main job: a private greedy decode with MPCache, three parties in one
// process (in-process transport), checked against the float64 reference.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
import mpcache;
#include "private_decode.hpp"

namespace mpcache::tools {

namespace {

template <Protocol P>
kv::AnyPolicy<P> make_policy(const DecodeOptions& o) {
  if (o.policy == "full") return kv::AnyPolicy<P>(kv::FullCache<P>{});
  if (o.policy == "mpcache") return kv::AnyPolicy<P>(kv::MpCache<P>(o.budget));
  throw Error(ErrorCode::invalid_argument, "decode: unknown policy '" + o.policy + "' (mpcache or full)");
}

// Float64 logits after prefill(prompt) and teacher-forced decode of `chosen`.
std::vector<std::vector<double>> reference_logits(const DecodeOptions& o, const ModelConfig& c,
                                                  const std::vector<std::uint32_t>& prompt,
                                                  const std::vector<std::uint32_t>& chosen) {
  Scheduler scheduler;
  Ref p;
  auto weights = sync_wait(scheduler, load_decoder(p, c, weights_from_file(o.model_dir + "/model.safetensors")));
  Decoder<Ref> decoder(weights);
  auto policy = make_policy<Ref>(o);
  std::vector<std::vector<double>> out;
  auto last_row = [&](const Ref::Share& logits) {
    auto r = p.to_real(logits);
    const std::size_t rows = r.shape()[0], v = r.shape()[1];
    return std::vector<double>(r.data() + (rows - 1) * v, r.data() + rows * v);
  };
  out.push_back(last_row(sync_wait(scheduler, decoder.prefill(p, policy, 0, prompt, prompt.size()))));
  for (std::size_t i = 0; i + 1 < chosen.size(); ++i)
    out.push_back(last_row(sync_wait(scheduler, decoder.decode(p, policy, 0, chosen[i]))));
  return out;
}

std::string printable(const std::vector<std::uint32_t>& bytes) {
  std::string s;
  for (auto b : bytes) s += (b >= 32 && b < 127) ? static_cast<char>(b) : '.';
  return s;
}

}  // namespace

int run_private_decode(const DecodeOptions& o) {
  const ModelConfig c = ModelConfig::from_json_file(o.model_dir + "/config.json");
  if (o.prompt.empty()) throw Error(ErrorCode::invalid_argument, "decode: empty prompt");
  std::vector<std::uint32_t> prompt;
  for (unsigned char ch : o.prompt) prompt.push_back(ch);
  if (prompt.size() + o.new_tokens > c.max_positions)
    throw Error(ErrorCode::invalid_argument, "decode: prompt + new tokens exceed the model's positions");

  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> prefill_costs, total_costs;
  auto party = [&](PartyId id) -> Task<std::vector<std::uint32_t>> {
    auto state = co_await Rss3Party::setup(network.endpoint(id));
    const CostCounters start = network.endpoint(id).costs();
    Rss3 p = state->session();
    // Only the model owner reads the weights file.
    const WeightSource source = id == 1 ? weights_from_file(o.model_dir + "/model.safetensors") : no_weights();
    auto weights = co_await load_decoder(p, c, source, /*owner=*/1);
    Decoder<Rss3> decoder(weights);
    auto policy = make_policy<Rss3>(o);
    std::optional<std::vector<std::uint32_t>> mine;
    if (id == 0) mine = prompt;
    auto logits = co_await decoder.prefill(p, policy, 0, std::move(mine), prompt.size());
    std::vector<std::uint32_t> generated;
    for (std::size_t step = 0; step < o.new_tokens; ++step) {
      const std::size_t rows = Rss3::shape(logits).at(0);
      auto last = kv::rows<Rss3>(logits, rows - 1, rows);
      auto best = co_await ops::argmax_last(p, last);
      auto token = co_await p.reveal_to(0, best.index);  // only the client learns the byte
      std::optional<std::uint32_t> next;
      if (token) next = static_cast<std::uint32_t>((*token)(0, 0));
      if (next) generated.push_back(*next);
      if (step == 0) prefill_costs[id] = network.endpoint(id).costs() - start;
      if (step + 1 < o.new_tokens) logits = co_await decoder.decode(p, policy, 0, next);
    }
    total_costs[id] = network.endpoint(id).costs() - start;
    co_return generated;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto results = run_parties(scheduler, network, party);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& chosen = results[0];

  const auto ref = reference_logits(o, c, prompt, chosen);
  std::size_t agree = 0;
  double worst_gap = 0;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const double best = *std::max_element(ref[i].begin(), ref[i].end());
    const double gap = best - ref[i].at(chosen[i]);
    worst_gap = std::max(worst_gap, gap);
    agree += gap <= 0.05 ? 1 : 0;  // a near-tie may flip under fixed point
  }
  std::printf("mpcache decode: private greedy decoding under rss3, 3 parties in one process\n");
  std::printf("  model %s (%zu layers, hidden %zu), policy %s, budget %zu tokens per KV head\n",
              o.model_dir.c_str(), c.num_layers, c.hidden_size, o.policy.c_str(), o.budget);
  std::printf("  prompt (client, party 0; %zu bytes): \"%s\"\n", prompt.size(), printable(prompt).c_str());
  std::printf("  generated, learned by the client only: \"%s\"\n", printable(chosen).c_str());
  std::printf("  parties 1 and 2 learned %zu and %zu bytes\n", results[1].size(), results[2].size());
  std::printf("  float64 check: %zu/%zu bytes are argmaxes of the reference logits within 0.05 (worst gap %.3g)\n",
              agree, chosen.size(), worst_gap);
  std::printf("  wall time %.2f s (one thread, setup and weight sharing included)\n", seconds);
  for (PartyId id = 0; id < 3; ++id)
    std::printf("  party %u: prefill %.2f MB / %llu rounds; whole run %.2f MB / %llu rounds\n", id,
                double(prefill_costs[id].payload_bytes_sent()) / 1e6,
                static_cast<unsigned long long>(prefill_costs[id].rounds),
                double(total_costs[id].payload_bytes_sent()) / 1e6,
                static_cast<unsigned long long>(total_costs[id].rounds));
  const bool ok = agree == chosen.size() && chosen.size() == o.new_tokens && results[1].empty() && results[2].empty();
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace mpcache::tools
