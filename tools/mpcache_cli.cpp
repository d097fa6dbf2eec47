// mpcache: command line. `mpcache demo` runs the 3-party arithmetic demo.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <CLI/CLI.hpp>
import mpcache;
#include "demo.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mpcache: private LLM inference with MPC-friendly KV-cache eviction"};
  app.require_subcommand(1);
  mpcache::tools::DemoOptions demo;
  auto* demo_cmd = app.add_subcommand("demo", "3-party secure (x W + b)^2 with rss3, checked against float64");
  demo_cmd->add_option("--in", demo.in_features, "input features")->check(CLI::Range(1, 1 << 14));
  demo_cmd->add_option("--out", demo.out_features, "output features")->check(CLI::Range(4, 1 << 14));
  demo_cmd->add_option("--seed", demo.seed, "seed of the random example data");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo_cmd) return mpcache::tools::run_demo(demo);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache: %s\n", e.what());
    return 1;
  }
  return 0;
}
