// `mpcache client` (a client of a private inference service): the prompt
// through the client's tokenizer, the tokens back to text as they arrive.
// `mpcache serve` is jobs::run_server (src/jobs/serve_job.hpp). The service
// itself is mpcache.serve (modules/serve/); docs/serving.md says how to run
// one. Include after `import mpcache;`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mpcache::tools {

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
  double temperature = 0;  // > 0: Gumbel-max sampling, the noise secret-shared (serve::ClientRequest)
  std::uint64_t seed = 0;
  std::size_t speculate = 0;      // drafts each decode step verifies (0: none)
  std::string draft = "lookup";   // the drafter: lookup | ngram:FILE (jobs::drafter_named)
  bool ids = false;        // print token ids, one line each, instead of text
  int timeout_ms = 60000;  // connect, and the longest a server may keep this client waiting
  std::size_t retries = 0;    // serve::RetryOptions: retries of a request the service failed
  int retry_wait_ms = 1000;
  std::string json;        // one JSON object: tokens, text, latencies
  std::string fault;       // tests: garbage | vanish | stall | garbage-drafts | stall-drafts (jobs::ClientJob::fault)
};

int run_client(const ClientCliOptions& options);

}  // namespace mpcache::tools
