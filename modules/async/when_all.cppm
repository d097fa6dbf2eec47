// when_all: start several tasks together and wait for all of them. Children
// run concurrently on the caller's scheduler, so their network messages
// share ticks (and therefore round trips).
//
// When a child fails, when_all requests a stop on the StopSignal it owns
// (:stop), with the reason "a sibling failed: <its error>". Its children and
// everything they await see that signal (a stop of the signal above this
// when_all stops it too); waits that honour it (a network receive) end at
// once with Error(cancelled) instead of waiting for a message the failed
// sibling's protocol will never bring. Work that does not wait goes on; the
// call still returns only once every child has finished. The first failure
// by position propagates, skipping the Error(cancelled) of children that
// failed after the stop (consequences of it, not the cause); if every
// failure is such a one, the first by position.
export module mpcache.async:when_all;
import mpcache.std;
import mpcache.core;
import :stop;
import :task;

namespace mpcache::detail {

struct WhenAllState {
  std::size_t remaining = 0;  // children + 1 for the parent's own start-up
  std::coroutine_handle<> parent;
  // Made when the children start, chained to the signal when_all runs under.
  std::optional<StopSignal> stop;
};

// The wrapper coroutine that runs one child and reports back.
struct WhenAllChild {
  struct promise_type : StopCarrier {
    WhenAllState* state = nullptr;
    WhenAllChild get_return_object() noexcept {
      return WhenAllChild{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    struct Final {
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        auto* s = h.promise().state;
        if (--s->remaining == 0) return s->parent;
        return std::noop_coroutine();
      }
      void await_resume() const noexcept {}
    };
    Final final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }  // caught inside
  };
  std::coroutine_handle<promise_type> handle;
  explicit WhenAllChild(std::coroutine_handle<promise_type> h) : handle(h) {}
  WhenAllChild(WhenAllChild&& o) noexcept : handle(std::exchange(o.handle, {})) {}
  WhenAllChild& operator=(WhenAllChild&&) = delete;
  ~WhenAllChild() {
    if (handle) handle.destroy();
  }
};

template <class T>
using StoredResult = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

struct ChildFailure {
  std::exception_ptr error;
  bool after_stop = false;  // an Error(cancelled) after this when_all's stop
};

template <class T>
struct ResultSlot : ChildFailure {
  std::optional<StoredResult<T>> value;
};

// Keeps the current exception in `slot` and stops the siblings.
inline void child_failed(WhenAllState& state, ChildFailure& slot, bool cancelled, const char* what) noexcept {
  slot.error = std::current_exception();
  slot.after_stop = cancelled && state.stop->stop_requested();
  std::string why;
  try {
    why = std::string("a sibling failed: ") + what;
  } catch (...) {  // no memory for the reason: stop anyway
  }
  state.stop->request_stop(std::move(why));
}

template <class T>
WhenAllChild run_child(Task<T>& task, ResultSlot<T>& slot, WhenAllState& state) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await task;
      slot.value.emplace();
    } else {
      slot.value.emplace(co_await task);
    }
  } catch (const Error& e) {
    child_failed(state, slot, e.code() == ErrorCode::cancelled, e.what());
  } catch (const std::exception& e) {
    child_failed(state, slot, false, e.what());
  } catch (...) {
    child_failed(state, slot, false, "an exception that is not a std::exception");
  }
}

// Rethrows the first failure by position that is not a consequence of the
// stop, else the first one; returns if no child failed.
inline void rethrow_first_failure(std::span<const ChildFailure* const> slots) {
  const ChildFailure* first = nullptr;
  for (const ChildFailure* s : slots) {
    if (!s->error) continue;
    if (!s->after_stop) std::rethrow_exception(s->error);
    if (!first) first = s;
  }
  if (first) std::rethrow_exception(first->error);
}

// Awaitable that starts all children and resumes the parent when all are done.
struct WhenAllAwaiter {
  WhenAllState* state;
  std::vector<WhenAllChild>* children;
  bool await_ready() const noexcept { return children->empty(); }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> parent) {
    state->parent = parent;
    state->remaining = children->size() + 1;
    state->stop.emplace(stop_signal_of(parent));  // the signal when_all itself runs under
    for (auto& c : *children) {
      c.handle.promise().state = state;
      c.handle.promise().stop_signal = &*state->stop;
      c.handle.resume();  // runs until its first suspension or completion
    }
    return --state->remaining != 0;  // all finished synchronously: continue now
  }
  void await_resume() const noexcept {}
};


}  // namespace mpcache::detail

export namespace mpcache {

// Tuple of results; void tasks contribute std::monostate.
template <class... Ts>
Task<std::tuple<detail::StoredResult<Ts>...>> when_all(Task<Ts>... tasks) {
  std::tuple<detail::ResultSlot<Ts>...> slots;
  detail::WhenAllState state;
  std::vector<detail::WhenAllChild> children;
  children.reserve(sizeof...(Ts));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (children.push_back(detail::run_child(tasks, std::get<I>(slots), state)), ...);
  }(std::index_sequence_for<Ts...>{});
  co_await detail::WhenAllAwaiter{&state, &children};
  std::apply(
      [](const auto&... s) {
        const std::array<const detail::ChildFailure*, sizeof...(Ts)> all{&s...};
        detail::rethrow_first_failure(all);
      },
      slots);
  co_return std::apply(
      [](auto&... s) { return std::tuple<detail::StoredResult<Ts>...>(std::move(*s.value)...); },
      slots);
}

// Vector of results, in input order.
template <class T>
Task<std::vector<detail::StoredResult<T>>> when_all(std::vector<Task<T>> tasks) {
  std::vector<detail::ResultSlot<T>> slots(tasks.size());
  detail::WhenAllState state;
  std::vector<detail::WhenAllChild> children;
  children.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i)
    children.push_back(detail::run_child(tasks[i], slots[i], state));
  co_await detail::WhenAllAwaiter{&state, &children};
  std::vector<const detail::ChildFailure*> failures;
  for (const auto& s : slots)
    if (s.error) failures.push_back(&s);
  detail::rethrow_first_failure(failures);
  std::vector<detail::StoredResult<T>> out;
  out.reserve(tasks.size());
  for (auto& s : slots) out.push_back(std::move(*s.value));
  co_return out;
}

}  // namespace mpcache
