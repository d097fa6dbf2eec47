// Preset `kernels`: the ring matmul on the shapes GPT-2 runs, each case
// beside a `-scalar` twin that runs the reference loop (what
// ring_matmul_accumulate was before the SIMD kernels) in the same run, so
// the speed-up is measured side by side. Local compute of one party only:
// no messages, no rounds; `elements` is the multiply-adds of one call.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <chrono>
import mpcache;
#include "bench_case.hpp"

namespace mpcache::bench {
namespace {

struct MatmulShape {
  std::size_t m, k, n;
  const char* why;
};

// Decode with the KV cache multiplies one row by each weight matrix; the
// prefill multiplies the whole prompt (512 tokens here).
constexpr MatmulShape shapes[] = {
    {1, 768, 3072, "decode: GPT-2 MLP up-projection, one token"},
    {512, 768, 768, "prefill: GPT-2 attention projection, 512 tokens"},
};

// Median wall time of `repeat` calls (at least 3) of `call`.
template <class Call>
double median_seconds(int repeat, Call&& call) {
  std::vector<double> times;
  for (int i = 0; i < std::max(3, repeat); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

CaseResult row(std::string name, const MatmulShape& s, double seconds, int repeat, std::string note) {
  CaseResult r;
  r.name = std::move(name);
  r.protocol = "local";
  r.transport = "none";
  r.elements = s.m * s.k * s.n;
  r.latency_s = seconds;
  r.repeat = std::max(3, repeat);
  r.model_s = seconds;  // no traffic: the link adds nothing
  char rate[64];
  std::snprintf(rate, sizeof rate, ", %.2f G multiply-adds/s", static_cast<double>(r.elements) / seconds / 1e9);
  r.note = std::move(note) + rate;
  return r;
}

}  // namespace

std::vector<CaseResult> kernels_preset(const Options& options) {
  std::vector<CaseResult> out;
  for (const MatmulShape& s : shapes) {
    const std::string name = "ring-matmul-" + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                             std::to_string(s.n);
    if (!options.case_name.empty() && options.case_name != name && options.case_name != name + "-scalar")
      continue;
    const RingTensor a = ring_sample({s.m, s.k}, 1), b = ring_sample({s.k, s.n}, 2);
    RingTensor fast = ring_zeros({s.m, s.n}), reference = ring_zeros({s.m, s.n});
    const double t_fast = median_seconds(options.repeat, [&] { ring_matmul_accumulate(fast, a, b); });
    const double t_ref = median_seconds(options.repeat, [&] { ring_matmul_accumulate_reference(reference, a, b); });
    // Both accumulated the same product the same number of times.
    if (fast != reference)
      throw std::logic_error(name + ": the " + ring_kernel_level() + " kernel disagrees with the scalar loop");
    out.push_back(row(name, s, t_fast, options.repeat, std::string(s.why) + "; " + ring_kernel_level() + " kernel"));
    out.push_back(row(name + "-scalar", s, t_ref, options.repeat, std::string(s.why) + "; scalar reference loop"));
  }
  if (out.empty())
    throw Error(ErrorCode::invalid_argument, "preset 'kernels' has no case '" + options.case_name +
                                                 "' (ring-matmul-1x768x3072, ring-matmul-512x768x768, each with -scalar)");
  return out;
}

}  // namespace mpcache::bench
