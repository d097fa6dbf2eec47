// The client door: sockets, hello and key exchange in plain C++
// (net/sys/client_gate.cpp); this unit turns their errors into Error(network).
module;
#include "prelude.hpp"
#include "sys/client_gate.hpp"
#include "sys/connect.hpp"
module mpcache.net;
import mpcache.core;

namespace mpcache {

ClientDoor::ClientDoor(const std::string& host, std::uint16_t port, PartyId server, std::string secret_key_pem,
                       std::vector<ClientKeyPem> allowed)
    : port_(port), server_(server), secret_key_pem_(std::move(secret_key_pem)), allowed_(std::move(allowed)) {
  try {
    sys::check_ed25519_pem(secret_key_pem_, true, "server " + std::to_string(server) + "'s secret key");
    for (const auto& k : allowed_) (void)sys::ed25519_raw_public(k.public_pem, "client key " + k.name);
    listen_fd_ = sys::listen_on(host, port_);
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::network, e.what());
  }
}

ClientDoor::~ClientDoor() {
  if (listen_fd_ >= 0) sys::close_fd(listen_fd_);
}

std::optional<PendingClient> ClientDoor::next_connection(std::chrono::steady_clock::time_point deadline) {
  PendingClient connection;
  connection.fd = sys::accept_before(listen_fd_, deadline, connection.remote);
  if (connection.fd < 0) return std::nullopt;
  return connection;
}

ClientChannel ClientDoor::authenticate(PendingClient connection, std::chrono::steady_clock::time_point deadline) const {
  std::vector<sys::ClientKey> keys;
  for (const auto& k : allowed_) keys.push_back({k.name, k.public_pem});
  try {
    auto accepted = sys::authenticate_client(connection.fd, server_, secret_key_pem_, keys, deadline);
    ClientChannel channel;
    channel.fd = connection.fd;
    channel.keys.send = accepted.keys.send;
    channel.keys.recv = accepted.keys.recv;
    channel.peer = allowed_[accepted.client].name;
    channel.remote = std::move(connection.remote);
    return channel;
  } catch (const std::exception& e) {
    sys::close_fd(connection.fd);
    throw Error(ErrorCode::network, "refused a client connection from " + connection.remote + ": " + e.what());
  }
}

ClientChannel connect_to_server(const std::string& host, std::uint16_t port, PartyId server,
                                const std::string& client_secret_pem, const std::string& client_public_pem,
                                const std::string& server_public_pem, std::chrono::milliseconds timeout) {
  try {
    auto [fd, keys] = sys::connect_as_client(host, port, server, client_secret_pem, client_public_pem,
                                             server_public_pem, std::chrono::steady_clock::now() + timeout);
    ClientChannel channel;
    channel.fd = fd;
    channel.keys.send = keys.send;
    channel.keys.recv = keys.recv;
    channel.peer = "server " + std::to_string(server);
    channel.remote = host + ":" + std::to_string(port);
    return channel;
  } catch (const sys::ClientNotAdmitted& e) {
    throw Error(ErrorCode::invalid_argument, e.what());  // not the network's doing: a retry would meet the same
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::network, e.what());
  }
}

void turn_away(const PendingClient& connection, const std::string& why) { sys::send_door_refusal(connection.fd, why); }

void close_descriptor(int fd) { sys::close_fd(fd); }

}  // namespace mpcache
