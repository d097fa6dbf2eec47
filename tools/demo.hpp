#pragma once

namespace mpcache::tools {

struct DemoOptions {
  std::size_t in_features = 256;
  std::size_t out_features = 64;
  std::uint64_t seed = 1;
};

// Three parties in this process: the client (0) holds x, the model owner (1)
// holds W and b; they compute y = (x W + b)^2 elementwise under rss3 and only
// the client learns y. Returns 0 when y matches float64 within the bound.
int run_demo(const DemoOptions& options);

}  // namespace mpcache::tools
