// One send(2) of gathered pieces that never blocks, for the drivers that
// send straight to the socket (uring_driver.cpp, poll_driver.cpp).
#pragma once
#include <cerrno>
#include <span>
#include <vector>
#include <sys/socket.h>
#include <sys/uio.h>
#include "io_driver.hpp"

namespace mpcache::sys {

// A gathered send takes at most this many pieces; the rest goes in the next
// send after the (then partial) completion.
inline constexpr std::size_t max_send_pieces = 256;

// Bytes sent, -EAGAIN when the socket takes nothing now, or another -errno.
// `iov` is scratch space, reused between calls.
inline long send_now(int fd, std::span<const ConstBuffer> pieces, std::vector<iovec>& iov) {
  iov.clear();
  for (std::size_t i = 0; i < pieces.size() && i < max_send_pieces; ++i)
    iov.push_back(iovec{const_cast<std::byte*>(pieces[i].data), pieces[i].size});
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  for (;;) {
    const ssize_t sent = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent >= 0) return sent;
    if (errno == EINTR) continue;
    return errno == EWOULDBLOCK ? -EAGAIN : -long{errno};
  }
}

}  // namespace mpcache::sys
