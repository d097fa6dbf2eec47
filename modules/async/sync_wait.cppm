// sync_wait: run a task to completion on a scheduler from ordinary code.
export module mpcache.async:sync_wait;
import mpcache.std;
import :task;
import :scheduler;

namespace mpcache::detail {

struct SyncWaitDriver {
  struct promise_type {
    bool finished = false;
    SyncWaitDriver get_return_object() noexcept {
      return SyncWaitDriver{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    std::suspend_always final_suspend() noexcept {
      finished = true;
      return {};
    }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }  // caught inside
  };
  std::coroutine_handle<promise_type> handle;
  explicit SyncWaitDriver(std::coroutine_handle<promise_type> h) : handle(h) {}
  SyncWaitDriver(SyncWaitDriver&&) = delete;
  ~SyncWaitDriver() { handle.destroy(); }
};

template <class T, class Slot>
SyncWaitDriver drive(Task<T>& task, Slot& slot, std::exception_ptr& error) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await task;
    } else {
      slot.emplace(co_await task);
    }
  } catch (...) {
    error = std::current_exception();
  }
}

}  // namespace mpcache::detail

export namespace mpcache {

template <class T>
T sync_wait(Scheduler& scheduler, Task<T> task) {
  std::optional<std::conditional_t<std::is_void_v<T>, int, T>> slot;
  std::exception_ptr error;
  detail::SyncWaitDriver driver = detail::drive(task, slot, error);
  scheduler.post(driver.handle);
  scheduler.run_until([&] { return driver.handle.promise().finished; });
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*slot);
}

}  // namespace mpcache
