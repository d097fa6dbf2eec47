// The door between a service's servers and its clients, in plain C++
// (OpenSSL 3, sockets): a client connects to a server's client port, says
// who it is (a hello with its Ed25519 public key), and both run the
// authenticated key exchange of handshake.hpp, the client pinning the
// server's key and the server accepting only keys it was given. Errors are
// std::runtime_error with the reason (what a server logs when it refuses).
#pragma once
#include <array>
#include <chrono>
#include <stdexcept>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "handshake.hpp"

namespace mpcache::sys {

// The id a client signs the handshake with (servers are 0..2).
inline constexpr std::uint32_t client_handshake_id = 1000;

struct ClientKey {
  std::string name;        // how the server's log names it (file name)
  std::string public_pem;  // Ed25519 public key
};

// Thrown by connect_as_client when the server refused this client for good
// (door_refusal.hpp's not_admitted_prefix): it does not know this client's
// key, or is not the server the client asked for. (A door that turns a
// connection away for its load, or a server that closed mid-handshake:
// std::runtime_error with the reason.)
struct ClientNotAdmitted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The raw 32 bytes of an Ed25519 public key in PEM; `what` names it in errors.
std::array<std::uint8_t, 32> ed25519_raw_public(const std::string& public_pem, const std::string& what);

struct AcceptedClient {
  DirectionKeys keys;
  std::size_t client = 0;  // index into the allowed keys
};

// Server side, on a connected blocking-mode descriptor: reads the client's
// hello, refuses a key not in `allowed`, then runs the handshake.
AcceptedClient authenticate_client(int fd, std::uint32_t server, const std::string& server_secret_pem,
                                   const std::vector<ClientKey>& allowed,
                                   std::chrono::steady_clock::time_point deadline);

// Client side: connects to host:port, says hello, runs the handshake;
// returns the descriptor (blocking mode, TCP_NODELAY) and the channel keys.
std::pair<int, DirectionKeys> connect_as_client(const std::string& host, std::uint16_t port, std::uint32_t server,
                                                const std::string& client_secret_pem,
                                                const std::string& client_public_pem,
                                                const std::string& server_public_pem,
                                                std::chrono::steady_clock::time_point deadline);

// A door's refusal (door_refusal.hpp) on a connection it will not take,
// then the end of this side's writing; never blocks.
void send_door_refusal(int fd, const std::string& why);

// A listening socket's next connection before `deadline` (-1 if none came);
// blocking mode, TCP_NODELAY; `remote` gets "host:port".
int accept_before(int listen_fd, std::chrono::steady_clock::time_point deadline, std::string& remote);

}  // namespace mpcache::sys
