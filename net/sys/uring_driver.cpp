// io_uring driver: one ring, send/recv/cancel SQEs, completions by tag.
//
// The ring is created disabled and enabled by the first call that submits,
// so that with IORING_SETUP_SINGLE_ISSUER the thread that drives the
// transport owns it, whichever thread constructed it. With
// IORING_SETUP_DEFER_TASKRUN a socket that becomes readable only queues
// work for this thread; it runs inside our next io_uring_enter(GETEVENTS),
// so a busy-polling caller is not interrupted and a waiting one is woken once.
//
// Receives do not go to the ring unless they must (direct_receives.hpp): they
// are tried with recv(2), and a wait that has only receives to wait for
// sleeps in ppoll(2) on their sockets, whose wake-up brings this thread to
// the sender's core. Sends too are tried at once with sendmsg(2); the ring
// gets what the socket refuses, and the cancels.
//
// A caller that sleeps on several drivers at once (wait_fds) waits on the
// direct receives' sockets and, while the ring has work in flight, on an
// eventfd registered with the ring: with DEFER_TASKRUN the ring's own
// descriptor does not wake a ppoll(2) when a completion becomes ready
// (measured on 6.18: the sleep ran to its timeout), but the registered
// eventfd is signalled as soon as task work is queued for us.
#include "io_driver.hpp"
#include "direct_receives.hpp"
#include "direct_send.hpp"
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/uio.h>
#include <liburing.h>

namespace mpcache::sys {
namespace {

constexpr std::uint64_t cancel_tag = ~std::uint64_t{0} - 1;

class UringDriver final : public IoDriver {
 public:
  explicit UringDriver(unsigned entries) {
    if (const char* force = std::getenv("MPCACHE_DISABLE_IO_URING"); force && *force && *force != '0')
      throw std::runtime_error("io_uring disabled by MPCACHE_DISABLE_IO_URING");
    const unsigned deferred = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
    int e = io_uring_queue_init(entries, &ring_, deferred);
    if (e == -EINVAL) {  // kernel before 6.1: plain ring, task work by signal
      e = io_uring_queue_init(entries, &ring_, 0);
      enabled_ = true;
    } else {
      deferred_ = true;
    }
    if (e < 0) throw std::runtime_error(std::string("io_uring_queue_init failed: ") + std::strerror(-e));
  }
  ~UringDriver() override {
    io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) ::close(event_fd_);
  }

  std::string name() const override { return "io_uring"; }
  void add_fd(int) override {}
  void remove_fd(int) override {}

  void send(int fd, std::span<const ConstBuffer> pieces, std::uint64_t tag) override {
    // Straight to the socket when it takes the data now, as it nearly always
    // does a round's record: one send(2), no ring. The ring gets what the
    // socket refuses (its buffer full) and waits for room.
    if (const long sent = send_now(fd, pieces, direct_iov_); sent != -EAGAIN) {
      done_.push_back(Completion{tag, sent});
      return;
    }
    io_uring_sqe* sqe = get_sqe();
    if (pieces.size() == 1) {
      io_uring_prep_send(sqe, fd, pieces[0].data, pieces[0].size, MSG_NOSIGNAL);
    } else {
      // The kernel reads the msghdr when it issues the SQE, which may be at a
      // later submit: keep one per tag (one send in flight per descriptor).
      Gather& g = gathers_[tag];
      g.iov.clear();
      for (std::size_t i = 0; i < pieces.size() && i < max_send_pieces; ++i)
        g.iov.push_back(iovec{const_cast<std::byte*>(pieces[i].data), pieces[i].size});
      g.msg = msghdr{};
      g.msg.msg_iov = g.iov.data();
      g.msg.msg_iovlen = g.iov.size();
      io_uring_prep_sendmsg(sqe, fd, &g.msg, MSG_NOSIGNAL);
    }
    io_uring_sqe_set_data64(sqe, tag);
  }
  void recv(int fd, std::byte* data, std::size_t size, std::uint64_t tag) override {
    direct_.add(fd, data, size, tag);
  }
  void cancel(int fd) override {
    direct_.cancel(fd, done_);
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, cancel_tag);
  }

  void submit() override {
    if (io_uring_sq_ready(&ring_) == 0) return;
    enable();
    const int e = io_uring_submit(&ring_);
    if (e < 0 && e != -EINTR && e != -EBUSY) fail("io_uring_submit", e);
  }

  void wait(std::chrono::nanoseconds timeout, std::vector<Completion>& out) override {
    enable();
    const std::size_t before = out.size();
    // Reset the eventfd before looking at the ring: a completion after this
    // signals it again, so a caller's next sleep cannot miss it.
    if (event_fd_ >= 0) {
      std::uint64_t count = 0;
      (void)!::read(event_fd_, &count, sizeof count);
    }
    // What is done already: sends the socket took at once, cancelled
    // receives, and the ring's completions (submitting what is queued;
    // deferred task work runs only when asked for, GETEVENTS). They go
    // before the receives (DirectReceives::look_before_sleeping).
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
    if (io_uring_sq_ready(&ring_) > 0 || in_ring_ > 0) {
      const int e = deferred_ ? io_uring_submit_and_get_events(&ring_) : io_uring_submit(&ring_);
      if (e < 0 && e != -EINTR && e != -EBUSY) fail("io_uring_submit", e);
      reap(out);
    }
    if (direct_.look_before_sleeping(out, before, timeout)) return;
    if (in_ring_ == 0) {
      direct_.wait(timeout, out);  // also when there is nothing to wait for: then it sleeps
      return;
    }
    // The ring has work in flight (a send waiting for room, a cancel): one
    // thread cannot sleep in both, so the receives go to the ring as well.
    for (const auto& r : direct_.take_all()) {
      io_uring_sqe* sqe = get_sqe();
      io_uring_prep_recv(sqe, r.fd, r.data, r.size, 0);
      io_uring_sqe_set_data64(sqe, r.tag);
    }
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<long long>(timeout.count() / 1000000000);
    ts.tv_nsec = static_cast<long long>(timeout.count() % 1000000000);
    const int e = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    if (e < 0 && e != -ETIME && e != -EINTR && e != -EBUSY) fail("io_uring_submit_and_wait_timeout", e);
    reap(out);
  }

  bool wait_fds(std::vector<FdInterest>& out) override {
    direct_.wait_fds(out);
    if (in_ring_ == 0) return true;
    if (event_fd_ < 0) {
      // Registered once the ring is first waited on this way, by the thread
      // that drives it (a single-issuer ring refuses others).
      enable();
      const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (fd < 0) return false;
      if (io_uring_register_eventfd(&ring_, fd) < 0) {
        ::close(fd);
        return false;
      }
      event_fd_ = fd;
      // Task work queued before now signalled nothing: look once more.
      const std::uint64_t one = 1;
      (void)!::write(event_fd_, &one, sizeof one);
    }
    out.push_back(FdInterest{event_fd_, true, false});
    return true;
  }
  bool ready() const override { return !done_.empty() || io_uring_cq_ready(&ring_) > 0; }

 private:
  struct Gather {
    std::vector<iovec> iov;
    msghdr msg{};
  };

  [[noreturn]] static void fail(const char* what, int e) {
    if (e == -EEXIST)
      throw std::runtime_error(std::string(what) +
                               " failed: the transport's ring belongs to the thread that first drove it; "
                               "drive a transport from one thread only");
    throw std::runtime_error(std::string(what) + " failed: " + std::strerror(-e));
  }
  void enable() {
    if (enabled_) return;
    // liburing 2.3 declares io_uring_enable_rings but does not export it.
    if (::syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) < 0)
      fail("enabling the io_uring", -errno);
    enabled_ = true;
  }
  // Appends the ring's completions (not the cancels' own) to out.
  void reap(std::vector<Completion>& out) {
    io_uring_cqe* cqe = nullptr;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == LIBURING_UDATA_TIMEOUT) continue;
      --in_ring_;
      if (tag == cancel_tag) continue;
      out.push_back(Completion{tag, cqe->res});
    }
    io_uring_cq_advance(&ring_, seen);
  }
  // Every SQE is counted in in_ring_ until its completion is reaped.
  io_uring_sqe* get_sqe() {
    ++in_ring_;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      enable();
      const int e = io_uring_submit(&ring_);
      if (e < 0) fail("io_uring_submit", e);
      sqe = io_uring_get_sqe(&ring_);
      if (!sqe) throw std::runtime_error("io_uring submission queue full");
    }
    return sqe;
  }
  io_uring ring_{};
  bool deferred_ = false;
  bool enabled_ = false;
  // Operations handed to the ring (queued or submitted) whose completion has
  // not been reaped yet.
  std::size_t in_ring_ = 0;
  // Signalled by the ring when a completion or task work arrives (wait_fds);
  // -1 until first needed.
  int event_fd_ = -1;
  DirectReceives direct_;
  // Completions known without the ring (direct sends, cancelled receives),
  // reported by the next wait().
  std::vector<Completion> done_;
  std::vector<iovec> direct_iov_;
  std::unordered_map<std::uint64_t, Gather> gathers_;
};

}  // namespace

std::unique_ptr<IoDriver> make_uring_driver(unsigned entries) {
  return std::make_unique<UringDriver>(entries);
}

}  // namespace mpcache::sys
