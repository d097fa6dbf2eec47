#include "stop_on_signal.hpp"
#include <csignal>
#include <signal.h>

namespace mpcache::jobs {
namespace {

// The one thing a handler may touch.
volatile std::sig_atomic_t noted_signal = 0;
extern "C" void note_signal(int sig) { noted_signal = sig; }
constexpr int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
// The handlers a SignalNote replaced, put back when it ends: a host program
// (Python's own SIGINT handler, under the Python package) keeps its own.
struct sigaction replaced[std::size(stop_signals)];

}  // namespace

SignalNote::SignalNote() {
  noted_signal = 0;
  struct sigaction on_stop {};
  on_stop.sa_handler = note_signal;
  for (std::size_t i = 0; i < std::size(stop_signals); ++i) ::sigaction(stop_signals[i], &on_stop, &replaced[i]);
}

SignalNote::~SignalNote() {
  for (std::size_t i = 0; i < std::size(stop_signals); ++i) ::sigaction(stop_signals[i], &replaced[i], nullptr);
}

int SignalNote::signal() const { return noted_signal; }

StopOnSignal::StopOnSignal(Scheduler& scheduler) : scheduler_(scheduler) { scheduler_.add_listener(this); }

StopOnSignal::~StopOnSignal() { scheduler_.remove_listener(this); }

void StopOnSignal::on_tick_end() {
  if (note_.signal() != 0 && !source_.stop_requested()) source_.request_stop();
}

}  // namespace mpcache::jobs
