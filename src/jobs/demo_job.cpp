// The arithmetic demo's computation and check (see demo_job.hpp): a quick
// end-to-end check of a cluster (`mpcache demo` prints it, tools/demo.cpp;
// job `demo` of party_job.hpp runs it over TCP). The main job is private
// generation (`mpcache generate`).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <random>
import mpcache;
#include "demo_job.hpp"

namespace mpcache::jobs {

DemoData demo_data(const DemoOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  DemoData d{RealTensor::from_shape({1, o.in_features}),
             RealTensor::from_shape({o.in_features, o.out_features}),
             RealTensor::from_shape({1, o.out_features})};
  const double w_scale = 1.0 / std::sqrt(static_cast<double>(o.in_features));
  for (auto& v : d.x) v = unit(rng);
  for (auto& v : d.w) v = unit(rng) * w_scale;
  for (auto& v : d.b) v = unit(rng) * 0.1;
  return d;
}

Task<std::optional<RingTensor>> demo_party(Rss3& p, PartyId id, const DemoData& data) {
  const FixedPoint fp;
  const std::size_t in = data.w.shape()[0], out = data.w.shape()[1];
  // The three inputs are independent: forks run them concurrently, so they
  // share one round. The bias is the model owner's secret too.
  Rss3 fx = p.fork(), fw = p.fork(), fb = p.fork();
  auto [xs, ws, bs] = co_await when_all(
      fx.input(0, id == 0 ? std::optional(fp.encode(data.x)) : std::nullopt, {1, in}),
      fw.input(1, id == 1 ? std::optional(fp.encode(data.w)) : std::nullopt, {in, out}),
      fb.input(1, id == 1 ? std::optional(fp.encode(data.b)) : std::nullopt, {1, out}));
  auto h = p.add(co_await p.matmul_trunc(xs, ws), bs);
  auto y = co_await p.mul_trunc(h, h);
  co_return co_await p.reveal_to(0, y);
}

DemoCheck demo_check(const DemoData& data, const RingTensor& y_encoded) {
  const FixedPoint fp;
  const std::size_t in = data.w.shape()[0], out = data.w.shape()[1];
  DemoCheck check{fp.decode(y_encoded)};
  for (std::size_t j = 0; j < out; ++j) {
    double h = data.b(0, j), h_abs = std::fabs(data.b(0, j));
    for (std::size_t k = 0; k < in; ++k) {
      h += data.x(0, k) * data.w(k, j);
      h_abs += std::fabs(data.x(0, k) * data.w(k, j));
    }
    const double h_err = (static_cast<double>(in) * 2 + 2) * 0x1p-18;
    check.bound = std::max(check.bound, 2 * h_abs * h_err + h_err * h_err + 2 * 0x1p-18);
    check.max_error = std::max(check.max_error, std::fabs(check.y(0, j) - h * h));
  }
  return check;
}

}  // namespace mpcache::jobs
