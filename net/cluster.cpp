// Cluster set-up for the TCP transport: sockets, hello and key exchange run
// in plain C++ (net/sys/*); this unit turns their errors into Error(network).
module;
#include "prelude.hpp"
#include "sys/connect.hpp"
#include "sys/handshake.hpp"
module mpcache.net;
import mpcache.core;

namespace mpcache {

Connections connect_cluster(PartyId self, const std::vector<PartyAddress>& parties,
                            const ConnectOptions& options) {
  const std::size_t n = parties.size();
  if (n < 2 || self >= n)
    throw Error(ErrorCode::bad_party, "party " + std::to_string(self) + " in a cluster of " +
                                          std::to_string(n) + " parties");
  Connections c;
  c.names.resize(n);
  for (PartyId p = 0; p < n; ++p)
    c.names[p] = "party " + std::to_string(p) + " (" + parties[p].host + ":" +
                 std::to_string(parties[p].port) + ")";
  if (options.encrypted) {
    if (options.public_keys_pem.size() != n)
      throw Error(ErrorCode::invalid_argument,
                  "encrypted channels need a pinned public key for each of the " +
                      std::to_string(n) + " parties");
    try {
      sys::check_ed25519_pem(options.secret_key_pem, true,
                             "party " + std::to_string(self) + "'s secret key");
      for (PartyId p = 0; p < n; ++p)
        if (p != self)
          sys::check_ed25519_pem(options.public_keys_pem[p], false,
                                 "party " + std::to_string(p) + "'s public key");
    } catch (const std::runtime_error& e) {
      throw Error(ErrorCode::invalid_argument, e.what());
    }
    c.keys.resize(n);
  }
  std::vector<sys::PeerAddress> addresses;
  for (const auto& a : parties) addresses.push_back({a.host, a.port});
  sys::MeshOptions mesh;
  mesh.timeout = options.timeout;
  mesh.encrypted = options.encrypted;
  mesh.on_dropped = options.on_dropped;
  if (options.encrypted)
    mesh.after_hello = [&](int fd, std::uint32_t peer, std::chrono::steady_clock::time_point deadline) {
      const auto k = sys::run_handshake(fd, self, peer, options.secret_key_pem,
                                        options.public_keys_pem[peer], deadline);
      c.keys[peer] = ChannelKeys{k.send, k.recv};
    };
  try {
    c.fds = sys::connect_mesh(self, addresses, mesh);
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::network, e.what());
  }
  return c;
}

std::vector<Connections> local_socket_mesh(std::size_t parties) {
  std::vector<Connections> out(parties);
  for (auto& c : out) {
    c.fds.assign(parties, -1);
    c.names.resize(parties);
    for (PartyId p = 0; p < parties; ++p) c.names[p] = "party " + std::to_string(p);
  }
  try {
    for (PartyId i = 0; i < parties; ++i)
      for (PartyId j = i + 1; j < parties; ++j) {
        auto [a, b] = sys::socket_pair();
        out[i].fds[j] = a;
        out[j].fds[i] = b;
      }
  } catch (const std::runtime_error& e) {
    for (auto& c : out)
      for (int fd : c.fds) sys::close_fd(fd);
    throw Error(ErrorCode::network, e.what());
  }
  return out;
}

std::vector<std::uint16_t> free_tcp_ports(std::size_t count, const std::string& host) {
  // Every listener stays open until all are bound: the kernel hands out a
  // port again once it is closed, so ports picked one at a time can repeat.
  std::vector<int> held;
  std::vector<std::uint16_t> ports;
  try {
    for (std::size_t i = 0; i < count; ++i) {
      std::uint16_t port = 0;
      held.push_back(sys::listen_on(host, port));
      ports.push_back(port);
    }
  } catch (const std::runtime_error& e) {
    for (int fd : held) sys::close_fd(fd);
    throw Error(ErrorCode::network, e.what());
  }
  for (int fd : held) sys::close_fd(fd);
  return ports;
}

}  // namespace mpcache
