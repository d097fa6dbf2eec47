module mpcache.async;
import mpcache.std;
import mpcache.core;

namespace mpcache {

void Scheduler::remove_listener(TickListener* l) {
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
}

void Scheduler::remove_io_source(IoSource* s) {
  io_sources_.erase(std::remove(io_sources_.begin(), io_sources_.end(), s), io_sources_.end());
}

void Scheduler::run_ready() {
  while (!ready_.empty()) {
    auto h = ready_.front();
    ready_.pop_front();
    h.resume();
  }
}

void Scheduler::run_until(const std::function<bool()>& done) {
  while (!done()) {
    run_ready();
    // Copy: a listener may deregister itself while flushing.
    auto listeners = listeners_;
    for (auto* l : listeners) l->on_tick_end();
    if (!ready_.empty() || done()) {
      // Not blocking in poll(), which would submit them: send now.
      for (auto* s : io_sources_) s->flush();
      continue;
    }

    bool pending = false;
    for (auto* s : io_sources_) pending = pending || s->has_pending();
    if (!pending) {
      std::string waiting;
      for (auto* l : listeners_) {
        auto w = l->describe_waiting();
        if (!w.empty()) waiting += (waiting.empty() ? "" : "; ") + w;
      }
      throw Error(ErrorCode::deadlock,
                  "every task is waiting and no message is in flight" +
                      (waiting.empty() ? std::string() : " (waiting for: " + waiting + ")"));
    }
    // Block on the first source with work only if nothing else can progress.
    // The others hand their queued operations to the kernel first: nothing
    // submits them while this thread sleeps.
    IoSource* first = *std::find_if(io_sources_.begin(), io_sources_.end(),
                                    [](IoSource* s) { return s->has_pending(); });
    for (auto* s : io_sources_)
      if (s != first) s->flush();
    for (auto* s : io_sources_) {
      if (s->has_pending()) {
        s->poll(s == first && ready_.empty());
        if (!ready_.empty()) break;
      }
    }
  }
}

}  // namespace mpcache
