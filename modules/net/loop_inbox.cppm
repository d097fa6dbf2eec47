// LoopInbox: how other threads hand work to an event loop. A server's loop
// serves its mesh and many client connections on one thread; a thread the
// caller owns (an acceptor that authenticates connections, a signal
// watcher) posts callbacks that the loop runs on its own thread, between
// ticks. An eventfd wakes the loop wherever it sleeps: in the inbox alone,
// or in the scheduler's ppoll(2) on every source (IoSource::wait_fds).
export module mpcache.net:loop_inbox;
import mpcache.std;
import mpcache.async;

export namespace mpcache {

class LoopInbox final : public IoSource {
 public:
  // Registers with `scheduler`. Throws Error(io) when no eventfd can be made.
  explicit LoopInbox(Scheduler& scheduler);
  ~LoopInbox() override;
  LoopInbox(const LoopInbox&) = delete;
  LoopInbox& operator=(const LoopInbox&) = delete;

  // Any thread: `fn` runs on the loop's thread soon, in posting order. An
  // exception from `fn` leaves the loop's run_until; the callbacks after it
  // stay queued.
  void post(std::function<void()> fn);
  // While on, the inbox counts as pending work, so a loop with nothing else
  // to do sleeps here instead of reporting a deadlock; a post is waited for
  // only while it is on (or while posts are queued). Any thread; turning it
  // off wakes the loop.
  void keep_alive(bool on);
  // Any thread: the loop wakes and runs a tick (it re-checks its done
  // condition, and an Endpoint its stop token).
  void wake();
  // A stop requested on `token` wakes the loop (as wake()); replaces an
  // earlier token. The inbox must outlive the request.
  void wake_on_stop(std::stop_token token);

  bool has_pending() const override;
  // With nothing queued, a blocking poll sleeps on the eventfd until a post
  // or a wake; then it runs what is queued.
  void poll(bool block) override;
  bool wait_fds(std::vector<WaitFd>& out) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Scheduler& scheduler_;
};

}  // namespace mpcache
