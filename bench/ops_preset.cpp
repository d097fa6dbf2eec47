// Preset `ops`: the protocol suite's micro-ops on rss3 (three parties in this
// process), plus the foundation's arithmetic cases.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "bench_case.hpp"
#include "three_party.hpp"

namespace mpcache::bench {

std::vector<CaseResult> micro_preset(const Options& options);

std::vector<CaseResult> ops_preset(const Options& options) {
  std::vector<CaseResult> out = micro_preset(options);

  const RingTensor values = random_fixed({100000}, 11, -100, 100);
  const RingTensor others = random_fixed({100000}, 12, -100, 100);
  out.push_back(measure_case("compare-100k", 100000, options,
                             [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
                               auto a = co_await p.input(0, owned_by(0, id, values), {100000});
                               auto b = co_await p.input(1, owned_by(1, id, others), {100000});
                               section.begin(id);
                               (void)co_await ops::less_than(p, a, b);
                               section.end(id);
                             }));

  const RingTensor scores = random_fixed({1, 1024}, 13, -10, 10);
  out.push_back(measure_case("softmax-1024", 1024, options,
                             [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
                               auto a = co_await p.input(0, owned_by(0, id, scores), {1, 1024});
                               section.begin(id);
                               (void)co_await ops::softmax_last(p, a);
                               section.end(id);
                             }));
  out.push_back(measure_case("sort-1024", 1024, options,
                             [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
                               auto a = co_await p.input(0, owned_by(0, id, scores), {1, 1024});
                               section.begin(id);
                               (void)co_await ops::topk_network(p, a, 1024);
                               section.end(id);
                             }));
  const ops::LinkModel model{options.link.rtt_s > 0 ? options.link.rtt_s : 0.3e-3,
                             options.link.bytes_per_s > 0 ? options.link.bytes_per_s : 377e6};
  out.push_back(measure_case("top256-of-1024", 256, options,
                             [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
                               auto a = co_await p.input(0, owned_by(0, id, scores), {1, 1024});
                               section.begin(id);
                               (void)co_await ops::topk(p, a, 256, ops::TopKMethod::automatic, model);
                               section.end(id);
                             }));
  out.back().note = ops::topk_rank_cost(1024, 256).seconds(model) <=
                            ops::topk_network_cost(1024).seconds(model)
                        ? "rank-based"
                        : "bitonic network";

  RingTensor indices = RingTensor::from_shape({64});
  for (std::size_t i = 0; i < 64; ++i) indices(i) = (i * 37 + 5) % 64;
  out.push_back(measure_case("one-hot-64-of-64", 64, options,
                             [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
                               auto a = co_await p.input(0, owned_by(0, id, indices), {64});
                               section.begin(id);
                               (void)co_await ops::one_hot(p, a, 64);
                               section.end(id);
                             }));

  // One head, T = 1024 cached tokens, d = 64: q K^T / sqrt(d), softmax, x V.
  const RingTensor q = random_fixed({1, 64}, 14, -1, 1);
  const RingTensor kt = random_fixed({64, 1024}, 15, -1, 1);  // K stored transposed
  const RingTensor v = random_fixed({1024, 64}, 16, -1, 1);
  out.push_back(measure_case(
      "attention-decode-T1024-d64", 64, options,
      [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
        auto qs = co_await p.input(0, owned_by(0, id, q), {1, 64});
        auto ks = co_await p.input(1, owned_by(1, id, kt), {64, 1024});
        auto vs = co_await p.input(1, owned_by(1, id, v), {1024, 64});
        section.begin(id);
        auto scaled = co_await p.truncate(qs, 3);  // q / sqrt(64)
        auto scores_share = co_await p.matmul_trunc(scaled, ks);
        auto probs = co_await ops::softmax_last(p, scores_share);
        (void)co_await p.matmul_trunc(probs, vs);
        section.end(id);
      }));
  return out;
}

}  // namespace mpcache::bench
