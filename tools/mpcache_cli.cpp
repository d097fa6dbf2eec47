// mpcache: command line. `mpcache generate` runs the main job, private
// generation with MPCache (three processes, or a cluster, or in-process);
// `mpcache decode` is `generate --in-process --check`; `mpcache demo` the
// 3-party arithmetic demo.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <CLI/CLI.hpp>
import mpcache.text;
import mpcache;
#include "demo.hpp"
#include "generate.hpp"
#include "install_paths.hpp"
#include "local_cluster.hpp"
#include "local.hpp"
#include "keygen.hpp"
#include "process_allocator.hpp"
#include "client.hpp"
#include "serve_job.hpp"
#include "local_service.hpp"

namespace {

const std::string default_prompt =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings";
const std::string budget_help =
    "tokens attended per KV head per step (all policies but full; default 48, or the policy's minimum where that "
    "is more)";

CLI::App* add_demo(CLI::App& app, mpcache::jobs::DemoOptions& demo) {
  auto* demo_cmd = app.add_subcommand("demo", "3-party secure (x W + b)^2 with rss3, checked against float64");
  demo_cmd->add_option("--in", demo.in_features, "input features")->check(CLI::Range(1, 1 << 14));
  demo_cmd->add_option("--out", demo.out_features, "output features")->check(CLI::Range(4, 1 << 14));
  demo_cmd->add_option("--seed", demo.seed, "seed of the random example data");
  return demo_cmd;
}

const std::string tokenizer_help =
    "the client's tokenizer (only the client reads it): auto (the model folder's tokenizer.json or vocab.json + "
    "merges.txt; a folder whose mpcache.json says \"tokenizer\": \"none\" is over bytes), none (token id = byte "
    "value), or a folder holding one";
const std::string ignore_eos_help = "go on past the tokenizer's end-of-sequence tokens (to --tokens)";

CLI::App* add_generate(CLI::App& app, mpcache::tools::GenerateOptions& gen, const std::string& default_model) {
  gen.model_dir = default_model;
  gen.prompt = default_prompt;
  auto* gen_cmd = app.add_subcommand(
      "generate",
      "private greedy generation with MPCache under rss3 or add2: by default 3 processes on loopback (TCP, io_uring, "
      "AES-GCM, fresh keys); --config/--id joins a cluster; --in-process runs all parties here");
  gen_cmd->add_option("--model", gen.model_dir, "model directory (config.json + model.safetensors + tokenizer)")
      ->capture_default_str();
  auto* prompt_opt = gen_cmd->add_option("--prompt", gen.prompt, "the client's prompt (text)");
  gen_cmd->add_option("--prompt-file", gen.prompt_file, "read the client's prompt from this file (instead of --prompt)")
      ->excludes(prompt_opt);
  gen_cmd->add_option("--tokens", gen.tokens, "tokens to generate (at most: generation ends at EOS)")
      ->check(CLI::Range(1, 4096));
  gen_cmd->add_option("--tokenizer", gen.tokenizer, tokenizer_help)->capture_default_str();
  gen_cmd->add_flag("--ignore-eos", gen.ignore_eos, ignore_eos_help);
  gen_cmd->add_option("--policy", gen.policy,
                      "KV-cache policy: mpcache (our defaults), mpcache-paper (the paper's), full or a baseline")
      ->check(CLI::IsMember(mpcache::kv::policy_names()));
  gen_cmd->add_option("--budget", gen.budget, budget_help)->check(CLI::Range(1, 1 << 20));
  gen_cmd->add_option("--speculate", gen.speculate,
                      "each decode step verifies up to K tokens the client drafts (0: none); the text is the same, "
                      "the servers learn how many each step accepted (docs/protocols.md)")
      ->capture_default_str();
  gen_cmd->add_option("--draft", gen.draft,
                      "the client's drafter for --speculate: lookup (continue an n-gram of the prompt or output), "
                      "ngram:FILE (an n-gram model of the public text FILE) or model:DIR (a public model folder with "
                      "the same tokens, run by the client in the clear)")
      ->capture_default_str();
  mpcache::jobs::add_protocol_mode_options(*gen_cmd, gen.mode);
  gen_cmd->add_flag("--compact-weights", gen.compact_weights, mpcache::jobs::compact_weights_help);
  mpcache::jobs::add_network_options(*gen_cmd, gen.network);
  gen_cmd->add_option("--timeout-ms", gen.timeout_ms, "set-up and peer silence deadline (default: the config's; launcher 60000)")
      ->check(CLI::Range(100, 3600000));
  gen_cmd->add_flag("--allow-unused-weights", gen.allow_unused_weights,
                    "run even if the config leaves tensors of the weights file unused");
  gen_cmd->add_flag("--in-process", gen.in_process, "all three parties in this process (debugging)");
  gen_cmd->add_option("--threads", gen.threads,
                      "threads of each party's compute pool for big matmuls and element-wise work (1: none; "
                      "--in-process: one pool the three parties take turns on)")
      ->check(CLI::Range(std::size_t{1}, mpcache::ComputePool::max_threads))
      ->capture_default_str();
  gen_cmd->add_option("--memory-budget", gen.memory_budget,
                      "the prefill's working set per party (BYTES, or e.g. 256MB, 1GB; default " +
                          std::to_string(mpcache::default_prefill_memory_budget >> 20) +
                          " MiB): the attention's query rows and the MLP's activation run in waves that fit (each "
                          "wave past the first adds its rounds); every party must give the same")
      ->check([](const std::string& text) {
        try {
          (void)mpcache::parse_memory_size(text);
          return std::string{};
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  gen_cmd->add_flag("--check", gen.check,
                    "debugging aid: check each token against the float64 reference (needs both inputs in one "
                    "launcher: --in-process or the local launcher, not a cluster)");
  gen_cmd->add_option("--json", gen.json, "write JSON lines: one row per step, a summary, each party (peak RSS)");
  gen_cmd->add_option("--config", gen.config, "cluster config (JSON): join it as party --id");
  gen_cmd->add_option("--id", gen.id, "this party's id: 0 client, 1 model owner, 2 helper")->check(CLI::Range(0, 2));
  gen_cmd->add_option("--fault", gen.fault, "tests: launcher PARTY:exit, party exit (dies after decode step 1)");
  return gen_cmd;
}

CLI::App* add_decode(CLI::App& app, mpcache::tools::GenerateOptions& decode, const std::string& default_model) {
  decode.model_dir = default_model;
  decode.prompt = default_prompt;
  decode.tokens = 8;
  decode.in_process = true;
  decode.check = true;
  auto* decode_cmd = app.add_subcommand(
      "decode", "= generate --in-process --check: 3 parties in one process, each token checked against float64");
  decode_cmd->add_option("--model", decode.model_dir, "model directory (config.json + model.safetensors + tokenizer)")
      ->capture_default_str();
  decode_cmd->add_option("--prompt", decode.prompt, "prompt text");
  decode_cmd->add_option("--tokens", decode.tokens, "tokens to generate (at most: generation ends at EOS)")
      ->check(CLI::Range(1, 256));
  decode_cmd->add_option("--tokenizer", decode.tokenizer, tokenizer_help)->capture_default_str();
  decode_cmd->add_flag("--ignore-eos", decode.ignore_eos, ignore_eos_help);
  decode_cmd->add_option("--budget", decode.budget, budget_help)->check(CLI::Range(1, 1 << 20));
  decode_cmd->add_option("--policy", decode.policy, mpcache::kv::policy_name_list())
      ->check(CLI::IsMember(mpcache::kv::policy_names()));
  mpcache::jobs::add_protocol_mode_options(*decode_cmd, decode.mode);
  decode_cmd->add_flag("--allow-unused-weights", decode.allow_unused_weights,
                       "run even if the config leaves tensors of the weights file unused");
  decode_cmd->add_option("--json", decode.json, "write JSON lines: one row per step, a summary");
  return decode_cmd;
}

// The flags of the library's job runner (mpcache-party), defined there once.
CLI::App* add_party(CLI::App& app, mpcache::jobs::PartyJob& party) {
  auto* party_cmd = app.add_subcommand("party", "run one party of a multi-process job over TCP");
  mpcache::jobs::add_party_options(*party_cmd, party);
  return party_cmd;
}

CLI::App* add_local(CLI::App& app, mpcache::jobs::LocalJob& local) {
  auto* local_cmd = app.add_subcommand(
      "local", "run the three parties as processes on loopback (free ports, fresh keys); prints a JSON report");
  mpcache::jobs::add_network_options(*local_cmd, local.network);
  local_cmd->add_option("--job", local.job, mpcache::jobs::job_names_help);
  local_cmd->add_option("--timeout-ms", local.timeout_ms, "set-up and peer silence deadline")
      ->check(CLI::Range(100, 600000));
  local_cmd->add_option("--repeat", local.repeat, "runs per case (median reported)")->check(CLI::Range(1, 100));
  mpcache::jobs::add_threads_option(*local_cmd, local.threads);
  local_cmd->add_option("--fault", local.fault, "tests: PARTY:exit or PARTY:silent")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              (void)mpcache::jobs::parse_fault(s, {"exit", "silent"});
              return {};
            } catch (const std::exception& e) {
              return e.what();
            }
          },
          "PARTY:exit|silent"));
  local_cmd->add_flag("--stranger", local.stranger,
                      "tests: a stranger sends garbage to, and idles at, each listening port during set-up");
  return local_cmd;
}

CLI::App* add_keygen(CLI::App& app, mpcache::tools::KeygenOptions& keygen) {
  auto* keygen_cmd = app.add_subcommand("keygen", "write Ed25519 key files pN.key (secret) and pN.pub");
  keygen_cmd->add_option("--out", keygen.out_dir, "folder for the key files (created if missing; not its parents)");
  keygen_cmd->add_option("--parties", keygen.parties, "number of parties")->check(CLI::Range(1, 64));
  keygen_cmd->add_flag("--force", keygen.force, "replace existing key files");
  keygen_cmd->add_option("--client", keygen.client,
                         "write one client key pair NAME.key / NAME.pub instead (for mpcache client; give the .pub "
                         "to the servers' --clients)");
  return keygen_cmd;
}

CLI::App* add_serve(CLI::App& app, mpcache::jobs::ServeJob& o, bool& local, const std::string& default_model) {
  o.model_dir = default_model;
  auto* cmd = app.add_subcommand(
      "serve", "one server of a private inference service: 3 servers share the model once, then serve many clients "
               "(mpcache client); SIGTERM drains (docs/serving.md). --local: all three on this host");
  mpcache::jobs::add_serve_options(*cmd, o, &local);
  return cmd;
}

CLI::App* add_client(CLI::App& app, mpcache::tools::ClientCliOptions& o, const std::string& default_model) {
  o.model_dir = default_model;
  o.prompt = default_prompt;
  auto* cmd = app.add_subcommand(
      "client", "ask a private inference service (3 mpcache serve processes) to continue a prompt; no server learns "
                "the prompt or the text");
  cmd->add_option("--servers", o.servers, "the servers' cluster config (host, client_port, public_key)")->required();
  cmd->add_option("--key", o.key, "this client's secret key NAME.key (NAME.pub beside it)")->required();
  cmd->add_option("--model", o.model_dir, "the model's folder, for its tokenizer and config.json (never the weights)")
      ->capture_default_str();
  auto* prompt_opt = cmd->add_option("--prompt", o.prompt, "the prompt (text)");
  cmd->add_option("--prompt-file", o.prompt_file, "read the prompt from this file")->excludes(prompt_opt);
  cmd->add_option("--tokens", o.tokens, "tokens to generate (at most: generation ends at EOS)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--policy", o.policy, "KV-cache policy")->check(CLI::IsMember(mpcache::kv::policy_names()));
  cmd->add_option("--budget", o.budget, budget_help)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--tokenizer", o.tokenizer, tokenizer_help)->capture_default_str();
  cmd->add_flag("--ignore-eos", o.ignore_eos, ignore_eos_help);
  cmd->add_flag("--ids", o.ids, "print token ids, one per line, instead of text");
  cmd->add_option("--temperature", o.temperature,
                  "0: greedy; > 0: sample (Gumbel-max: this client draws the noise from --seed and secret-shares it)")
      ->capture_default_str()->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--seed", o.seed, "the sampling noise's seed (the same seed, the same text)")->capture_default_str();
  cmd->add_option("--speculate", o.speculate,
                  "each decode step verifies up to K tokens this client drafts (0: none; greedy only); the text is "
                  "the same, the servers learn how many each step accepted (docs/serving.md)")
      ->capture_default_str()->check(CLI::Range(std::size_t{0}, mpcache::max_speculated_tokens));
  cmd->add_option("--draft", o.draft,
                  "the drafter for --speculate: lookup (continue an n-gram of the prompt or output), ngram:FILE "
                  "(an n-gram model of the public text FILE, read here) or model:DIR (a public model folder with the "
                  "same tokens, run here in the clear)")
      ->capture_default_str();
  cmd->add_option("--timeout-ms", o.timeout_ms, "connect timeout, and the longest a server may stay silent (servers send a heartbeat each second, "
                                        "so a request that waits in the queue or a long prefill is not cut short)")
      ->capture_default_str()->check(CLI::Range(100, 3600000));
  cmd->add_option("--retries", o.retries,
                  "send the request again, up to this many times, when it failed because of the service (a server "
                  "lost or unreachable, busy, shutting down); tokens already printed are not printed again")
      ->capture_default_str()->check(CLI::Range(0, 10000));
  cmd->add_option("--retry-wait-ms", o.retry_wait_ms, "wait this long before each retry")
      ->capture_default_str()->check(CLI::Range(0, 3600000));
  cmd->add_option("--json", o.json, "write the result as one JSON object (tokens, text, latencies)");
  cmd->add_option("--fault", o.fault, "tests of the servers: garbage (a short prompt share for server 1), vanish "
                                      "(leave after the first token), stall (never send the prompt), garbage-drafts "
                                      "or stall-drafts (the first speculative step's rows: short for server 1, never sent)")
      ->check(CLI::IsMember({"garbage", "vanish", "stall", "garbage-drafts", "stall-drafts"}));
  return cmd;
}

// `mpcache gateway ARGS`: the OpenAI-compatible endpoint, which is Python
// (the package's mpcache.gateway: aiohttp and Jinja from Debian); its
// arguments and --help are the gateway's own.
CLI::App* add_gateway(CLI::App& app) {
  auto* cmd = app.add_subcommand("gateway",
                                 "an OpenAI-compatible HTTP endpoint in front of a service (mpcache serve): the "
                                 "service's client for local applications; `mpcache gateway --help` lists its options");
  cmd->prefix_command();
  cmd->set_help_flag();
  return cmd;
}

int run_gateway(const std::vector<std::string>& args, const std::filesystem::path& exe) {
  const std::string python = MPCACHE_PYTHON;
  if (python.empty())
    throw mpcache::Error(mpcache::ErrorCode::invalid_argument,
                         "gateway: this mpcache was built without the Python package (MPCACHE_BUILD_PYTHON; "
                         "tools/setup.sh installs pybind11-dev)");
  // The package: installed relative to this executable, else this build's.
  std::error_code ec;
  std::filesystem::path path = exe.parent_path() / MPCACHE_PYTHON_FROM_BIN;
  if (!std::filesystem::exists(path / "mpcache" / "gateway.py", ec)) path = MPCACHE_PYTHON_BUILD;
  std::string pythonpath = path.lexically_normal().string();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath += ":" + std::string(old);
  ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
  ::setenv("MPCACHE_CLI", exe.c_str(), 0);
  std::vector<std::string> argv_strings = {python, "-m", "mpcache.gateway"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(python.c_str(), argv.data());
  throw mpcache::Error(mpcache::ErrorCode::io, "gateway: cannot run " + python + ": " + std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  mpcache::jobs::tune_allocator_for_party();
  CLI::App app{"mpcache: private LLM inference with MPC-friendly KV-cache eviction"};
  app.require_subcommand(1);
  const std::filesystem::path exe = mpcache::tools::executable_path(argv[0]);
  const std::string default_model = mpcache::tools::default_model_dir(exe);
  mpcache::jobs::DemoOptions demo;
  mpcache::tools::GenerateOptions gen, decode;
  mpcache::jobs::PartyJob party;
  mpcache::jobs::LocalJob local;
  mpcache::tools::KeygenOptions keygen;
  auto* demo_cmd = add_demo(app, demo);
  auto* gen_cmd = add_generate(app, gen, default_model);
  auto* decode_cmd = add_decode(app, decode, default_model);
  auto* party_cmd = add_party(app, party);
  auto* local_cmd = add_local(app, local);
  auto* keygen_cmd = add_keygen(app, keygen);
  mpcache::jobs::ServeJob serve;
  mpcache::tools::ClientCliOptions client;
  bool serve_local = false;
  auto* serve_cmd = add_serve(app, serve, serve_local, default_model);
  auto* client_cmd = add_client(app, client, default_model);
  auto* gateway_cmd = add_gateway(app);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo_cmd) return mpcache::tools::run_demo(demo);
    const std::string self = exe.string();
    if (*gen_cmd) return mpcache::tools::run_generate(gen, self);
    if (*decode_cmd) return mpcache::tools::run_generate(decode, self);
    if (*party_cmd) return mpcache::jobs::run_party(party);
    if (*local_cmd) return mpcache::tools::run_local(local, self);
    if (*keygen_cmd) return mpcache::tools::run_keygen(keygen);
    if (*gateway_cmd) return run_gateway(gateway_cmd->remaining(), exe);
    if (*serve_cmd && serve_local) return mpcache::jobs::run_local_service(serve, self);
    if (*serve_cmd) {
      if (serve.config.empty() || serve.id < 0 || serve.clients.empty())
        throw mpcache::Error(mpcache::ErrorCode::invalid_argument,
                             "serve needs --config, --id and --clients (or --local: all three servers on this host)");
      return mpcache::jobs::run_server(serve);
    }
    if (*client_cmd) return mpcache::tools::run_client(client);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache: %s\n", e.what());
    return 1;
  }
  return 0;
}
