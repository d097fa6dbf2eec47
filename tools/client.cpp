// `mpcache client` (see client.hpp): text in, a request to the service, text out.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
import mpcache;
#include "client_text.hpp"
#include "cluster_config.hpp"
#include "drafter_choice.hpp"
#include "client.hpp"
#include "serve_job.hpp"

namespace mpcache::tools {

using jobs::client_tokenizer;
using jobs::encode_prompt;
using jobs::TextStream;

int run_client(const ClientCliOptions& o) {
  const ModelConfig config = ModelConfig::from_json_file(std::filesystem::path(o.model_dir) / "config.json");
  auto tok = client_tokenizer(o.tokenizer, o.model_dir, config.vocab_size);
  jobs::ClientJob job;
  job.servers = o.servers;
  job.key = o.key;
  job.prompt = encode_prompt(*tok, o.prompt_file.empty() ? o.prompt : jobs::read_text_file(o.prompt_file, "prompt file"));
  job.tokens = o.tokens;
  job.policy = o.policy;
  job.budget = o.budget;
  job.timeout_ms = o.timeout_ms;
  job.fault = o.fault;
  job.retries = o.retries;
  job.retry_wait_ms = o.retry_wait_ms;
  job.on_retry = [](const std::string& note) { std::fprintf(stderr, "mpcache client: %s\n", note.c_str()); };
  job.temperature = o.temperature;
  job.seed = o.seed;
  job.speculate = o.speculate;
  if (o.speculate > 0)
    job.draft = jobs::drafter_named(o.draft, tok->vocab_size(), [&tok](std::string_view text) { return tok->encode(text); });
  if (!o.ignore_eos) job.stop_tokens = tok->eos_ids();
  TextStream text(*tok);
  const auto r = jobs::run_client_job(job, [&](std::uint32_t id) {
    if (o.ids) std::printf("%u\n", id);
    else if (!tok->is_eos(id)) std::printf("%s", text.push(id).c_str());
    std::fflush(stdout);
  });
  if (!o.ids) std::printf("%s\n", text.finish().c_str());
  std::vector<double> sorted = r.token_seconds;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double q) {
    return sorted.empty() ? 0.0 : sorted[std::min(sorted.size() - 1, std::size_t(q * double(sorted.size())))];
  };
  std::fprintf(stderr,
               "mpcache client: session %llu, %zu tokens (%s), %zu attempt%s, first token after %.3f s, per token p50 %.3f s "
               "p99 %.3f s\n",
               static_cast<unsigned long long>(r.session), r.tokens.size(), r.eos ? "eos" : "budget", r.attempts,
               r.attempts == 1 ? "" : "s",
               r.seconds_to_first_token, pct(0.5), pct(0.99));
  if (!o.json.empty()) {
    const nlohmann::json j = {{"session", r.session},
                              {"tokens", r.tokens},
                              {"text", text.text()},
                              {"end", r.eos ? "eos" : "budget"},
                              {"attempts", r.attempts},
                              {"seconds_to_accept", r.seconds_to_accept},
                              {"seconds_to_first_token", r.seconds_to_first_token},
                              {"token_seconds", r.token_seconds},
                              {"speculate", o.speculate},
                              {"accepted", r.accepted}};
    std::ofstream(o.json) << j.dump() << "\n";
  }
  return 0;
}

}  // namespace mpcache::tools
