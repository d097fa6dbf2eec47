// io_uring driver: one ring, send/recv/cancel SQEs, completions by tag.
#include "io_driver.hpp"
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <sys/socket.h>
#include <liburing.h>

namespace mpcache::sys {
namespace {

constexpr std::uint64_t cancel_tag = ~std::uint64_t{0} - 1;

class UringDriver final : public IoDriver {
 public:
  explicit UringDriver(unsigned entries) {
    if (const char* force = std::getenv("MPCACHE_DISABLE_IO_URING"); force && *force && *force != '0')
      throw std::runtime_error("io_uring disabled by MPCACHE_DISABLE_IO_URING");
    const int e = io_uring_queue_init(entries, &ring_, 0);
    if (e < 0) throw std::runtime_error(std::string("io_uring_queue_init failed: ") + std::strerror(-e));
  }
  ~UringDriver() override { io_uring_queue_exit(&ring_); }

  std::string name() const override { return "io_uring"; }
  void add_fd(int) override {}
  void remove_fd(int) override {}

  void send(int fd, const std::byte* data, std::size_t size, std::uint64_t tag) override {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_send(sqe, fd, data, size, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, tag);
  }
  void recv(int fd, std::byte* data, std::size_t size, std::uint64_t tag) override {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_recv(sqe, fd, data, size, 0);
    io_uring_sqe_set_data64(sqe, tag);
  }
  void cancel(int fd) override {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, cancel_tag);
  }

  void submit() override {
    const int e = io_uring_submit(&ring_);
    if (e < 0 && e != -EINTR && e != -EBUSY) fail("io_uring_submit", e);
  }

  void wait(std::chrono::nanoseconds timeout, std::vector<Completion>& out) override {
    io_uring_cqe* cqe = nullptr;
    int e;
    if (timeout.count() <= 0) {
      e = io_uring_submit(&ring_);
      if (e < 0 && e != -EINTR && e != -EBUSY) fail("io_uring_submit", e);
    } else {
      __kernel_timespec ts{};
      ts.tv_sec = static_cast<long long>(timeout.count() / 1000000000);
      ts.tv_nsec = static_cast<long long>(timeout.count() % 1000000000);
      e = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
      if (e < 0 && e != -ETIME && e != -EINTR && e != -EBUSY) fail("io_uring_submit_and_wait_timeout", e);
    }
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == cancel_tag || tag == LIBURING_UDATA_TIMEOUT) continue;
      out.push_back(Completion{tag, cqe->res});
    }
    io_uring_cq_advance(&ring_, seen);
  }

 private:
  [[noreturn]] static void fail(const char* what, int e) {
    throw std::runtime_error(std::string(what) + " failed: " + std::strerror(-e));
  }
  io_uring_sqe* get_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      const int e = io_uring_submit(&ring_);
      if (e < 0) fail("io_uring_submit", e);
      sqe = io_uring_get_sqe(&ring_);
      if (!sqe) throw std::runtime_error("io_uring submission queue full");
    }
    return sqe;
  }
  io_uring ring_{};
};

}  // namespace

std::unique_ptr<IoDriver> make_uring_driver(unsigned entries) {
  return std::make_unique<UringDriver>(entries);
}

}  // namespace mpcache::sys
