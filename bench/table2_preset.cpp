// Preset `paper-table2`: select the top 25% of T = 1024 tokens (token-wise)
// versus of C = 64 clusters of 16 tokens (cluster-wise), then gather K and V
// (head dimension 128) by one-hot matrices. The `-gather` cases start from
// secret indices (one-hot + gather only, the paper's "token gathering").
// Paper (3PC LAN): token-wise 4.78 s / 416 MB, cluster-wise 0.065 s / 1.125 MB.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "bench_case.hpp"
#include "three_party.hpp"

namespace mpcache::bench {

namespace {
constexpr std::size_t tokens = 1024, clusters = 64, per_cluster = tokens / clusters, dim = 128;

// Select (optionally), one-hot, gather K and V concurrently.
template <bool with_topk>
Task<void> select_and_gather(Rss3& p, const Rss3Share& scores_or_indices, std::size_t n,
                             std::size_t k, const Rss3Share& key_cache, const Rss3Share& value_cache,
                             bool clustered, const ops::LinkModel& model) {
  Rss3Share idx;
  if constexpr (with_topk) {
    auto top = co_await ops::topk(p, scores_or_indices, k, ops::TopKMethod::automatic, model);
    idx = ops::reshape<Rss3>(top.indices, {k});
  } else {
    idx = scores_or_indices;
  }
  auto rows = co_await ops::one_hot(p, idx, n);
  Rss3 pk = p.fork(), pv = p.fork();
  if (clustered) {
    (void)co_await when_all(ops::cluster_gather(pk, rows, key_cache),
                            ops::cluster_gather(pv, rows, value_cache));
  } else {
    (void)co_await when_all(ops::token_gather(pk, rows, key_cache),
                            ops::token_gather(pv, rows, value_cache));
  }
}
}  // namespace

std::vector<CaseResult> table2_preset(const Options& options) {
  const ops::LinkModel model{options.link.rtt_s > 0 ? options.link.rtt_s : 0.3e-3,
                             options.link.bytes_per_s > 0 ? options.link.bytes_per_s : 377e6};
  const RingTensor keys = random_fixed({tokens, dim}, 21, -2, 2);
  const RingTensor values = random_fixed({tokens, dim}, 22, -2, 2);
  const RingTensor token_scores = random_fixed({1, tokens}, 23, -10, 10);
  const RingTensor cluster_scores = random_fixed({1, clusters}, 24, -10, 10);
  RingTensor token_idx = RingTensor::from_shape({tokens / 4});
  for (std::size_t i = 0; i < token_idx.size(); ++i) token_idx(i) = (i * 389 + 7) % tokens;
  RingTensor cluster_idx = RingTensor::from_shape({clusters / 4});
  for (std::size_t i = 0; i < cluster_idx.size(); ++i) cluster_idx(i) = (i * 23 + 3) % clusters;

  std::vector<CaseResult> out;
  auto run = [&](const std::string& name, bool clustered, bool with_topk) {
    const std::size_t n = clustered ? clusters : tokens;
    const std::size_t k = n / 4;
    const RingTensor& input = with_topk ? (clustered ? cluster_scores : token_scores)
                                        : (clustered ? cluster_idx : token_idx);
    CaseResult c = measure_case(
        name, k, options, [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
          auto in = co_await p.input(0, owned_by(0, id, input), shape_of(input));
          auto kc = co_await p.input(1, owned_by(1, id, keys), {tokens, dim});
          auto vc = co_await p.input(1, owned_by(1, id, values), {tokens, dim});
          if (clustered) {
            kc = ops::reshape<Rss3>(kc, {clusters, per_cluster, dim});
            vc = ops::reshape<Rss3>(vc, {clusters, per_cluster, dim});
          }
          section.begin(id);
          if (with_topk)
            co_await select_and_gather<true>(p, in, n, k, kc, vc, clustered, model);
          else
            co_await select_and_gather<false>(p, in, n, k, kc, vc, clustered, model);
          section.end(id);
        });
    c.note = clustered ? "paper: 0.065 s / 1.125 MB" : "paper: 4.78 s / 416 MB";
    out.push_back(c);
  };
  run("table2-token", false, true);
  run("table2-cluster", true, true);
  run("table2-token-gather", false, false);
  run("table2-cluster-gather", true, false);
  return out;
}

}  // namespace mpcache::bench
