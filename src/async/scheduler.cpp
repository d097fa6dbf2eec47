// Scheduler (see modules/async/scheduler.cppm). The multi-source wait sleeps
// in ppoll(2), so this unit includes the system header in its global module
// fragment.
//
// With a tick budget (set_tick_budget) a tick also ends once it has run that
// long with work left: its sends leave and arrivals are taken in (a poll
// that does not block), then the rest runs. A server with many sessions
// uses it, so that one session's finished round does not wait for the
// others' work before it leaves (docs/serving.md, "Short ticks").
module;
#include "prelude.hpp"
#include <cerrno>
#include <thread>
#include <poll.h>
module mpcache.async;
import mpcache.core;

namespace mpcache {

namespace {

using Clock = std::chrono::steady_clock;

// As TcpTransport's spin: a yield that comes back after more than a time
// slice's worth means the core is busy with other work; spinning then costs
// more than sleeping, so it pauses for the next spin_pause waits.
constexpr std::chrono::microseconds late_yield{2000};
constexpr std::uint32_t spin_pause = 64;

// ppoll(2) for up to `timeout` (none: until a descriptor is ready). A signal
// (EINTR) counts as nothing ready: the caller polls what is due and comes back.
int sleep_in_ppoll(std::vector<pollfd>& fds, std::optional<std::chrono::nanoseconds> timeout) {
  timespec ts{};
  if (timeout) {
    const auto t = std::max(*timeout, std::chrono::nanoseconds{0});
    ts.tv_sec = static_cast<time_t>(t.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(t.count() % 1000000000);
  }
  const int n = ::ppoll(fds.data(), fds.size(), timeout ? &ts : nullptr, nullptr);
  if (n < 0 && errno != EINTR)
    throw Error(ErrorCode::network, std::string("the event loop cannot wait on its ") +
                                        std::to_string(fds.size()) + " descriptors: ppoll failed: " +
                                        std::strerror(errno));
  return std::max(n, 0);
}

}  // namespace

void Scheduler::remove_listener(TickListener* l) {
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
}

void Scheduler::remove_io_source(IoSource* s) {
  io_sources_.erase(std::remove(io_sources_.begin(), io_sources_.end(), s), io_sources_.end());
}

bool Scheduler::registered(const IoSource* s) const {
  return std::find(io_sources_.begin(), io_sources_.end(), s) != io_sources_.end();
}

bool Scheduler::run_ready() {
  const bool budgeted = tick_budget_.count() > 0;  // else no clock reads
  const auto end = budgeted ? Clock::now() + tick_budget_ : Clock::time_point{};
  while (!ready_.empty()) {
    auto h = ready_.front();
    ready_.pop_front();
    h.resume();
    if (budgeted && !ready_.empty() && Clock::now() >= end) return false;
  }
  return true;
}

void Scheduler::run_until(const std::function<bool()>& done) {
  while (!done()) {
    const bool finished = run_ready();
    // Copy: a listener may deregister itself while flushing.
    auto listeners = listeners_;
    for (auto* l : listeners) l->on_tick_end();
    if (!ready_.empty() || done()) {
      // Not blocking in poll(), which would submit them: send now.
      for (auto* s : io_sources_) s->flush();
      // A tick cut short by its budget also takes in what has arrived.
      if (!finished && !done())
        for (auto* s : std::vector<IoSource*>(io_sources_))
          if (registered(s) && s->has_pending()) s->poll(false);
      continue;
    }

    IoSource* first = nullptr;
    std::size_t pending = 0;
    for (auto* s : io_sources_)
      if (s->has_pending()) {
        if (!first) first = s;
        ++pending;
      }
    if (pending == 0) {
      std::string waiting;
      for (auto* l : listeners_) {
        auto w = l->describe_waiting();
        if (!w.empty()) waiting += (waiting.empty() ? "" : "; ") + w;
      }
      throw Error(ErrorCode::deadlock,
                  "every task is waiting and no message is in flight" +
                      (waiting.empty() ? std::string() : " (waiting for: " + waiting + ")"));
    }
    // Block in the only source with work (the fast path: as before, no
    // allocation), or in one that cannot be waited on together with the
    // others. The others hand their queued operations to the kernel first:
    // nothing submits them while this thread sleeps.
    std::vector<IoSource*> all;  // local: a poll's callback may run a nested loop
    if (pending > 1) {
      for (auto* s : io_sources_)
        if (s->has_pending()) all.push_back(s);
      if (wait_on_all(all, first)) continue;
    }
    for (auto* s : io_sources_)
      if (s != first) s->flush();
    if (all.empty()) {
      first->poll(ready_.empty());
      continue;
    }
    for (auto* s : all) {
      if (!registered(s)) continue;
      s->poll(s == first && ready_.empty());
      if (!ready_.empty()) break;
    }
  }
}

bool Scheduler::wait_on_all(const std::vector<IoSource*>& pending, IoSource*& blocker) {
  for (auto* s : io_sources_) s->flush();
  std::vector<WaitFd> fds;
  std::vector<std::size_t> fds_end(pending.size());  // source i gave fds [fds_end[i-1], fds_end[i])
  std::vector<std::optional<Clock::time_point>> wakes(pending.size());
  std::optional<Clock::time_point> wake;
  std::chrono::nanoseconds spin{0};
  for (std::size_t i = 0; i < pending.size(); ++i) {
    if (!pending[i]->wait_fds(fds)) {
      blocker = pending[i];
      return false;
    }
    fds_end[i] = fds.size();
    wakes[i] = pending[i]->next_wake();
    if (wakes[i] && (!wake || *wakes[i] < *wake)) wake = wakes[i];
    spin = std::max(spin, pending[i]->spin_budget());
  }
  // Getting ready to sleep may itself wake tasks (a deadline that passed).
  if (!ready_.empty()) return true;

  std::vector<pollfd> polled(fds.size());
  for (std::size_t i = 0; i < fds.size(); ++i)
    polled[i] = pollfd{fds[i].fd, static_cast<short>((fds[i].read ? POLLIN : 0) | (fds[i].write ? POLLOUT : 0)), 0};
  auto now = Clock::now();
  bool ready = wake && *wake <= now;
  if (!ready && spin.count() > 0) {
    if (spin_paused_ > 0) {
      --spin_paused_;
    } else {
      const auto until = std::min(now + spin, wake.value_or(Clock::time_point::max()));
      for (;;) {
        if (sleep_in_ppoll(polled, std::chrono::nanoseconds{0}) > 0) {
          ready = true;
          break;
        }
        const auto before = Clock::now();
        if (before >= until) break;
        std::this_thread::yield();  // a peer sharing this core runs first
        if (Clock::now() - before > late_yield) {
          spin_paused_ = spin_pause;
          break;
        }
      }
    }
  }
  if (!ready) {
    std::optional<std::chrono::nanoseconds> timeout;
    if (wake) timeout = *wake - Clock::now();
    sleep_in_ppoll(polled, timeout);
  }
  // Poll each source whose descriptor is ready or whose time has come: by
  // wait_fds' contract, the others could not make progress.
  now = Clock::now();
  for (std::size_t i = 0; i < pending.size(); ++i) {
    bool due = wakes[i] && *wakes[i] <= now;
    for (std::size_t j = i == 0 ? 0 : fds_end[i - 1]; j < fds_end[i] && !due; ++j) due = polled[j].revents != 0;
    if (due && registered(pending[i])) pending[i]->poll(false);
  }
  return true;
}

}  // namespace mpcache
