#include "client_gate.hpp"
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include "connect.hpp"
#include "door_refusal.hpp"

namespace mpcache::sys {
namespace {

using Clock = std::chrono::steady_clock;
// "MPCCLNT1", then the server id wanted (u32 little endian), then the
// client's raw Ed25519 public key.
constexpr std::array<unsigned char, 8> hello_magic{'M', 'P', 'C', 'C', 'L', 'N', 'T', '1'};
constexpr std::size_t hello_bytes = 8 + 4 + 32;

void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

std::array<std::uint8_t, 32> ed25519_raw_public(const std::string& public_pem, const std::string& what) {
  check_ed25519_pem(public_pem, false, what);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(public_pem.data(), static_cast<int>(public_pem.size())),
                                                &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr, &EVP_PKEY_free);
  std::array<std::uint8_t, 32> raw{};
  std::size_t len = raw.size();
  if (!key || EVP_PKEY_get_raw_public_key(key.get(), raw.data(), &len) != 1 || len != raw.size())
    throw std::runtime_error(what + ": cannot read the raw Ed25519 public key");
  return raw;
}

AcceptedClient authenticate_client(int fd, std::uint32_t server, const std::string& server_secret_pem,
                                   const std::vector<ClientKey>& allowed, Clock::time_point deadline) {
  std::array<unsigned char, hello_bytes> hello{};
  read_exactly(fd, hello.data(), hello.size(), deadline, "client hello");
  if (!std::equal(hello_magic.begin(), hello_magic.end(), hello.begin()))
    throw std::runtime_error("not an mpcache client (bad hello)");
  std::uint32_t wanted = 0;
  for (int i = 0; i < 4; ++i) wanted |= std::uint32_t(hello[8 + i]) << (8 * i);
  if (wanted != server) {
    send_door_refusal(fd, std::string(not_admitted_prefix) + "this is server " + std::to_string(server) +
                              ", not server " + std::to_string(wanted));
    throw std::runtime_error("the client wants server " + std::to_string(wanted) + ", this is server " +
                             std::to_string(server));
  }
  std::array<std::uint8_t, 32> raw{};
  std::memcpy(raw.data(), hello.data() + 12, raw.size());
  for (std::size_t i = 0; i < allowed.size(); ++i) {
    if (ed25519_raw_public(allowed[i].public_pem, "client key " + allowed[i].name) != raw) continue;
    AcceptedClient accepted;
    accepted.client = i;
    try {
      accepted.keys = run_handshake(fd, server, client_handshake_id, server_secret_pem, allowed[i].public_pem, deadline);
    } catch (const std::exception& e) {
      throw std::runtime_error("client " + allowed[i].name + " failed the key exchange: " + e.what());
    }
    return accepted;
  }
  send_door_refusal(fd, std::string(not_admitted_prefix) + "its key is not among the server's client keys");
  static constexpr char hex[] = "0123456789abcdef";
  std::string fingerprint;
  for (std::size_t i = 0; i < 8; ++i) fingerprint += {hex[raw[i] >> 4], hex[raw[i] & 15]};
  throw std::runtime_error("client key " + fingerprint + "... is not among the " + std::to_string(allowed.size()) +
                           " allowed client keys");
}

std::pair<int, DirectionKeys> connect_as_client(const std::string& host, std::uint16_t port, std::uint32_t server,
                                                const std::string& client_secret_pem,
                                                const std::string& client_public_pem,
                                                const std::string& server_public_pem, Clock::time_point deadline) {
  const std::string where = "server " + std::to_string(server) + " at " + host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0 || !found)
    throw std::runtime_error("cannot resolve " + where + ": " + ::gai_strerror(e));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  try {
    if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0)
      throw std::runtime_error("cannot connect to " + where + ": " + std::strerror(errno) +
                               " (is the server running and reachable?)");
    no_delay(fd);
    std::array<unsigned char, hello_bytes> hello{};
    std::copy(hello_magic.begin(), hello_magic.end(), hello.begin());
    for (int i = 0; i < 4; ++i) hello[8 + i] = static_cast<unsigned char>(server >> (8 * i));
    const auto raw = ed25519_raw_public(client_public_pem, "this client's public key");
    std::copy(raw.begin(), raw.end(), hello.begin() + 12);
    write_exactly(fd, hello.data(), hello.size(), deadline, "hello to " + where);
    DirectionKeys keys;
    const auto refused_at_door = [&](const std::array<unsigned char, 32>& first) {
      const long n = door_refusal_length(first);
      if (n < 0) return;
      std::string reason(static_cast<std::size_t>(n), '\0');
      try {
        read_exactly(fd, reason.data(), reason.size(), deadline, "the refusal of " + where);
      } catch (const std::exception&) {
        reason = "(its reason was cut short)";
      }
      if (reason.starts_with(not_admitted_prefix))
        throw ClientNotAdmitted(where + " refused this client: " + reason.substr(std::strlen(not_admitted_prefix)));
      throw std::runtime_error(where + " turned this connection away: " + reason);
    };
    try {
      keys = run_handshake(fd, client_handshake_id, server, client_secret_pem, server_public_pem, deadline,
                           refused_at_door);
    } catch (const PeerClosed& e) {
      // A refusal says so (above): this server went away mid-handshake.
      throw std::runtime_error(where + " closed the connection during the key exchange (stopping or restarting?): " +
                               e.what());
    }
    return {fd, keys};
  } catch (...) {
    ::close(fd);
    throw;
  }
}

void send_door_refusal(int fd, const std::string& why) {
  const std::string bytes = encode_door_refusal(why);
  // A fresh socket's buffer takes these few bytes at once; never wait on it.
  (void)::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
}

int accept_before(int listen_fd, Clock::time_point deadline, std::string& remote) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return -1;
    pollfd p{listen_fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r <= 0) continue;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the connection went away first, or EINTR
    no_delay(fd);
    remote = remote_of(fd);
    return fd;
  }
}

}  // namespace mpcache::sys
