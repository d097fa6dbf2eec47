// See raw_ring_rtt.hpp.
#include "raw_ring_rtt.hpp"
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <poll.h>
#include <sys/socket.h>
#include <liburing.h>

namespace mpcache::bench {
namespace {

constexpr std::uint64_t recv_tag = 1, send_tag = 2;

class Side {
 public:
  Side(int fd, RingWait wait) : fd_(fd), wait_(wait) {
    const unsigned flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int e = io_uring_queue_init(8, &ring_, flags);
    if (e == -EINVAL) e = io_uring_queue_init(8, &ring_, 0);
    if (e < 0) throw std::runtime_error(std::string("io_uring_queue_init: ") + std::strerror(-e));
    arm_recv();
  }
  ~Side() { io_uring_queue_exit(&ring_); }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  // Queues the send; it leaves with the next submit (as in the transport,
  // one system call submits and waits).
  void send() {
    io_uring_sqe* s = io_uring_get_sqe(&ring_);
    io_uring_prep_send(s, fd_, buf_, sizeof buf_, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(s, send_tag);
    if (wait_ == RingWait::poll) io_uring_submit(&ring_);
  }
  // Waits for the armed receive, reaping send completions, then re-arms.
  void recv() {
    for (;;) {
      if (wait_ == RingWait::ring) {
        io_uring_submit_and_wait(&ring_, 1);
      } else {
        io_uring_submit_and_get_events(&ring_);
      }
      io_uring_cqe* c = nullptr;
      bool got = false;
      while (io_uring_peek_cqe(&ring_, &c) == 0) {
        if (c->res < 0) throw std::runtime_error(std::string("raw ring: ") + std::strerror(-c->res));
        got = got || io_uring_cqe_get_data64(c) == recv_tag;
        io_uring_cqe_seen(&ring_, c);
      }
      if (got) break;
      if (wait_ == RingWait::poll) std::this_thread::yield();
      if (wait_ == RingWait::socket) {
        pollfd p{fd_, POLLIN, 0};
        ::poll(&p, 1, -1);
      }
    }
    arm_recv();
  }
  void finish() { io_uring_submit(&ring_); }

 private:
  void arm_recv() {
    io_uring_sqe* s = io_uring_get_sqe(&ring_);
    io_uring_prep_recv(s, fd_, buf_, sizeof buf_, MSG_WAITALL);
    io_uring_sqe_set_data64(s, recv_tag);
  }
  int fd_;
  RingWait wait_;
  io_uring ring_{};
  char buf_[8] = {};
};

}  // namespace

double raw_ring_rtt(int fd_a, int fd_b, int round_trips, RingWait wait) {
  std::string error;
  auto run = [&](int fd, bool first, double* seconds) {
    try {
      Side side(fd, wait);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < round_trips; ++i) {
        if (first) {
          side.send();
          side.recv();
        } else {
          side.recv();
          side.send();
        }
      }
      side.finish();
      if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  double seconds = 0;
  std::thread echo(run, fd_b, false, nullptr);
  run(fd_a, true, &seconds);
  echo.join();
  if (!error.empty()) throw std::runtime_error(error);
  return seconds / round_trips;
}

}  // namespace mpcache::bench
