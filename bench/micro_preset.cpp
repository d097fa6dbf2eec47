// Preset `micro`: the foundation's micro-ops on rss3, three parties in this
// process on the in-process transport (one thread runs all three parties, so
// latency is their summed local compute plus scheduling).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "bench_case.hpp"
#include "three_party.hpp"

namespace mpcache::bench {

namespace {
RingTensor random_values(const Shape& shape, std::uint64_t seed, int magnitude_bits) {
  RingTensor t = ring_sample(shape, seed);
  for (auto& v : t) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> (64 - magnitude_bits));
  return t;
}

using Op = std::function<Task<Rss3Share>(Rss3&, const Rss3Share&, const Rss3Share&)>;

// Shares a and b (untimed), then times `op`.
CaseResult measure(const std::string& name, const Shape& sa, const Shape& sb,
                   std::uint64_t elements, int magnitude_bits, const Options& options,
                   const Op& op) {
  const RingTensor x = random_values(sa, 1, magnitude_bits), y = random_values(sb, 2, magnitude_bits);
  return measure_case(name, elements, options,
                      [&](Rss3& p, PartyId id, Section& section) -> Task<void> {
                        auto a = co_await p.input(0, owned_by(0, id, x), sa);
                        auto b = co_await p.input(1, owned_by(1, id, y), sb);
                        section.begin(id);
                        (void)co_await op(p, a, b);
                        section.end(id);
                      });
}
}  // namespace

std::vector<CaseResult> micro_preset(const Options& options) {
  constexpr std::size_t million = 1000000;
  std::vector<CaseResult> out;
  out.push_back(measure("mul-1M", {million}, {million}, million, 64, options,
                        [](Rss3& p, const Rss3Share& a, const Rss3Share& b) { return p.mul(a, b); }));
  // Fixed-point operands below 2^8 (26 bits with 18 fraction bits).
  out.push_back(measure("fixed-mul-1M", {million}, {million}, million, 26, options,
                        [](Rss3& p, const Rss3Share& a, const Rss3Share& b) {
                          return p.mul_trunc(a, b);
                        }));
  out.push_back(measure("matvec-1x1024x1024", {1, 1024}, {1024, 1024}, 1024, 20, options,
                        [](Rss3& p, const Rss3Share& a, const Rss3Share& b) {
                          return p.matmul_trunc(a, b);
                        }));
  return out;
}

}  // namespace mpcache::bench
