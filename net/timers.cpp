// Timers (see modules/net/timers.cppm).
module;
#include "prelude.hpp"
#include <thread>
module mpcache.net;

namespace mpcache {

bool TimerQueue::cancel(Id id) {
  const auto it = std::find_if(timers_.begin(), timers_.end(), [id](const auto& t) { return t.second.id == id; });
  if (it == timers_.end()) return false;
  timers_.erase(it);
  return true;
}

std::size_t TimerQueue::fire_due() {
  std::size_t n = 0;
  const auto now = SteadyClock::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    auto entry = std::move(timers_.begin()->second);
    timers_.erase(timers_.begin());
    entry.fn();
    ++n;
  }
  return n;
}

void TimerLoop::poll(bool block) {
  if (block) {
    if (auto next = timers_.next()) std::this_thread::sleep_until(*next);
  }
  timers_.fire_due();
}

}  // namespace mpcache
