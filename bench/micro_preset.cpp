// Preset `micro`: the foundation's micro-ops on rss3, three parties in this
// process on the in-process transport (one thread runs all three parties, so
// latency is their summed local compute plus scheduling).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "bench_case.hpp"

namespace mpcache::bench {

namespace {
using Clock = std::chrono::steady_clock;

RingTensor random_values(const Shape& shape, std::uint64_t seed, int magnitude_bits) {
  RingTensor t = ring_sample(shape, seed);
  for (auto& v : t) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> (64 - magnitude_bits));
  return t;
}

struct Sample {
  double seconds = 0;
  std::array<CostCounters, 3> costs;
  std::uint64_t rounds = 0;
};

using Op = std::function<Task<Rss3Share>(Rss3&, const Rss3Share&, const Rss3Share&)>;

// Shares a and b, then times `op` across the three parties.
Sample run_once(const Shape& sa, const Shape& sb, int magnitude_bits, const Op& op) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  const RingTensor x = random_values(sa, 1, magnitude_bits), y = random_values(sb, 2, magnitude_bits);
  std::array<CostCounters, 3> before, after;
  std::array<Clock::time_point, 3> start, stop;
  auto party = [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id));
    Rss3 p = state->session();
    auto a = co_await p.input(0, id == 0 ? std::optional(x) : std::nullopt, sa);
    auto b = co_await p.input(1, id == 1 ? std::optional(y) : std::nullopt, sb);
    (void)co_await p.reveal(p.sub(a, a));  // line the parties up
    before[id] = network.endpoint(id).costs();
    start[id] = Clock::now();
    auto z = co_await op(p, a, b);
    stop[id] = Clock::now();
    after[id] = network.endpoint(id).costs();
    (void)z;
  };
  run_parties(scheduler, network, party);
  Sample s;
  s.seconds = std::chrono::duration<double>(*std::max_element(stop.begin(), stop.end()) -
                                            *std::min_element(start.begin(), start.end()))
                  .count();
  std::uint64_t clock_before = 0, clock_after = 0;
  for (int i = 0; i < 3; ++i) {
    s.costs[i] = after[i] - before[i];
    clock_before = std::max(clock_before, before[i].rounds);
    clock_after = std::max(clock_after, after[i].rounds);
  }
  s.rounds = clock_after - clock_before;
  return s;
}

CaseResult measure(const std::string& name, const Shape& sa, const Shape& sb,
                   std::uint64_t elements, int magnitude_bits, const Options& options,
                   const Op& op) {
  std::vector<Sample> samples;
  for (int r = 0; r < options.repeat; ++r) samples.push_back(run_once(sa, sb, magnitude_bits, op));
  std::vector<double> times;
  for (const auto& s : samples) times.push_back(s.seconds);
  std::sort(times.begin(), times.end());
  const Sample& s = samples.front();  // costs are identical in every repeat
  CaseResult c;
  c.name = name;
  c.protocol = "rss3";
  c.transport = "in-process";
  c.elements = elements;
  c.latency_s = times[times.size() / 2];
  for (const auto& k : s.costs) {
    c.bytes_max_party = std::max(c.bytes_max_party, k.payload_bytes_sent());
    c.messages_max_party = std::max(c.messages_max_party, k.messages_sent());
    c.bytes_total += k.payload_bytes_sent();
    c.frame_bytes_total += k.frame_bytes_sent();
  }
  c.rounds = s.rounds;
  c.repeat = options.repeat;
  return c;
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
