// A compute pool the caller owns and hands to a party, for big local work
// (ring matmuls, large element-wise kernels). The library never makes one:
// without a pool everything runs on the thread of the caller's loop. With
// one, that thread splits the work into parts, runs some itself and waits
// for the pool's threads to run the rest, so a protocol step still starts
// and ends on the loop's thread and coroutines never see another thread.
//
// Our own small pool over std::jthread, not OpenMP or TBB: their runtimes
// keep process-wide thread teams that outlive every object we hand out and
// pick their own sizes; this one starts its threads in the constructor,
// joins them in the destructor, and nothing else.
export module mpcache.core:compute_pool;
import mpcache.std;

export namespace mpcache {

class ComputePool {
 public:
  // `threads` counts the caller: ComputePool(2) starts one thread of its
  // own. 1 starts none (run() then runs every part on the caller's thread).
  // Throws Error(invalid_argument) for 0 or more than max_threads.
  explicit ComputePool(std::size_t threads);
  ~ComputePool();  // joins the threads (waits for nothing: run() has returned)
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  static constexpr std::size_t max_threads = 256;
  std::size_t threads() const noexcept { return threads_; }

  // Calls body(i) once for every i in [0, parts), the caller's thread
  // taking part, and returns when all calls have returned. If calls throw,
  // the parts not yet started are skipped and the first exception is
  // rethrown here. Calls from several threads at once take turns; a body
  // that calls run() on the same pool runs that inner work on its own thread.
  template <class Body>
  void run(std::size_t parts, Body&& body) {
    using B = std::remove_reference_t<Body>;
    run_erased(parts, [](void* b, std::size_t i) { (*static_cast<B*>(b))(i); },
               const_cast<void*>(static_cast<const void*>(std::addressof(body))));
  }

 private:
  struct Impl;
  void run_erased(std::size_t parts, void (*call)(void*, std::size_t), void* body);
  std::size_t threads_;
  std::unique_ptr<Impl> impl_;
};

// How many parts to cut `work` units into on `pool` (nullptr: no pool):
// one per thread, but none under `grain` units, and at least 1.
inline std::size_t parts_for(const ComputePool* pool, std::size_t work, std::size_t grain) {
  if (!pool || pool->threads() <= 1 || grain == 0) return 1;
  return std::max<std::size_t>(1, std::min(pool->threads(), work / grain));
}

}  // namespace mpcache
