// mpcache: command line. `mpcache decode` runs the main job, a private decode
// with MPCache; `mpcache demo` the 3-party arithmetic demo.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <CLI/CLI.hpp>
import mpcache;
#include "demo.hpp"
#include "private_decode.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mpcache: private LLM inference with MPC-friendly KV-cache eviction"};
  app.require_subcommand(1);
  mpcache::tools::DemoOptions demo;
  auto* demo_cmd = app.add_subcommand("demo", "3-party secure (x W + b)^2 with rss3, checked against float64");
  demo_cmd->add_option("--in", demo.in_features, "input features")->check(CLI::Range(1, 1 << 14));
  demo_cmd->add_option("--out", demo.out_features, "output features")->check(CLI::Range(4, 1 << 14));
  demo_cmd->add_option("--seed", demo.seed, "seed of the random example data");
  mpcache::tools::DecodeOptions decode;
  decode.model_dir = std::string(MPCACHE_SOURCE_DIR) + "/tools/model/austen-byte";
  decode.prompt =
      "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
      "must be in want of a wife. However little known the feelings";
  auto* decode_cmd = app.add_subcommand("decode", "private greedy decode with MPCache under rss3 (3 parties in one process), checked against float64");
  decode_cmd->add_option("--model", decode.model_dir, "model directory (config.json + model.safetensors)");
  decode_cmd->add_option("--prompt", decode.prompt, "prompt text (bytes)");
  decode_cmd->add_option("--tokens", decode.new_tokens, "bytes to generate")->check(CLI::Range(1, 256));
  decode_cmd->add_option("--budget", decode.budget, "tokens attended per KV head per step (MPCache)");
  decode_cmd->add_option("--policy", decode.policy, "mpcache or full")->check(CLI::IsMember({"mpcache", "full"}));
  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo_cmd) return mpcache::tools::run_demo(demo);
    if (*decode_cmd) return mpcache::tools::run_private_decode(decode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache: %s\n", e.what());
    return 1;
  }
  return 0;
}
