// mpcache._mpcache: the Python package's extension (pybind11). A thin layer
// over mpcache-jobs, the same runs the CLI makes:
//   * generate(): `mpcache generate`'s launcher (three party processes of
//     the `mpcache` executable on loopback) or its in-process run;
//   * Client / Stream: `mpcache client`'s request to a running service, the
//     tokens streamed from a thread of the stream's own.
// The GIL is released while parties run or a stream waits; errors come out
// as mpcache.Error (defined in mpcache/__init__.py) carrying our message and
// its ErrorCode's name. Results go to Python as JSON text: the typed objects
// (Generation, Step, Completion, Token) are the package's, in __init__.py.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
import mpcache.text;
import mpcache;
#include "client_text.hpp"
#include "cluster_config.hpp"
#include "drafter_choice.hpp"
#include "generate_job.hpp"
#include "generation_report.hpp"
#include "serve_job.hpp"

namespace py = pybind11;
using nlohmann::json;

namespace mpcache::python {
namespace {

const char* code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::bad_party: return "bad_party";
    case ErrorCode::protocol: return "protocol";
    case ErrorCode::network: return "network";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::deadlock: return "deadlock";
    case ErrorCode::io: return "io";
    case ErrorCode::format: return "format";
    case ErrorCode::cancelled: return "cancelled";
  }
  return "error";
}

// Raises mpcache.Error(message, code) (the package's class, looked up when
// raised: the package is imported by then).
void raise_error(const std::string& message, const std::string& code) {
  py::object cls = py::module_::import("mpcache").attr("Error");
  py::object err = cls(message, code);
  PyErr_SetObject(cls.ptr(), err.ptr());
}

// A signal noted while the parties ran (SignalNote) comes back to Python as
// what it would have been there: KeyboardInterrupt for SIGINT.
[[noreturn]] void stopped_by_signal(int signal) {
  if (signal == SIGINT) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  throw Error(ErrorCode::cancelled, "stopped by signal " + std::to_string(signal));
}

struct GenerateArgs {
  std::string prompt, model, policy, protocol, truncation, comparisons, link, tokenizer, cli;
  std::size_t tokens = 16, budget = 0;
  bool processes = true, ignore_eos = false, insecure = false;
  int timeout_ms = -1;
};

// The run's text, tokens, steps, summary and parties, as JSON text.
std::string generate(const GenerateArgs& a) {
  jobs::GenerateOptions o;
  o.model_dir = a.model;
  o.prompt = a.prompt;
  o.tokens = a.tokens;
  o.policy = a.policy;
  o.budget = a.budget;
  o.tokenizer = a.tokenizer;
  o.ignore_eos = a.ignore_eos;
  o.mode.protocol = a.protocol;
  o.mode.truncation = a.truncation;
  o.mode.comparisons = {a.comparisons};
  o.network.link = a.link;
  o.network.insecure = a.insecure;
  o.timeout_ms = a.timeout_ms;
  o.in_process = !a.processes;
  if (o.tokens < 1 || o.tokens > 4096) throw Error(ErrorCode::invalid_argument, "tokens must be 1..4096");
  if (o.in_process && o.network.insecure) throw Error(ErrorCode::invalid_argument, "insecure is for TCP parties");
  const ModelConfig c = jobs::check_generate_options(o);
  jobs::Prompt prompt;
  const auto tok = jobs::client_prompt(o, c, prompt);
  jobs::GenerateRun run;
  {
    py::gil_scoped_release release;
    if (a.processes) {
      if (a.cli.empty() || !std::filesystem::exists(a.cli))
        throw Error(ErrorCode::io, "processes=True runs the parties as `mpcache generate` processes, but the mpcache "
                                   "executable '" + a.cli + "' is not there (build target mpcache-cli, or set "
                                   "MPCACHE_CLI); processes=False runs them in this process");
      run = jobs::launch_generate_parties(o, prompt, a.cli, {}, /*client_output=*/false);
    } else {
      jobs::TextStream text(*tok);
      jobs::ClientView view;
      view.step = [&](const GenerationStep& s) { return s.token ? text.push(*s.token) : std::string(); };
      view.text = [&] {
        (void)text.finish();
        return text.text();
      };
      run = jobs::run_generate_in_process(o, prompt, *tok, view);
    }
  }
  if (run.stopped_by != 0) stopped_by_signal(run.stopped_by);
  if (!run.ok) {
    std::string why;
    for (const auto& p : run.parties)
      if (!p.value("ok", false) || p.value("exit_status", 0) != 0)
        why += (why.empty() ? "" : "; ") + std::string("party ") + std::to_string(p.value("party", -1)) + ": " +
               p.value("error", "exit status " + std::to_string(p.value("exit_status", -1)));
    if (run.killed_late) why += (why.empty() ? "" : "; ") + std::string("parties still running at the limit were killed");
    throw Error(ErrorCode::protocol, "the generation failed: " + (why.empty() ? std::string("no report") : why));
  }
  const jobs::Generated& out = run.out;
  if (out.tokens.size() != out.count || (out.count != o.tokens && out.end != GenerationEnd::eos))
    throw Error(ErrorCode::protocol, "the client learned " + std::to_string(out.tokens.size()) + " tokens of " +
                                         std::to_string(out.count) + " generated");
  json summary = jobs::generation_summary(o, a.processes ? "3 processes" : "in-process", run.transport, prompt, *tok,
                                          out, run.steps);
  summary["ok"] = true;
  const json result = {{"text", out.text},       {"tokens", out.tokens},   {"end", end_name(out.end)},
                       {"prompt_tokens", prompt.ids}, {"steps", run.steps}, {"summary", summary},
                       {"parties", run.parties}, {"transport", run.transport}};
  return result.dump();
}

// One request to a service, its tokens and their text pushed by a thread of
// its own (run_client_job) and taken by next(). cancel() ends the session at
// the servers (ClientJob::stop).
class Stream {
 public:
  Stream(jobs::ClientJob job, std::shared_ptr<const text::Tokenizer> tok) : tok_(std::move(tok)) {
    job.stop = stop_.get_token();
    worker_ = std::thread([this, job = std::move(job)] { work(job); });
  }
  ~Stream() {
    stop_.request_stop();
    if (worker_.joinable()) worker_.join();
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The next (token id, text it adds); None at the end; raises the request's
  // error. Waits without the GIL, waking every `poll_s` for Python's signals
  // (Ctrl-C ends the stream and raises KeyboardInterrupt). `timeout_s` >= 0:
  // returns the string "timeout" if nothing came within it.
  py::object next(double timeout_s) {
    using Clock = std::chrono::steady_clock;
    const auto until = timeout_s >= 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(timeout_s))
                                      : Clock::time_point::max();
    for (;;) {
      bool ready = false;
      {
        py::gil_scoped_release release;
        std::unique_lock lock(mutex_);
        const auto wake = std::min(until, Clock::now() + std::chrono::milliseconds(100));
        ready = changed_.wait_until(lock, wake, [&] { return !items_.empty() || finished_; });
      }
      if (ready) {
        std::unique_lock lock(mutex_);
        if (!items_.empty()) {
          auto [id, piece] = std::move(items_.front());
          items_.pop_front();
          lock.unlock();
          return py::make_tuple(id, py::bytes(piece));
        }
        if (!error_.empty()) {
          const std::string message = error_, code = code_;
          lock.unlock();
          raise_error(message, code);
          throw py::error_already_set();
        }
        return py::none();
      }
      if (PyErr_CheckSignals() != 0) {
        cancel();
        throw py::error_already_set();
      }
      if (Clock::now() >= until) return py::str("timeout");
    }
  }
  // Ends the request (if it still runs) and waits for its thread, without the GIL.
  void cancel() {
    stop_.request_stop();
    py::gil_scoped_release release;
    if (worker_.joinable()) worker_.join();
  }
  bool finished() {
    std::lock_guard lock(mutex_);
    return finished_;
  }
  // What the request learned once it finished: JSON text.
  std::string report() {
    std::lock_guard lock(mutex_);
    if (!finished_) throw Error(ErrorCode::invalid_argument, "the stream has not finished");
    return report_;
  }

 private:
  void work(jobs::ClientJob job) {
    jobs::TextStream text(*tok_);
    std::string message, code;
    json report;
    std::vector<std::string> retry_notes;  // on this thread only, until the report
    job.on_retry = [&](const std::string& note) { retry_notes.push_back(note); };
    try {
      const auto r = jobs::run_client_job(job, [&](std::uint32_t id) {
        std::string piece = tok_->is_eos(id) ? std::string() : text.push(id);
        std::lock_guard lock(mutex_);
        items_.emplace_back(id, std::move(piece));
        changed_.notify_all();
      });
      std::string rest = text.finish();
      report = {{"session", r.session},
                {"tokens", r.tokens},
                {"text", text.text()},
                {"end", r.eos ? "eos" : "budget"},
                {"attempts", r.attempts},
                {"retries", retry_notes},
                {"seconds_to_accept", r.seconds_to_accept},
                {"seconds_to_first_token", r.seconds_to_first_token},
                {"token_seconds", r.token_seconds}};
      std::lock_guard lock(mutex_);
      if (!rest.empty()) items_.emplace_back(std::uint32_t(-1), std::move(rest));
    } catch (const Error& e) {
      message = e.what(), code = code_name(e.code());
    } catch (const std::exception& e) {
      message = e.what(), code = "error";
    }
    std::lock_guard lock(mutex_);
    if (stop_.stop_requested() && !message.empty()) message = "cancelled: the stream was closed by its reader";
    if (!message.empty() && stop_.stop_requested()) code = "cancelled";
    error_ = message, code_ = code;
    report_ = report.dump();
    finished_ = true;
    changed_.notify_all();
  }

  std::shared_ptr<const text::Tokenizer> tok_;
  std::stop_source stop_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<std::uint32_t, std::string>> items_;
  bool finished_ = false;
  std::string error_, code_, report_;
  std::thread worker_;
};

// A service's client: the servers' cluster.json, this client's key, the
// model folder's config.json and tokenizer (never its weights).
class Client {
 public:
  Client(std::string servers, std::string key, std::string model, std::string tokenizer, int timeout_ms,
         std::size_t retries, int retry_wait_ms)
      : servers_(std::move(servers)), key_(std::move(key)), model_(std::move(model)), timeout_ms_(timeout_ms),
        retries_(retries), retry_wait_ms_(retry_wait_ms) {
    if (timeout_ms_ <= 0) throw Error(ErrorCode::invalid_argument, "timeout_ms must be > 0");
    if (retry_wait_ms_ < 0) throw Error(ErrorCode::invalid_argument, "retry_wait_ms must be >= 0");
    (void)jobs::read_cluster_config(servers_);  // a bad file is an error now, not at the first request
    (void)jobs::read_text_file(key_, "this client's secret key");
    const ModelConfig c = ModelConfig::from_json_file(std::filesystem::path(model_) / "config.json");
    tok_ = jobs::client_tokenizer(tokenizer, model_, c.vocab_size);
    max_positions_ = c.max_positions;
  }

  std::unique_ptr<Stream> stream(const std::string& prompt, std::size_t tokens, const std::string& policy,
                                 std::size_t budget, bool ignore_eos, double temperature, std::uint64_t seed,
                                 const std::string& fault, std::size_t speculate, const std::string& draft) {
    jobs::ClientJob job;
    job.servers = servers_;
    job.key = key_;
    job.prompt = jobs::encode_prompt(*tok_, prompt);
    if (job.prompt.empty()) throw Error(ErrorCode::invalid_argument, "empty prompt");
    if (tokens < 1) throw Error(ErrorCode::invalid_argument, "tokens must be at least 1");
    job.tokens = tokens;
    job.policy = policy;
    job.budget = budget;
    job.timeout_ms = timeout_ms_;
    job.temperature = temperature;
    job.seed = seed;
    job.fault = fault;
    job.speculate = speculate;
    if (speculate > 0) {
      auto tok = tok_;
      job.draft = jobs::drafter_named(draft, tok->vocab_size(), [tok](std::string_view text) { return tok->encode(text); });
    }
    job.retries = retries_;
    job.retry_wait_ms = retry_wait_ms_;
    if (!ignore_eos) job.stop_tokens = tok_->eos_ids();
    return std::make_unique<Stream>(std::move(job), tok_);
  }

  std::vector<std::uint32_t> encode(const std::string& text) const { return jobs::encode_prompt(*tok_, text); }
  std::vector<std::uint32_t> eos_ids() const { return tok_->eos_ids(); }
  std::size_t max_positions() const { return max_positions_; }
  std::string tokenizer_name() const { return tok_->name(); }

 private:
  std::string servers_, key_, model_;
  int timeout_ms_;
  std::size_t retries_;
  int retry_wait_ms_;
  std::shared_ptr<const text::Tokenizer> tok_;
  std::size_t max_positions_ = 0;
};

}  // namespace
}  // namespace mpcache::python

PYBIND11_MODULE(_mpcache, m) {
  using namespace mpcache::python;
  m.doc() = "mpcache's extension: use the package `mpcache` (its types and docstrings are there).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const mpcache::Error& e) {
      raise_error(e.what(), code_name(e.code()));
    } catch (const std::runtime_error& e) {  // the jobs' own (a config file that cannot be read, ...)
      raise_error(e.what(), "error");
    }
  });
  m.def(
      "generate",
      [](const std::string& prompt, const std::string& model, std::size_t tokens, const std::string& policy,
         std::size_t budget, const std::string& protocol, const std::string& truncation,
         const std::string& comparisons, const std::string& link, bool processes, const std::string& tokenizer,
         bool ignore_eos, bool insecure, int timeout_ms, const std::string& cli) {
        GenerateArgs a;
        a.prompt = prompt, a.model = model, a.tokens = tokens, a.policy = policy, a.budget = budget;
        a.protocol = protocol, a.truncation = truncation, a.comparisons = comparisons, a.link = link;
        a.processes = processes, a.tokenizer = tokenizer, a.ignore_eos = ignore_eos, a.insecure = insecure;
        a.timeout_ms = timeout_ms, a.cli = cli;
        return generate(a);
      },
      py::arg("prompt"), py::arg("model"), py::arg("tokens"), py::arg("policy"), py::arg("budget"),
      py::arg("protocol"), py::arg("truncation"), py::arg("comparisons"), py::arg("link"), py::arg("processes"),
      py::arg("tokenizer"), py::arg("ignore_eos"), py::arg("insecure"), py::arg("timeout_ms"), py::arg("cli"),
      "Runs a generation; returns its report as JSON text (see mpcache.generate).");
  py::class_<Stream>(m, "Stream")
      .def("next", &Stream::next, py::arg("timeout_s") = -1.0)
      .def("cancel", &Stream::cancel)
      .def("finished", &Stream::finished)
      .def("report", &Stream::report);
  py::class_<Client>(m, "Client")
      .def(py::init<std::string, std::string, std::string, std::string, int, std::size_t, int>(), py::arg("servers"),
           py::arg("key"), py::arg("model"), py::arg("tokenizer"), py::arg("timeout_ms"), py::arg("retries"),
           py::arg("retry_wait_ms"))
      .def("stream", &Client::stream, py::arg("prompt"), py::arg("tokens"), py::arg("policy"), py::arg("budget"),
           py::arg("ignore_eos"), py::arg("temperature"), py::arg("seed"), py::arg("fault"), py::arg("speculate"),
           py::arg("draft"))
      .def("encode", &Client::encode)
      .def("eos_ids", &Client::eos_ids)
      .def("max_positions", &Client::max_positions)
      .def("tokenizer_name", &Client::tokenizer_name);
}
