// Task<T>: a lazy coroutine. Nothing runs until it is awaited; awaiting it
// transfers control to it symmetrically and it resumes its awaiter the same
// way when done, so chains of synchronous completions never grow the stack.
// The frame is owned by the Task object: destroying an unawaited or finished
// task frees everything, also when the body threw.
//
// Awaiting a task also hands it the awaiter's stop signal (see :stop): a
// task started by when_all, and everything it awaits, can see that
// when_all's stop.
export module mpcache.async:task;
import mpcache.std;
import :stop;

export namespace mpcache {

template <class T = void>
class Task;

namespace detail {

struct TaskFinalAwaiter {
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> done) noexcept {
    auto next = done.promise().continuation;
    return next ? next : std::noop_coroutine();
  }
  void await_resume() const noexcept {}
};

struct TaskPromiseBase : StopCarrier {
  std::coroutine_handle<> continuation;
  std::suspend_always initial_suspend() const noexcept { return {}; }
  TaskFinalAwaiter final_suspend() const noexcept { return {}; }
};

template <class T>
struct TaskPromise : TaskPromiseBase {
  std::variant<std::monostate, T, std::exception_ptr> result;
  Task<T> get_return_object() noexcept;
  template <class U>
    requires std::is_convertible_v<U&&, T>
  void return_value(U&& value) {
    result.template emplace<1>(std::forward<U>(value));
  }
  void unhandled_exception() noexcept { result.template emplace<2>(std::current_exception()); }
  T take() {
    if (result.index() == 2) std::rethrow_exception(std::get<2>(result));
    return std::move(std::get<1>(result));
  }
};

template <>
struct TaskPromise<void> : TaskPromiseBase {
  std::exception_ptr error;
  Task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void unhandled_exception() noexcept { error = std::current_exception(); }
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace detail

template <class T>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::TaskPromise<T>;
  using value_type = T;

  Task() noexcept = default;
  explicit Task(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  bool valid() const noexcept { return static_cast<bool>(handle_); }
  bool done() const noexcept { return handle_ && handle_.done(); }

  struct Awaiter {
    std::coroutine_handle<promise_type> handle;
    bool await_ready() const noexcept { return !handle || handle.done(); }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> awaiting) noexcept {
      handle.promise().continuation = awaiting;
      handle.promise().stop_signal = stop_signal_of(awaiting);  // nullptr if it has none
      return handle;
    }
    T await_resume() { return handle.promise().take(); }
  };
  // Awaiting a task consumes its result; the frame lives until the Task dies.
  Awaiter operator co_await() && noexcept { return Awaiter{handle_}; }
  Awaiter operator co_await() & noexcept { return Awaiter{handle_}; }

  // For drivers (sync_wait, when_all): start or inspect without awaiting.
  std::coroutine_handle<promise_type> handle() const noexcept { return handle_; }

 private:
  std::coroutine_handle<promise_type> handle_;
};

namespace detail {
template <class T>
Task<T> TaskPromise<T>::get_return_object() noexcept {
  return Task<T>{std::coroutine_handle<TaskPromise<T>>::from_promise(*this)};
}
inline Task<void> TaskPromise<void>::get_return_object() noexcept {
  return Task<void>{std::coroutine_handle<TaskPromise<void>>::from_promise(*this)};
}
}  // namespace detail

}  // namespace mpcache
