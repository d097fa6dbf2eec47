// asio driver: each descriptor is wrapped (not owned) in an asio TCP socket;
// async_write_some / async_read_some, completions collected by tag.
//
// For a caller that sleeps on several drivers (wait_fds): asio keeps its
// epoll descriptor to itself, so the caller waits on the sockets with
// operations in flight instead. The reactor registered them edge-triggered,
// and epoll records an edge whoever sleeps, so wait(0) (io_context::poll)
// then finds what the caller's sleep was woken for.
#include "io_driver.hpp"
#include <cerrno>
#include <functional>
#include <map>
#include <stdexcept>
#include <asio.hpp>

namespace mpcache::sys {
namespace {

class AsioDriver final : public IoDriver {
 public:
  ~AsioDriver() override {
    for (auto& [fd, socket] : sockets_) {
      asio::error_code ec;
      socket->release(ec);  // the transport owns and closes its descriptors
    }
  }
  std::string name() const override { return "asio"; }

  void add_fd(int fd) override {
    auto socket = std::make_unique<asio::ip::tcp::socket>(io_);
    asio::error_code ec;
    socket->assign(asio::ip::tcp::v4(), fd, ec);
    if (ec) throw std::runtime_error("asio cannot adopt socket: " + ec.message());
    sockets_[fd] = std::move(socket);
  }
  void remove_fd(int fd) override {
    auto it = sockets_.find(fd);
    if (it == sockets_.end()) return;
    asio::error_code ec;
    it->second->release(ec);
    sockets_.erase(it);
    in_flight_.erase(fd);
  }
  void send(int fd, std::span<const ConstBuffer> pieces, std::uint64_t tag) override {
    std::vector<asio::const_buffer> buffers;
    buffers.reserve(pieces.size());
    for (const auto& p : pieces) buffers.emplace_back(p.data, p.size);
    socket(fd).async_write_some(buffers, handler(tag, fd, false));
    ++in_flight_[fd].writes;
    started_ = true;
  }
  void recv(int fd, std::byte* data, std::size_t size, std::uint64_t tag) override {
    socket(fd).async_read_some(asio::buffer(data, size), handler(tag, fd, true));
    ++in_flight_[fd].reads;
    started_ = true;
  }
  void cancel(int fd) override {
    asio::error_code ec;
    socket(fd).cancel(ec);
    started_ = true;
  }
  bool wait_fds(std::vector<FdInterest>& out) override {
    for (const auto& [fd, ops] : in_flight_)
      if (ops.reads > 0 || ops.writes > 0) out.push_back(FdInterest{fd, ops.reads > 0, ops.writes > 0});
    return true;
  }
  // An operation started since the last wait may have completed at once
  // (asio tries sends and receives speculatively and queues the handler).
  bool ready() const override { return started_; }
  void wait(std::chrono::nanoseconds timeout, std::vector<Completion>& out) override {
    started_ = false;
    out_ = &out;
    if (io_.stopped()) io_.restart();
    if (timeout.count() > 0) io_.run_one_for(timeout);
    if (io_.stopped()) io_.restart();
    io_.poll();
    out_ = nullptr;
  }

 private:
  asio::ip::tcp::socket& socket(int fd) {
    auto it = sockets_.find(fd);
    if (it == sockets_.end()) throw std::logic_error("asio driver: unknown descriptor");
    return *it->second;
  }
  std::function<void(const asio::error_code&, std::size_t)> handler(std::uint64_t tag, int fd, bool read) {
    return [this, tag, fd, read](const asio::error_code& ec, std::size_t n) {
      auto& ops = in_flight_[fd];
      --(read ? ops.reads : ops.writes);
      long result = static_cast<long>(n);
      if (ec == asio::error::eof) result = 0;
      else if (ec == asio::error::operation_aborted) result = -ECANCELED;
      else if (ec) result = ec.category() == asio::system_category() ? -ec.value() : -EIO;
      out_->push_back(Completion{tag, result});  // handlers run only inside wait()
    };
  }
  asio::io_context io_{1};
  std::map<int, std::unique_ptr<asio::ip::tcp::socket>> sockets_;
  struct InFlight {
    int reads = 0;
    int writes = 0;
  };
  std::map<int, InFlight> in_flight_;  // per descriptor, for wait_fds
  bool started_ = false;               // an operation started since the last wait()
  std::vector<Completion>* out_ = nullptr;
};

}  // namespace

std::unique_ptr<IoDriver> make_asio_driver() { return std::make_unique<AsioDriver>(); }

}  // namespace mpcache::sys
