// when_all: start several tasks together and wait for all of them. Children
// run concurrently on the caller's scheduler, so their network messages
// share ticks (and therefore round trips). If any child throws, the others
// still run to completion and the first exception (by position) propagates.
export module mpcache.async:when_all;
import mpcache.std;
import :task;

namespace mpcache::detail {

struct WhenAllState {
  std::size_t remaining = 0;  // children + 1 for the parent's own start-up
  std::coroutine_handle<> parent;
};

// The wrapper coroutine that runs one child and reports back.
struct WhenAllChild {
  struct promise_type {
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

template <class T>
struct ResultSlot {
  std::optional<StoredResult<T>> value;
  std::exception_ptr error;
};

template <class T>
WhenAllChild run_child(Task<T>& task, ResultSlot<T>& slot) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await task;
      slot.value.emplace();
    } else {
      slot.value.emplace(co_await task);
    }
  } catch (...) {
    slot.error = std::current_exception();
  }
}

// Awaitable that starts all children and resumes the parent when all are done.
struct WhenAllAwaiter {
  WhenAllState* state;
  std::vector<WhenAllChild>* children;
  bool await_ready() const noexcept { return children->empty(); }
  bool await_suspend(std::coroutine_handle<> parent) {
    state->parent = parent;
    state->remaining = children->size() + 1;
    for (auto& c : *children) {
      c.handle.promise().state = state;
      c.handle.resume();  // runs until its first suspension or completion
    }
    return --state->remaining != 0;  // all finished synchronously: continue now
  }
  void await_resume() const noexcept {}
};

template <class T>
StoredResult<T> take(ResultSlot<T>& slot) {
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(*slot.value);
}

}  // namespace mpcache::detail

export namespace mpcache {

// Tuple of results; void tasks contribute std::monostate.
template <class... Ts>
Task<std::tuple<detail::StoredResult<Ts>...>> when_all(Task<Ts>... tasks) {
  std::tuple<detail::ResultSlot<Ts>...> slots;
  std::vector<detail::WhenAllChild> children;
  children.reserve(sizeof...(Ts));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (children.push_back(detail::run_child(tasks, std::get<I>(slots))), ...);
  }(std::index_sequence_for<Ts...>{});
  detail::WhenAllState state;
  co_await detail::WhenAllAwaiter{&state, &children};
  // Rethrow the first failure in argument order.
  std::apply([](auto&... s) { ((s.error ? std::rethrow_exception(s.error) : void()), ...); },
             slots);
  co_return std::apply(
      [](auto&... s) { return std::tuple<detail::StoredResult<Ts>...>(std::move(*s.value)...); },
      slots);
}

// Vector of results, in input order.
template <class T>
Task<std::vector<detail::StoredResult<T>>> when_all(std::vector<Task<T>> tasks) {
  std::vector<detail::ResultSlot<T>> slots(tasks.size());
  std::vector<detail::WhenAllChild> children;
  children.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i)
    children.push_back(detail::run_child(tasks[i], slots[i]));
  detail::WhenAllState state;
  co_await detail::WhenAllAwaiter{&state, &children};
  std::vector<detail::StoredResult<T>> out;
  out.reserve(tasks.size());
  for (auto& s : slots) out.push_back(detail::take(s));
  co_return out;
}

}  // namespace mpcache
