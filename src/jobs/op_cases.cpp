// Workloads of the op presets, generic over the backend; see op_cases.hpp. Each case shares its
// inputs, times the operation, then party 0 checks a few outputs against a
// float64 or exact clear-text result, so a benchmark of a broken protocol
// fails instead of reporting the speed of garbage.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "op_cases.hpp"
#include "computed.hpp"

namespace mpcache::jobs {
namespace {

constexpr std::size_t million = 1000000;

// Integers of `magnitude_bits` signed bits (fixed-point values below
// 2^(magnitude_bits - 1 - 18)), from the ring's sampler.
RingTensor random_values(const Shape& shape, std::uint64_t seed, int magnitude_bits) {
  RingTensor t = ring_sample(shape, seed);
  for (auto& v : t) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> (64 - magnitude_bits));
  return t;
}

// Fixed-point encodings of reals uniform in [lo, hi).
RingTensor random_fixed(const Shape& shape, std::uint64_t seed, double lo, double hi) {
  const FixedPoint fp;
  RingTensor bits = ring_sample(shape, seed);
  RingTensor out = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < out.size(); ++i)
    out.data()[i] = fp.encode(lo + (hi - lo) * static_cast<double>(bits.data()[i] >> 11) * 0x1p-53);
  return out;
}

std::optional<RingTensor> owned(PartyId owner, PartyId id, const RingTensor& v) {
  return owner == id ? std::optional<RingTensor>(v) : std::nullopt;
}

double decode(Ring v) { return FixedPoint{}.decode(v); }

// Party 0 learns the first `n` elements of `a` (row-major); others get nullopt.
template <Protocol P>
Task<std::optional<RingTensor>> reveal_first(P& p, const typename P::Share& a, std::size_t n) {
  n = std::min(n, element_count(P::shape(a)));
  const auto first = P::apply(a, [n](const RingTensor& t) {
    RingTensor out = RingTensor::from_shape({n});
    std::copy(t.data(), t.data() + n, out.data());
    return out;
  });
  co_return co_await p.reveal_to(0, first);
}

// Descending order with ties broken by lower index, as ops::topk promises.
std::vector<std::size_t> descending_order(const RingTensor& scores) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // std::sort with the tie-break spelled out: libstdc++-12's stable_sort uses
  // get_temporary_buffer, which clang-19 flags as deprecated.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto sa = static_cast<std::int64_t>(scores.data()[a]), sb = static_cast<std::int64_t>(scores.data()[b]);
    return sa != sb ? sa > sb : a < b;
  });
  return order;
}

// A case whose timed section is `op(p, a, b)` on two inputs from parties 0
// and 1; `check(opened first outputs)` runs at party 0.
template <class Op, class Check>
OpCase binary_case(std::string name, std::uint64_t elements, RingTensor x, RingTensor y, Op op,
                   Check check) {
  return {std::move(name), elements, "",
          case_body([x = std::move(x), y = std::move(y), op, check]<class P>(P& p, PartyId id, CaseClock& clock) -> Task<bool> {
            // Operands stand for computed values (computed.hpp), weights too:
            // matvec measures a fresh product.
            auto a = computed<P>(co_await p.input(0, owned(0, id, x), shape_of(x)));
            auto b = computed<P>(co_await p.input(1, owned(1, id, y), shape_of(y)));
            co_await clock.begin();
            typename P::Share c = co_await op(p, a, b);
            clock.end();
            auto opened = co_await reveal_first(p, c, 8);
            co_return id != 0 || check(x, y, *opened);
          })};
}

OpCase softmax_case(const RingTensor& scores) {
  return {"softmax-1024", 1024, "", case_body([scores]<class P>(P& p, PartyId id, CaseClock& clock) -> Task<bool> {
            auto a = co_await p.input(0, owned(0, id, scores), {1, 1024});
            co_await clock.begin();
            auto probs = co_await ops::softmax_last(p, a);
            clock.end();
            auto opened = co_await reveal_first(p, probs, 8);
            if (id != 0) co_return true;
            double m = -1e300, sum = 0;
            for (std::size_t i = 0; i < 1024; ++i) m = std::max(m, decode(scores(0, i)));
            for (std::size_t i = 0; i < 1024; ++i) sum += std::exp(decode(scores(0, i)) - m);
            for (std::size_t k = 0; k < 8; ++k)
              if (std::fabs(decode((*opened)(k)) - std::exp(decode(scores(0, k)) - m) / sum) > 1e-3)
                co_return false;
            co_return true;
          })};
}

// Comparison width of fixed-point values below 2^magnitude_bits (reals).
int bounded_width(int magnitude_bits) { return ops::comparison_width(FixedPoint{}.frac_bits(), magnitude_bits); }

// Top-k values and indices (sort = top-n by the network); scores within +-16.
OpCase topk_case(std::string name, const RingTensor& scores, std::size_t k, ops::TopKMethod method,
                 Link link, std::string note) {
  return {std::move(name), k, std::move(note),
          case_body([scores, k, method, link]<class P>(P& p, PartyId id, CaseClock& clock) -> Task<bool> {
            auto a = co_await p.input(0, owned(0, id, scores), shape_of(scores));
            co_await clock.begin();
            auto top = co_await ops::topk(p, a, k, method, link, bounded_width(4));
            clock.end();
            auto values = co_await reveal_first(p, top.values, 8);
            auto indices = co_await reveal_first(p, top.indices, 8);
            if (id != 0) co_return true;
            const auto order = descending_order(scores);
            for (std::size_t j = 0; j < values->size(); ++j)
              if ((*values)(j) != scores.data()[order[j]] || (*indices)(j) != Ring(order[j]))
                co_return false;
            co_return true;
          })};
}

OpCase one_hot_case(const RingTensor& indices, std::size_t classes) {
  return {"one-hot-64-of-64", indices.size(), "",
          case_body([indices, classes]<class P>(P& p, PartyId id, CaseClock& clock) -> Task<bool> {
            auto a = co_await p.input(0, owned(0, id, indices), shape_of(indices));
            co_await clock.begin();
            auto rows = co_await ops::one_hot(p, a, classes);
            clock.end();
            auto opened = co_await reveal_first(p, rows, 2 * classes);
            if (id != 0) co_return true;
            for (std::size_t r = 0; r < 2; ++r)
              for (std::size_t c = 0; c < classes; ++c)
                if ((*opened)(r * classes + c) != Ring(indices(r) == c ? 1 : 0)) co_return false;
            co_return true;
          })};
}

// One head, T = 1024 cached tokens, d = 64: q K^T / sqrt(d), softmax, x V.
OpCase attention_case() {
  const RingTensor q = random_fixed({1, 64}, 14, -1, 1);
  const RingTensor kt = random_fixed({64, 1024}, 15, -1, 1);  // K stored transposed
  const RingTensor v = random_fixed({1024, 64}, 16, -1, 1);
  return {"attention-decode-T1024-d64", 64, "",
          case_body([q, kt, v]<class P>(P& p, PartyId id, CaseClock& clock) -> Task<bool> {
            auto qs = co_await p.input(0, owned(0, id, q), {1, 64});
            auto ks = computed<P>(co_await p.input(1, owned(1, id, kt), {64, 1024}));
            auto vs = computed<P>(co_await p.input(1, owned(1, id, v), {1024, 64}));
            co_await clock.begin();
            auto scaled = co_await p.truncate(qs, 3);  // q / sqrt(64)
            auto scores = co_await p.matmul_trunc(scaled, ks);
            auto probs = co_await ops::softmax_last(p, scores);
            auto out = co_await p.matmul_trunc(probs, vs);
            clock.end();
            auto opened = co_await reveal_first(p, out, 8);
            if (id != 0) co_return true;
            std::vector<double> s(1024);
            double m = -1e300, sum = 0;
            for (std::size_t t = 0; t < 1024; ++t) {
              for (std::size_t i = 0; i < 64; ++i) s[t] += decode(q(0, i)) / 8 * decode(kt(i, t));
              m = std::max(m, s[t]);
            }
            for (auto& e : s) sum += (e = std::exp(e - m));
            for (std::size_t j = 0; j < 8; ++j) {
              double want = 0;
              for (std::size_t t = 0; t < 1024; ++t) want += s[t] / sum * decode(v(t, j));
              if (std::fabs(decode((*opened)(j)) - want) > 1e-2) co_return false;
            }
            co_return true;
          })};
}

std::vector<OpCase> ops_only_cases(const Link& link) {
  std::vector<OpCase> out;
  out.push_back(binary_case(
      "compare-100k", 100000, random_fixed({100000}, 11, -100, 100), random_fixed({100000}, 12, -100, 100),
      // Values within +-128: 27-bit comparisons.
      []<class P>(P& p, const typename P::Share& a, const typename P::Share& b) { return ops::less_than(p, a, b, bounded_width(7)); },
      [](const RingTensor& x, const RingTensor& y, const RingTensor& got) {
        for (std::size_t k = 0; k < got.size(); ++k)
          if (got(k) != Ring(static_cast<std::int64_t>(x(k)) < static_cast<std::int64_t>(y(k)) ? 1 : 0))
            return false;
        return true;
      }));
  const RingTensor scores = random_fixed({1, 1024}, 13, -10, 10);
  out.push_back(softmax_case(scores));
  out.push_back(topk_case("sort-1024", scores, 1024, ops::TopKMethod::network, link, "bitonic network"));
  const auto method = ops::resolve_topk_method<Rss3Costs>(ops::TopKMethod::automatic, 1024, 256, link, bounded_width(4));
  out.push_back(topk_case("top256-of-1024", scores, 256, ops::TopKMethod::automatic, link,
                          method == ops::TopKMethod::rank     ? "rank-based"
                          : method == ops::TopKMethod::blocks ? "blocks of 256, merged"
                                                              : "bitonic network"));
  RingTensor indices = RingTensor::from_shape({64});
  for (std::size_t i = 0; i < 64; ++i) indices(i) = (i * 37 + 5) % 64;
  out.push_back(one_hot_case(indices, 64));
  out.push_back(attention_case());
  return out;
}

// Paper Table 2: the top 25% of T = 1024 tokens (token-wise) versus of C = 64
// clusters of 16 tokens (cluster-wise), then K and V (d = 128) gathered by
// one-hot matrices, concurrently. `-gather` cases start from secret indices
// (one-hot + gather only, the paper's "token gathering").
// Paper (3PC LAN): token-wise 4.78 s / 416 MB, cluster-wise 0.065 s / 1.125 MB.
std::vector<OpCase> table2_cases(const Link& link) {
  constexpr std::size_t tokens = 1024, clusters = 64, per_cluster = tokens / clusters, dim = 128;
  const RingTensor keys = random_fixed({tokens, dim}, 21, -2, 2);
  const RingTensor values = random_fixed({tokens, dim}, 22, -2, 2);
  const RingTensor token_scores = random_fixed({1, tokens}, 23, -10, 10);
  const RingTensor cluster_scores = random_fixed({1, clusters}, 24, -10, 10);
  RingTensor token_idx = RingTensor::from_shape({tokens / 4});
  for (std::size_t i = 0; i < token_idx.size(); ++i) token_idx(i) = (i * 389 + 7) % tokens;
  RingTensor cluster_idx = RingTensor::from_shape({clusters / 4});
  for (std::size_t i = 0; i < cluster_idx.size(); ++i) cluster_idx(i) = (i * 23 + 3) % clusters;

  auto make = [&](std::string name, bool clustered, bool with_topk) -> OpCase {
    const std::size_t n = clustered ? clusters : tokens, k = n / 4;
    const RingTensor& input = with_topk ? (clustered ? cluster_scores : token_scores)
                                        : (clustered ? cluster_idx : token_idx);
    // The first selected item: the best score, or the first given index.
    const std::size_t first = with_topk ? descending_order(input)[0] : static_cast<std::size_t>(input.data()[0]);
    return {std::move(name), k, clustered ? "paper: 0.065 s / 1.125 MB" : "paper: 4.78 s / 416 MB",
            case_body([=]<class P>(P& p, PartyId id, CaseClock& clock) -> Task<bool> {
              auto in = co_await p.input(0, owned(0, id, input), shape_of(input));
              auto kc = computed<P>(co_await p.input(1, owned(1, id, keys), {tokens, dim}));
              auto vc = computed<P>(co_await p.input(1, owned(1, id, values), {tokens, dim}));
              if (clustered) {
                kc = ops::reshape<P>(kc, {clusters, per_cluster, dim});
                vc = ops::reshape<P>(vc, {clusters, per_cluster, dim});
              }
              co_await clock.begin();
              typename P::Share idx;
              if (with_topk) {
                auto top = co_await ops::topk(p, in, k, ops::TopKMethod::automatic, link, bounded_width(4));
                idx = ops::reshape<P>(top.indices, {k});
              } else {
                idx = in;
              }
              auto rows = co_await ops::one_hot(p, idx, n);
              P pk = p.fork(), pv = p.fork();
              typename P::Share gk, gv;
              if (clustered) {
                std::tie(gk, gv) = co_await when_all(ops::cluster_gather(pk, rows, kc),
                                                     ops::cluster_gather(pv, rows, vc));
              } else {
                std::tie(gk, gv) = co_await when_all(ops::token_gather(pk, rows, kc),
                                                     ops::token_gather(pv, rows, vc));
              }
              clock.end();
              // Row 0 of the gathered keys is token `first`, or the first
              // token of cluster `first`.
              auto opened = co_await reveal_first(p, gk, dim);
              if (id != 0) co_return true;
              const std::size_t row = clustered ? first * per_cluster : first;
              for (std::size_t j = 0; j < dim; ++j)
                if ((*opened)(j) != keys(row, j)) co_return false;
              co_return true;
            })};
  };
  std::vector<OpCase> out;
  out.push_back(make("table2-token", false, true));
  out.push_back(make("table2-cluster", true, true));
  out.push_back(make("table2-token-gather", false, false));
  out.push_back(make("table2-cluster-gather", true, false));
  return out;
}

}  // namespace

std::vector<OpCase> micro_cases() {
  std::vector<OpCase> out;
  out.push_back(binary_case(
      "mul-1M", million, random_values({million}, 1, 64), random_values({million}, 2, 64),
      []<class P>(P& p, const typename P::Share& a, const typename P::Share& b) { return p.mul(a, b); },
      [](const RingTensor& x, const RingTensor& y, const RingTensor& got) {
        for (std::size_t k = 0; k < got.size(); ++k)
          if (got(k) != Ring(x(k) * y(k))) return false;
        return true;
      }));
  // Fixed-point operands below 2^8 (26 bits with 18 fraction bits).
  out.push_back(binary_case(
      "fixed-mul-1M", million, random_values({million}, 1, 26), random_values({million}, 2, 26),
      []<class P>(P& p, const typename P::Share& a, const typename P::Share& b) { return p.mul_trunc(a, b); },
      [](const RingTensor& x, const RingTensor& y, const RingTensor& got) {
        for (std::size_t k = 0; k < got.size(); ++k)
          if (std::fabs(decode(got(k)) - decode(x(k)) * decode(y(k))) > 1e-4) return false;
        return true;
      }));
  out.push_back(binary_case(
      "matvec-1x1024x1024", 1024, random_values({1, 1024}, 1, 20), random_values({1024, 1024}, 2, 20),
      []<class P>(P& p, const typename P::Share& a, const typename P::Share& b) { return p.matmul_trunc(a, b); },
      [](const RingTensor& x, const RingTensor& y, const RingTensor& got) {
        for (std::size_t k = 0; k < got.size(); ++k) {
          double want = 0;
          for (std::size_t i = 0; i < 1024; ++i) want += decode(x(0, i)) * decode(y(i, k));
          if (std::fabs(decode(got(k)) - want) > 1e-2) return false;
        }
        return true;
      }));
  return out;
}

std::vector<OpCase> preset_cases(const std::string& preset, const Link& link) {
  if (preset == "micro") return micro_cases();
  if (preset == "ops") {
    auto out = micro_cases();
    for (auto& c : ops_only_cases(link)) out.push_back(std::move(c));
    return out;
  }
  if (preset == "paper-table2") return table2_cases(link);
  throw Error(ErrorCode::invalid_argument, "unknown preset '" + preset + "' (micro, ops, paper-table2)");
}

std::vector<OpCase> cases_named(const std::string& name, const Link& link) {
  if (name == "micro" || name == "ops" || name == "paper-table2") return preset_cases(name, link);
  std::string names;
  for (const char* preset : {"ops", "paper-table2"})
    for (auto& c : preset_cases(preset, link)) {
      if (c.name == name) return {std::move(c)};
      names += (names.empty() ? "" : ", ") + c.name;
    }
  throw Error(ErrorCode::invalid_argument,
              "unknown case '" + name + "' (micro, ops, paper-table2, " + names + ")");
}

}  // namespace mpcache::jobs
