// poll driver: non-blocking send(2)/recv(2) and ppoll(2), nothing else: no
// ring, no reactor library. What the io_uring driver does on its direct
// path, for where io_uring is unavailable (kernels before 5.x, containers
// whose seccomp profile refuses io_uring_setup), so a round still costs a
// party a send, a sleep or a yield, and a receive. A send the socket cannot
// take whole waits for room (POLLOUT) and goes on from where it stopped.
#include <algorithm>
#include "io_driver.hpp"
#include "direct_receives.hpp"
#include "direct_send.hpp"

namespace mpcache::sys {
namespace {

class PollDriver final : public IoDriver {
 public:
  std::string name() const override { return "poll"; }
  void add_fd(int) override {}
  void remove_fd(int) override {}

  void send(int fd, std::span<const ConstBuffer> pieces, std::uint64_t tag) override {
    if (const long sent = send_now(fd, pieces, iov_); sent != -EAGAIN) {
      done_.push_back(Completion{tag, sent});
      return;
    }
    sends_.push_back(WaitingSend{fd, std::vector<ConstBuffer>(pieces.begin(), pieces.end()), tag});
  }
  void recv(int fd, std::byte* data, std::size_t size, std::uint64_t tag) override {
    receives_.add(fd, data, size, tag);
  }
  void cancel(int fd) override {
    receives_.cancel(fd, done_);
    std::erase_if(sends_, [&](const WaitingSend& s) {
      if (s.fd != fd) return false;
      done_.push_back(Completion{s.tag, -ECANCELED});
      return true;
    });
  }

  void wait(std::chrono::nanoseconds timeout, std::vector<Completion>& out) override {
    const std::size_t before = out.size();
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
    retry_sends(out);
    if (receives_.look_before_sleeping(out, before, timeout)) return;
    if (sends_.empty()) {
      receives_.wait(timeout, out);  // also when nothing is pending: then it sleeps
      return;
    }
    polled_.clear();
    receives_.poll_fds(polled_);
    for (const auto& s : sends_) polled_.push_back(pollfd{s.fd, POLLOUT, 0});
    if (sleep_in_ppoll(polled_, timeout) <= 0) return;
    retry_sends(out);
    receives_.collect(out);
  }

  bool wait_fds(std::vector<FdInterest>& out) override {
    receives_.wait_fds(out);
    for (const auto& s : sends_) out.push_back(FdInterest{s.fd, false, true});
    return true;
  }
  bool ready() const override { return !done_.empty(); }

 private:
  struct WaitingSend {
    int fd;
    std::vector<ConstBuffer> pieces;  // the buffers live until the completion (io_driver.hpp)
    std::uint64_t tag;
  };

  // Sends that waited for room: whatever the socket takes now completes them.
  void retry_sends(std::vector<Completion>& out) {
    std::erase_if(sends_, [&](const WaitingSend& s) {
      const long sent = send_now(s.fd, s.pieces, iov_);
      if (sent == -EAGAIN) return false;
      out.push_back(Completion{s.tag, sent});
      return true;
    });
  }

  DirectReceives receives_;
  std::vector<WaitingSend> sends_;
  std::vector<Completion> done_;
  std::vector<pollfd> polled_;
  std::vector<iovec> iov_;
};

}  // namespace

std::unique_ptr<IoDriver> make_poll_driver() { return std::make_unique<PollDriver>(); }

}  // namespace mpcache::sys
