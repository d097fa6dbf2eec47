// `mpcache demo` (see demo.hpp): the arithmetic demo of src/jobs/demo_job.cpp,
// three parties in this process, printed.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
import mpcache;
#include "demo.hpp"

namespace mpcache::tools {

int run_demo(const jobs::DemoOptions& o) {
  const jobs::DemoData data = jobs::demo_data(o);
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> costs;
  auto party = [&](PartyId id) -> Task<std::optional<RingTensor>> {
    auto state = co_await Rss3Party::setup(network.endpoint(id));
    const CostCounters start = network.endpoint(id).costs();
    Rss3 p = state->session();
    auto out = co_await jobs::demo_party(p, id, data);
    costs[id] = network.endpoint(id).costs() - start;
    co_return out;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto results = run_parties(scheduler, network, party);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const jobs::DemoCheck check = jobs::demo_check(data, *results[0]);
  const RealTensor& y = check.y;
  std::printf("mpcache demo: y = (x W + b)^2 under rss3, 3 parties in one process\n");
  std::printf("  x: 1x%zu (client, party 0)   W: %zux%zu, b: 1x%zu (model owner, party 1)\n",
              o.in_features, o.in_features, o.out_features, o.out_features);
  std::printf("  only party 0 learned y; parties 1 and 2 got: %s, %s\n",
              results[1] ? "a value (BUG)" : "nothing", results[2] ? "a value (BUG)" : "nothing");
  std::printf("  y[0..3] = %.6f %.6f %.6f %.6f\n", y(0, 0), y(0, 1), y(0, 2), y(0, 3));
  std::printf("  max |y - float64| = %.3g (bound %.3g)\n", check.max_error, check.bound);
  std::printf("  wall time %.4f s (setup included)\n", seconds);
  for (PartyId id = 0; id < 3; ++id)
    std::printf("  party %u: sent %llu payload bytes in %llu messages, %llu rounds\n", id,
                static_cast<unsigned long long>(costs[id].payload_bytes_sent()),
                static_cast<unsigned long long>(costs[id].messages_sent()),
                static_cast<unsigned long long>(costs[id].rounds));
  const bool ok = check.ok() && !results[1] && !results[2];
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace mpcache::tools
