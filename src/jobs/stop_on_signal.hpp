// Ctrl-C as a cooperative stop. SIGINT, SIGTERM and SIGHUP only note the
// signal (a handler may do nothing else safely): SignalNote. StopOnSignal
// adds a tick listener on the party's event loop that turns the note into a
// stop request at the end of the tick. The generation then unwinds through
// Endpoint::cancel: this party's receives throw Error(cancelled) and its
// peers learn why, instead of dying and leaving them to find out by a
// timeout. The launcher of party processes uses SignalNote alone and passes
// the signal on (run_party_processes).
#pragma once
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;

namespace mpcache::jobs {

// While alive, SIGINT, SIGTERM and SIGHUP are noted instead of ending the
// process (one SignalNote per process at a time); destroying it restores the
// handlers it replaced (the defaults in a CLI; a host program's own, such as
// Python's). No SA_RESTART: a blocking wait returns early.
class SignalNote {
 public:
  SignalNote();
  ~SignalNote();
  SignalNote(const SignalNote&) = delete;
  SignalNote& operator=(const SignalNote&) = delete;
  int signal() const;  // the signal noted, 0 if none
};

class StopOnSignal : public TickListener {
 public:
  // Listens on `scheduler` until destroyed. Construct it before the
  // endpoints: listeners run in order, so a stop noted in a tick reaches
  // them in the same tick.
  explicit StopOnSignal(Scheduler& scheduler);
  ~StopOnSignal() override;
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  std::stop_token token() const { return source_.get_token(); }
  int signal() const { return note_.signal(); }
  void on_tick_end() override;

 private:
  SignalNote note_;
  Scheduler& scheduler_;
  std::stop_source source_;
};

}  // namespace mpcache::jobs
