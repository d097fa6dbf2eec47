// Asynchronous socket I/O for the TCP transport, in plain (non-module) C++:
// liburing, asio and the socket headers live in ordinary translation units
// behind this std-only interface, so the module units that use it need no
// system headers of their own.
//
// A driver starts sends and receives on file descriptors and reports their
// completions. The caller keeps at most one send and one receive in flight
// per descriptor and keeps their buffers alive until the completion arrives,
// also after cancel(): cancellation only asks the kernel to finish early.
#pragma once
#include <chrono>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mpcache::sys {

// One piece of a gathered send.
struct ConstBuffer {
  const std::byte* data = nullptr;
  std::size_t size = 0;
};

// A descriptor a driver's progress waits on (for a caller that sleeps on
// more than one driver: IoSource::wait_fds).
struct FdInterest {
  int fd = -1;
  bool read = false;
  bool write = false;
};

struct Completion {
  std::uint64_t tag = 0;
  // Bytes transferred (0 on a receive: the peer closed), or -errno
  // (-ECANCELED when cancelled).
  long result = 0;
};

class IoDriver {
 public:
  virtual ~IoDriver() = default;
  virtual std::string name() const = 0;
  virtual void add_fd(int fd) = 0;     // before the first operation on fd
  virtual void remove_fd(int fd) = 0;  // nothing may be in flight on fd; fd stays open
  // Sends from the pieces in order (one gathered write; it may be partial).
  // The pieces array itself need only live until the call returns.
  virtual void send(int fd, std::span<const ConstBuffer> pieces, std::uint64_t tag) = 0;
  virtual void recv(int fd, std::byte* data, std::size_t size, std::uint64_t tag) = 0;
  // In-flight operations on fd complete soon (with -ECANCELED or a result).
  virtual void cancel(int fd) = 0;
  // Hands queued operations to the kernel now (io_uring batches SQEs).
  virtual void submit() {}
  // Hands queued operations to the kernel, waits up to `timeout` (zero: only
  // collects what is done) for at least one completion and appends every
  // available one to `out`; io_uring does all of it in one system call.
  virtual void wait(std::chrono::nanoseconds timeout, std::vector<Completion>& out) = 0;
  // For a caller that sleeps in its own ppoll(2) and then calls wait(0):
  // appends the descriptors whose readiness lets wait(0) report something;
  // false when this driver cannot be waited on that way.
  virtual bool wait_fds(std::vector<FdInterest>& /*out*/) { return false; }
  // Completions wait(0) would report without any descriptor being ready.
  virtual bool ready() const = 0;
};

// One io_uring per driver. Where the kernel has them (6.1+) the ring is
// single-issuer with deferred task work: completions are processed only when
// this thread asks for them, never by interrupting it, and the first thread
// to submit owns the ring (another thread gets a clear error). Throws
// std::runtime_error naming the reason when the kernel refuses (old kernel,
// seccomp, memlock limits).
std::unique_ptr<IoDriver> make_uring_driver(unsigned entries = 64);
// Non-blocking send(2)/recv(2) and ppoll(2) only (poll_driver.cpp).
std::unique_ptr<IoDriver> make_poll_driver();
// Standalone asio (epoll), one io_context per driver.
std::unique_ptr<IoDriver> make_asio_driver();

// The drivers TcpTransport can run on, in the order "auto" tries them
// (drivers.cpp). Adding a driver: its own file here, then one entry there.
struct DriverChoice {
  std::string name;                 // as TcpOptions::backend and --transport name it
  std::vector<std::string> aliases;  // other accepted spellings
  std::function<std::unique_ptr<IoDriver>()> make;  // throws std::runtime_error naming why it cannot start
};
const std::vector<DriverChoice>& io_drivers();

}  // namespace mpcache::sys
