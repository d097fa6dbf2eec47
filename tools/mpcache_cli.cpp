// mpcache: command line. `mpcache decode` runs the main job, a private decode
// with MPCache; `mpcache demo` the 3-party arithmetic demo.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <CLI/CLI.hpp>
import mpcache;
#include "demo.hpp"
#include "private_decode.hpp"
#include "party.hpp"

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

  mpcache::tools::PartyOptions party;
  auto* party_cmd = app.add_subcommand("party", "run one party of a multi-process job over TCP");
  party_cmd->add_option("--config", party.config, "cluster config (JSON)")->required();
  party_cmd->add_option("--id", party.id, "this party's id (index in the config)")->required();
  const std::vector<std::string> transports = {"auto", "uring", "asio"};
  const auto link_check = CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          (void)mpcache::link_named(s);
          return {};
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      "lan|wan|none|RTT_MS:MBYTES_PER_S");
  // Jobs: demo, or benchmark cases (bench/op_cases.hpp), checked when the job starts.
  const std::string jobs_help =
      "demo, a benchmark preset (micro, ops, paper-table2) or one of its cases (mul-1M, "
      "fixed-mul-1M, matvec, compare-100k, softmax-1024, table2-cluster, ...)";
  party_cmd->add_option("--transport", party.transport, "auto (io_uring, else asio), uring or asio")
      ->check(CLI::IsMember(transports));
  party_cmd->add_option("--link", party.link, "emulated link: lan, wan, none or RTT_MS:MBYTES_PER_S")
      ->check(link_check);
  party_cmd->add_flag("--insecure", party.insecure, "plain TCP: no authentication, no encryption");
  party_cmd->add_option("--job", party.job, jobs_help);
  party_cmd->add_option("--report", party.report, "write the JSON report here (default: stdout)");
  party_cmd->add_option("--repeat", party.repeat, "runs per case (median reported)")->check(CLI::Range(1, 100));
  party_cmd->add_option("--fault", party.fault, "tests: exit or silent in the middle of the job")
      ->check(CLI::IsMember({"exit", "silent"}));

  mpcache::tools::LocalOptions local;
  auto* local_cmd = app.add_subcommand(
      "local", "run the three parties as processes on loopback (free ports, fresh keys); prints a JSON report");
  local_cmd->add_option("--transport", local.transport, "auto, uring or asio")->check(CLI::IsMember(transports));
  local_cmd->add_option("--link", local.link, "emulated link: lan, wan, none or RTT_MS:MBYTES_PER_S")
      ->check(link_check);
  local_cmd->add_flag("--insecure", local.insecure, "plain TCP: no authentication, no encryption");
  local_cmd->add_option("--job", local.job, jobs_help);
  local_cmd->add_option("--timeout-ms", local.timeout_ms, "set-up and peer silence deadline")
      ->check(CLI::Range(100, 600000));
  local_cmd->add_option("--repeat", local.repeat, "runs per case (median reported)")->check(CLI::Range(1, 100));
  local_cmd->add_option("--fault", local.fault, "tests: PARTY:exit or PARTY:silent");

  std::string key_dir = ".";
  int key_parties = 3;
  auto* keygen_cmd = app.add_subcommand("keygen", "write Ed25519 key files pN.key (secret) and pN.pub");
  keygen_cmd->add_option("--out", key_dir, "folder for the key files");
  keygen_cmd->add_option("--parties", key_parties, "number of parties")->check(CLI::Range(1, 64));

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo_cmd) return mpcache::tools::run_demo(demo);
    if (*decode_cmd) return mpcache::tools::run_private_decode(decode);
    if (*party_cmd) return mpcache::tools::run_party(party);
    if (*local_cmd) {
      std::error_code ec;
      const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
      return mpcache::tools::run_local(local, ec ? std::string(argv[0]) : self.string());
    }
    if (*keygen_cmd) return mpcache::tools::run_keygen(key_dir, key_parties);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache: %s\n", e.what());
    return 1;
  }
  return 0;
}
