// Ctrl-C as a cooperative stop. SIGINT, SIGTERM and SIGHUP only note the
// signal (a handler may do nothing else safely); a tick listener on the
// party's event loop turns the note into a stop request at the end of the
// tick. The generation then unwinds through Endpoint::cancel: this party's
// receives throw Error(cancelled) and its peers learn why, instead of dying
// and leaving them to find out by a timeout.
#pragma once
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;

namespace mpcache::tools {

class StopOnSignal : public TickListener {
 public:
  // Installs the handlers (one StopOnSignal per process at a time) and
  // listens on `scheduler` until destroyed, which restores the defaults.
  // Construct it before the endpoints: listeners run in order, so a stop
  // noted in a tick reaches them in the same tick.
  explicit StopOnSignal(Scheduler& scheduler);
  ~StopOnSignal() override;
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  std::stop_token token() const { return source_.get_token(); }
  int signal() const;  // the signal that stopped us, 0 if none
  void on_tick_end() override;

 private:
  Scheduler& scheduler_;
  std::stop_source source_;
};

}  // namespace mpcache::tools
