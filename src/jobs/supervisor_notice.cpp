// See supervisor_notice.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
import mpcache;
#include "supervisor_notice.hpp"

namespace mpcache::jobs {

std::string notify_supervisor(const std::string& state) {
  const char* where = std::getenv("NOTIFY_SOCKET");
  if (!where || !*where) return {};
  const std::string path = where;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if ((path[0] != '/' && path[0] != '@') || path.size() >= sizeof address.sun_path)
    return "NOTIFY_SOCKET '" + path + "' is not a unix socket path";
  std::memcpy(address.sun_path, path.data(), path.size());
  if (path[0] == '@') address.sun_path[0] = '\0';  // abstract namespace
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("NOTIFY_SOCKET: socket: ") + std::strerror(errno);
  std::string why;
  if (::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&address), length) < 0)
    why = "NOTIFY_SOCKET '" + path + "': " + std::strerror(errno);
  ::close(fd);
  return why;
}

}  // namespace mpcache::jobs
