// `--load N`: N threads that keep a core busy each for as long as the
// benchmark runs, to measure latency on a machine doing other work (a
// service rarely has its cores to itself). They only spin: no memory
// traffic, no system calls.
#pragma once
#include <atomic>
#include <thread>
#include <vector>

namespace mpcache::bench {

class CpuLoad {
 public:
  explicit CpuLoad(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] {
        unsigned long spins = 0;
        while (!stop_.load(std::memory_order_relaxed)) spins = spins + 1;
        sink_.fetch_add(spins, std::memory_order_relaxed);
      });
  }
  ~CpuLoad() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  CpuLoad(const CpuLoad&) = delete;
  CpuLoad& operator=(const CpuLoad&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<unsigned long> sink_{0};
  std::vector<std::thread> threads_;
};

}  // namespace mpcache::bench
