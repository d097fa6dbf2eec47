// Stop requests that flow down the coroutine tree. A StopSignal is a
// std::stop_source with a reason and an optional parent: a stop of the
// parent stops it too (and its reason is the parent's). when_all owns one
// per call and requests a stop on it when a child fails. Every Task's
// promise carries a pointer to the signal of the coroutine that awaits it
// (set at co_await), so everything below a when_all sees that when_all's
// signal; leaf awaiters (a network receive) read it from the handle they are
// given (stop_signal_of) and register a std::stop_callback that wakes them.
//
// The pointer needs no ownership: a task runs only while its awaiter waits
// for it, and the signal lives in that awaiter's (or an ancestor's) frame.
// Stops are requested on the loop's thread (a child's failure); a callback
// therefore only posts work to the scheduler, never resumes it inline.
export module mpcache.async:stop;
import mpcache.std;

export namespace mpcache {

class StopSignal {
 public:
  // A signal stopped by request_stop() and by a stop of `parent` (if any),
  // also one that happened already.
  explicit StopSignal(const StopSignal* parent = nullptr) : parent_(parent) {
    if (parent_) chain_.emplace(parent_->token_, Forward{this});
  }
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  const std::stop_token& token() const noexcept { return token_; }
  bool stop_requested() const noexcept { return token_.stop_requested(); }
  // Requests the stop (and runs the callbacks registered on token()); only
  // the first request's `why` is kept.
  void request_stop(std::string why) noexcept {
    if (token_.stop_requested()) return;
    why_ = std::move(why);
    source_.request_stop();
  }
  // Why the stop was requested: this signal's reason, or its parent's when
  // the stop came from there ("" while no stop was requested).
  std::string why() const {
    if (!why_.empty() || !parent_ || !token_.stop_requested()) return why_;
    return parent_->why();
  }

 private:
  struct Forward {
    StopSignal* self;
    void operator()() const noexcept { self->source_.request_stop(); }
  };
  const StopSignal* parent_;
  std::stop_source source_;
  std::stop_token token_ = source_.get_token();
  std::string why_;
  std::optional<std::stop_callback<Forward>> chain_;  // last: deregisters first
};

namespace detail {
// Base of the promises that carry the signal of their awaiter (Task's,
// when_all's child wrappers).
struct StopCarrier {
  const StopSignal* stop_signal = nullptr;
};
}  // namespace detail

// The signal the coroutine of `h` may be stopped by (nullptr: none, e.g. a
// coroutine that is not a Task, or a Task not under a when_all).
template <class P>
const StopSignal* stop_signal_of(std::coroutine_handle<P> h) noexcept {
  if constexpr (std::is_base_of_v<detail::StopCarrier, P>)
    return h.promise().stop_signal;
  else
    return nullptr;
}

// `co_await current_stop_signal()` yields the awaiting coroutine's signal
// (nullptr: none) without suspending it.
struct CurrentStopSignal {
  const StopSignal* signal = nullptr;
  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    signal = stop_signal_of(h);
    return false;  // resume at once
  }
  const StopSignal* await_resume() const noexcept { return signal; }
};
inline CurrentStopSignal current_stop_signal() noexcept { return {}; }

// `co_await current_stop_token()`: the token of that signal (an empty token,
// which is never stopped, when there is none).
struct CurrentStopToken : CurrentStopSignal {
  std::stop_token await_resume() const noexcept { return signal ? signal->token() : std::stop_token{}; }
};
inline CurrentStopToken current_stop_token() noexcept { return {}; }

}  // namespace mpcache
