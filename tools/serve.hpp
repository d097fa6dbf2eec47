// `mpcache serve` (one server of a private inference service) and
// `mpcache client` (a client of one). The service itself is mpcache.serve
// (modules/serve/); docs/serving.md says how to run one.
// Include after `import mpcache;`.
#pragma once
#include <cstddef>
#include <string>
#include "network_choice.hpp"  // src/jobs

namespace mpcache::tools {

struct ServeCliOptions {
  std::string config;     // cluster.json with each server's client_port
  int id = -1;            // this server: 0 leader, 1 model owner, 2
  std::string model_dir;  // config.json (all), model.safetensors (the owner)
  std::string clients;    // a client's .pub file, or a folder of them: the only clients admitted
  std::size_t max_sessions = 4;
  std::size_t max_queued = 16;
  std::size_t kv_limit_mb = 4096;
  std::size_t max_new_tokens = 1024;
  int drain_ms = 30000;
  int client_timeout_ms = 60000;  // a client that keeps a session waiting this long is dropped
  int timeout_ms = -1;            // mesh set-up and silence (-1: the config's)
  std::string truncation = "exact";
  bool allow_unused_weights = false;
  jobs::NetworkChoice network;
};

struct ClientCliOptions {
  std::string servers;     // the servers' cluster.json (host, client_port, public_key of each)
  std::string key;         // this client's secret key (NAME.key; NAME.pub beside it)
  std::string model_dir;   // for the tokenizer and config.json (vocabulary); never the weights
  std::string prompt;
  std::string prompt_file;
  std::size_t tokens = 16;
  std::string policy = "mpcache";
  std::size_t budget = 0;
  std::string tokenizer = "auto";
  bool ignore_eos = false;
  bool ids = false;        // print token ids, one line each, instead of text
  int timeout_ms = 60000;  // connect, and the longest a server may keep this client waiting
  std::string json;        // one JSON object: tokens, text, latencies
};

int run_serve(const ServeCliOptions& options);
int run_client(const ClientCliOptions& options);

}  // namespace mpcache::tools
