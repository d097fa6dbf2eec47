// Timers (see modules/net/timers.cppm).
module;
#include "prelude.hpp"
#include <thread>
module mpcache.net;

namespace mpcache {

bool TimerQueue::cancel(Id id) {
  const auto found = when_by_id_.find(id);
  if (found == when_by_id_.end()) return false;
  auto [first, last] = timers_.equal_range(found->second);
  for (auto it = first; it != last; ++it)
    if (it->second.id == id) {
      timers_.erase(it);
      break;
    }
  when_by_id_.erase(found);
  return true;
}

std::size_t TimerQueue::fire_due() {
  std::size_t n = 0;
  const auto now = SteadyClock::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    auto entry = std::move(timers_.begin()->second);
    timers_.erase(timers_.begin());
    when_by_id_.erase(entry.id);
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
