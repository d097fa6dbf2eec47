// Receives taken with plain recv(2) instead of a ring or a reactor, and the
// sleep in ppoll(2) on their sockets (used by the io_uring and poll drivers).
//
// Why: a thread that sleeps in ppoll(2) or recv(2) on a socket is woken by
// the socket itself, as a "sync" wake-up that the scheduler answers by
// running it on the sender's core, which is about to sleep. A thread that
// sleeps in the ring is woken by io_uring's task work, an ordinary wake-up
// that lands on whatever core it last ran on; on a machine busy with other
// work that is often a core taken by someone else. Measured on loopback
// with one busy thread on this 2-core machine (bench/net_preset.cpp, rtt
// rows): the blocking baseline 13.8 us, the ring 16.8-19.7 us, plain recv
// with a short spin and then ppoll 14.4-16.5 us.
//
// A receive stays here until it completes or is cancelled; the io_uring
// driver hands it to the ring only when it must sleep while the ring has
// other work in flight (a send the socket could not take at once), since one
// thread cannot sleep in both at once.
#pragma once
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>
#include <poll.h>
#include <sys/socket.h>
#include "io_driver.hpp"

namespace mpcache::sys {

// ppoll(2) for up to `timeout`, returning what ppoll returns. A signal makes
// it return -1 (EINTR): the caller's loop checks its deadlines and comes back.
inline int sleep_in_ppoll(std::vector<pollfd>& fds, std::chrono::nanoseconds timeout) {
  const timespec ts{static_cast<time_t>(timeout.count() / 1000000000),
                    static_cast<long>(timeout.count() % 1000000000)};
  return ::ppoll(fds.data(), fds.size(), &ts, nullptr);
}

class DirectReceives {
 public:
  struct Receive {
    int fd = -1;
    std::byte* data = nullptr;
    std::size_t size = 0;
    std::uint64_t tag = 0;
  };

  bool empty() const noexcept { return pending_.empty(); }
  void add(int fd, std::byte* data, std::size_t size, std::uint64_t tag) {
    pending_.push_back(Receive{fd, data, size, tag});
  }
  // Each receive on fd completes with -ECANCELED (appended to out).
  void cancel(int fd, std::vector<Completion>& out) {
    std::erase_if(pending_, [&](const Receive& r) {
      if (r.fd != fd) return false;
      out.push_back(Completion{r.tag, -ECANCELED});
      return true;
    });
  }
  // Hands every pending receive over (to the ring), leaving none here.
  std::vector<Receive> take_all() {
    std::vector<Receive> all;
    all.swap(pending_);
    return all;
  }

  // One recv(2) per pending receive, without blocking; appends what
  // completed (bytes, 0 when the peer closed, or -errno) and returns how many.
  std::size_t collect(std::vector<Completion>& out) {
    std::size_t done = 0;
    for (std::size_t i = 0; i < pending_.size();) {
      const Receive& r = pending_[i];
      const ssize_t n = ::recv(r.fd, r.data, r.size, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        ++i;
        continue;
      }
      out.push_back(Completion{r.tag, n < 0 ? -long{errno} : long{n}});
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      ++done;
    }
    return done;
  }

  // A wait up to the point of sleeping. Completions already in `out` (past
  // `before`: sends, cancels) are reported first and the receives looked at
  // by the next call (right after a send the reply is rarely there yet),
  // but never deferred twice in a row, so a party that keeps sending still
  // hears its peers; with nothing done, a zero timeout only looks. True when
  // the wait is over; false when nothing is done and the caller may sleep.
  bool look_before_sleeping(std::vector<Completion>& out, std::size_t before, std::chrono::nanoseconds timeout) {
    const bool have_some = out.size() > before;
    if (have_some && !deferred_) {
      deferred_ = true;
      return true;
    }
    deferred_ = false;
    if (have_some || timeout.count() <= 0) {
      collect(out);
      return true;
    }
    return false;
  }

  // Sleeps in ppoll(2) until a pending receive's socket is readable (or
  // closed, or in error) or `timeout` passes, then collects. With nothing
  // pending it just sleeps for `timeout`.
  std::size_t wait(std::chrono::nanoseconds timeout, std::vector<Completion>& out) {
    polled_.clear();
    poll_fds(polled_);
    if (sleep_in_ppoll(polled_, timeout) <= 0) return 0;
    return collect(out);
  }

  // Appends one pollfd (POLLIN) per pending receive, for a caller that
  // sleeps on more than these sockets.
  void poll_fds(std::vector<pollfd>& out) const {
    for (const Receive& r : pending_) out.push_back(pollfd{r.fd, POLLIN, 0});
  }
  void wait_fds(std::vector<FdInterest>& out) const {
    for (const Receive& r : pending_) out.push_back(FdInterest{r.fd, true, false});
  }

 private:
  std::vector<Receive> pending_;
  std::vector<pollfd> polled_;
  bool deferred_ = false;  // the last wait returned before looking at them
};

}  // namespace mpcache::sys
