// Preset `kernels`: the ring matmul on the shapes GPT-2 runs, each case
// beside a `-scalar` twin that runs the reference loop (what
// ring_matmul_accumulate was before the SIMD kernels) in the same run, so
// the speed-up is measured side by side; the rss3 fused product on the same
// shapes; element-wise add and mul beside a `-loop` twin (the plain loop
// they were before). With --threads N > 1 every fast case also runs on a
// ComputePool of N threads (`-threadsN`). Local compute of one party only:
// no messages, no rounds; `elements` is the multiply-adds of one call (of
// the elements, element-wise). The PRG's AES keystream beside OpenSSL's
// (`-openssl`).
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

CaseResult row(std::string name, std::uint64_t elements, double seconds, int repeat, std::size_t threads,
               std::string note, const char* unit) {
  CaseResult r;
  r.name = std::move(name);
  r.protocol = "local";
  r.transport = "none";
  r.elements = elements;
  r.latency_s = seconds;
  r.repeat = std::max(3, repeat);
  r.threads = threads;
  r.model_s = seconds;  // no traffic: the link adds nothing
  char rate[64];
  std::snprintf(rate, sizeof rate, ", %.2f G %s/s", static_cast<double>(r.elements) / seconds / 1e9, unit);
  r.note = std::move(note) + rate;
  return r;
}

std::string threads_suffix(std::size_t threads) { return "-threads" + std::to_string(threads); }

// Element-wise sizes: the vocabulary's logits (50257) and a prefill-sized tensor.
constexpr std::size_t elementwise_sizes[] = {50257, std::size_t{1} << 21};

// The plain loop ring_add / ring_mul were before the SIMD kernels.
template <class Op>
RingTensor loop(const RingTensor& a, const RingTensor& b, Op op) {
  RingTensor out = RingTensor::from_shape(a.shape());
  const Ring *pa = a.data(), *pb = b.data();
  Ring* po = out.data();
  const std::size_t n = a.size();
  for (std::size_t i = 0; i < n; ++i) po[i] = op(pa[i], pb[i]);
  return out;
}

}  // namespace

std::vector<CaseResult> kernels_preset(const Options& options) {
  std::vector<CaseResult> out;
  std::optional<ComputePool> pool;
  if (options.threads > 1) pool.emplace(options.threads);
  const std::string pooled = threads_suffix(options.threads);
  // A case runs if no --case is given or --case names it or one of its twins.
  auto wanted = [&](const std::string& name, std::initializer_list<const char*> twins) {
    if (options.case_name.empty() || options.case_name == name) return true;
    for (const char* t : twins)
      if (options.case_name == name + t) return true;
    return options.case_name == name + pooled;
  };
  const std::string level = ring_kernel_level();
  for (const MatmulShape& s : shapes) {
    const std::string dims = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
    const std::uint64_t madds = s.m * s.k * s.n;
    const std::string name = "ring-matmul-" + dims;
    if (wanted(name, {"-scalar"})) {
      const RingTensor a = ring_sample({s.m, s.k}, 1), b = ring_sample({s.k, s.n}, 2);
      RingTensor fast = ring_zeros({s.m, s.n}), reference = ring_zeros({s.m, s.n});
      const double t_fast = median_seconds(options.repeat, [&] { ring_matmul_accumulate(fast, a, b); });
      const double t_ref = median_seconds(options.repeat, [&] { ring_matmul_accumulate_reference(reference, a, b); });
      // Both accumulated the same product the same number of times.
      if (fast != reference)
        throw std::logic_error(name + ": the " + level + " kernel disagrees with the scalar loop");
      out.push_back(row(name, madds, t_fast, options.repeat, 1, std::string(s.why) + "; " + level + " kernel", "multiply-adds"));
      out.push_back(row(name + "-scalar", madds, t_ref, options.repeat, 1, std::string(s.why) + "; scalar reference loop", "multiply-adds"));
      if (pool) {
        RingTensor split = ring_zeros({s.m, s.n});
        const double t_pool = median_seconds(options.repeat, [&] { ring_matmul_accumulate(split, a, b, &*pool); });
        if (split != reference) throw std::logic_error(name + pooled + ": the pool changed the result");
        out.push_back(row(name + pooled, madds, t_pool, options.repeat, options.threads,
                          std::string(s.why) + "; " + level + " kernel on " + std::to_string(options.threads) + " threads",
                          "multiply-adds"));
      }
    }
    // The rss3 local product a0 (b0 + b1) + a1 b0 in one pass: two multiply-adds per term.
    const std::string fused = "ring-matmul-rss3-" + dims;
    if (wanted(fused, {})) {
      const RingTensor a0 = ring_sample({s.m, s.k}, 3), a1 = ring_sample({s.m, s.k}, 4);
      const RingTensor b0 = ring_sample({s.k, s.n}, 5), b1 = ring_sample({s.k, s.n}, 6);
      RingTensor one = ring_zeros({s.m, s.n});
      const double t_one = median_seconds(options.repeat, [&] { ring_matmul_rss3_accumulate(one, a0, a1, b0, b1); });
      const std::string why = std::string(s.why) + "; rss3 local product a0 (b0 + b1) + a1 b0, " + level + " kernel";
      out.push_back(row(fused, 2 * madds, t_one, options.repeat, 1, why, "multiply-adds"));
      if (pool) {
        RingTensor split = ring_zeros({s.m, s.n});
        const double t_pool =
            median_seconds(options.repeat, [&] { ring_matmul_rss3_accumulate(split, a0, a1, b0, b1, &*pool); });
        if (split != one) throw std::logic_error(fused + pooled + ": the pool changed the result");
        out.push_back(row(fused + pooled, 2 * madds, t_pool, options.repeat, options.threads,
                          why + " on " + std::to_string(options.threads) + " threads", "multiply-adds"));
      }
    }
  }
  for (const std::size_t n : elementwise_sizes) {
    const RingTensor a = ring_sample({n}, 7), b = ring_sample({n}, 8);
    struct Op {
      const char* name;
      RingTensor (*kernel)(const RingTensor&, const RingTensor&, ComputePool*);
      RingTensor (*loop)(const RingTensor&, const RingTensor&);  // the op inlined in the loop
    };
    const Op ops[] = {{"add", [](const RingTensor& x, const RingTensor& y, ComputePool* p) { return ring_add(x, y, p); },
                       [](const RingTensor& x, const RingTensor& y) { return loop(x, y, std::plus<Ring>{}); }},
                      {"mul", [](const RingTensor& x, const RingTensor& y, ComputePool* p) { return ring_mul(x, y, p); },
                       [](const RingTensor& x, const RingTensor& y) { return loop(x, y, std::multiplies<Ring>{}); }}};
    for (const Op& op : ops) {
      const std::string name = std::string("ring-") + op.name + "-" + std::to_string(n);
      if (!wanted(name, {"-loop"})) continue;
      RingTensor fast, plain;
      const double t_fast = median_seconds(options.repeat, [&] { fast = op.kernel(a, b, nullptr); });
      const double t_loop = median_seconds(options.repeat, [&] { plain = op.loop(a, b); });
      if (fast != plain) throw std::logic_error(name + ": the " + level + " kernel disagrees with the plain loop");
      out.push_back(row(name, n, t_fast, options.repeat, 1, level + " kernel", "elements"));
      out.push_back(row(name + "-loop", n, t_loop, options.repeat, 1, "plain loop (compiled for the baseline x86-64)", "elements"));
      if (pool) {
        RingTensor split;
        const double t_pool = median_seconds(options.repeat, [&] { split = op.kernel(a, b, &*pool); });
        if (split != plain) throw std::logic_error(name + pooled + ": the pool changed the result");
        out.push_back(row(name + pooled, n, t_pool, options.repeat, options.threads,
                          level + " kernel on " + std::to_string(options.threads) + " threads", "elements"));
      }
    }
  }
  // The PRG (every random share and zero-sharing): our AES keystream beside
  // OpenSSL's EVP AES-128-CTR, which it replaced, on a prefill-sized draw.
  for (const std::size_t n : {std::size_t{1} << 21}) {
    const std::string name = "prg-draw-" + std::to_string(n);
    if (!wanted(name, {"-openssl"})) continue;
    const PrgKey key = insecure_prg_key(1, 2);
    const Prg best(key), openssl(key, PrgEngine::openssl);
    RingTensor fast = RingTensor::from_shape({n}), reference = RingTensor::from_shape({n});
    const double t_fast = median_seconds(options.repeat, [&] {
      std::uint64_t block = 0;
      best.fill(5, block, std::span<Ring>(fast.data(), n));
    });
    const double t_ref = median_seconds(options.repeat, [&] {
      std::uint64_t block = 0;
      openssl.fill(5, block, std::span<Ring>(reference.data(), n));
    });
    if (fast != reference) throw std::logic_error(name + ": the " + std::string(best.engine_name()) + " keystream disagrees with OpenSSL's");
    out.push_back(row(name, n, t_fast, options.repeat, 1, std::string("AES-128-CTR, ") + best.engine_name() + " kernel", "elements"));
    out.push_back(row(name + "-openssl", n, t_ref, options.repeat, 1, "AES-128-CTR, OpenSSL EVP (memset, then encrypt in place)", "elements"));
  }
  if (out.empty())
    throw Error(ErrorCode::invalid_argument,
                "preset 'kernels' has no case '" + options.case_name +
                    "' (ring-matmul-1x768x3072, ring-matmul-512x768x768, each with -scalar; ring-matmul-rss3-<same>; "
                    "ring-add-N, ring-mul-N for N = 50257, 2097152, each with -loop; prg-draw-2097152 with -openssl; -threadsN "
                    "with --threads N)");
  return out;
}

}  // namespace mpcache::bench
