// Tasks that run on their own on the caller's loop (a service's sessions and
// its background loops), and a signal a task can wait for. Task<T> is lazy
// and awaited by its caller; a server instead starts a session and goes on.
export module mpcache.serve:task_group;
import mpcache.std;
import mpcache.async;

export namespace mpcache::serve {

// Wakes every task waiting on it at notify(); a wait after a notify waits
// for the next one (callers re-check their condition in a loop).
class Signal {
 public:
  explicit Signal(Scheduler& scheduler) : scheduler_(scheduler) {}
  struct Awaiter {
    Signal* signal;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { signal->waiting_.push_back(h); }
    void await_resume() const noexcept {}
  };
  Awaiter wait() noexcept { return Awaiter{this}; }
  void notify() {
    for (auto h : waiting_) scheduler_.post(h);
    waiting_.clear();
  }

 private:
  Scheduler& scheduler_;
  std::vector<std::coroutine_handle<>> waiting_;
};

// Runs tasks to their end without anyone awaiting them; what a task throws
// goes to `failed` (a task is expected to catch what it can handle). Each
// frame frees itself when its task ends. Destroying the group while tasks
// still run is a bug (their frames would outlive it): await idle() first.
class TaskGroup {
 public:
  explicit TaskGroup(Scheduler& scheduler, std::function<void(const std::string&)> failed = {})
      : scheduler_(scheduler), done_(scheduler), failed_(std::move(failed)) {}
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;

  // Starts `task` in the loop's next tick.
  void spawn(Task<void> task) {
    ++running_;
    auto runner = run(this, std::move(task));
    scheduler_.post(runner.handle);
  }
  std::size_t running() const noexcept { return running_; }
  // Returns once no task of the group runs.
  Task<void> idle() {
    while (running_ > 0) co_await done_.wait();
  }

 private:
  struct Runner {
    struct promise_type {
      Runner get_return_object() noexcept { return Runner{std::coroutine_handle<promise_type>::from_promise(*this)}; }
      std::suspend_always initial_suspend() const noexcept { return {}; }
      std::suspend_never final_suspend() const noexcept { return {}; }  // the frame frees itself
      void return_void() const noexcept {}
      void unhandled_exception() const noexcept { std::terminate(); }  // run() catches everything
    };
    std::coroutine_handle<promise_type> handle;
  };

  static Runner run(TaskGroup* group, Task<void> task) {
    try {
      co_await task;
    } catch (const std::exception& e) {
      if (group->failed_) group->failed_(e.what());
    } catch (...) {
      if (group->failed_) group->failed_("unknown exception");
    }
    --group->running_;
    group->done_.notify();
  }

  Scheduler& scheduler_;
  Signal done_;
  std::function<void(const std::string&)> failed_;
  std::size_t running_ = 0;
};

}  // namespace mpcache::serve
