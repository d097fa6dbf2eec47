// Cluster set-up for the TCP transport: connected sockets between every pair
// of parties, checked by a hello and, on encrypted channels, keyed by an
// authenticated key exchange (net/cluster.cpp over net/sys/connect and
// net/sys/handshake).
export module mpcache.net:connect;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

// Per-direction AEAD keys of one encrypted connection (from the handshake).
struct ChannelKeys {
  std::array<std::uint8_t, 32> send{};
  std::array<std::uint8_t, 32> recv{};
};

// Connected sockets of one party, one per peer (fd -1 at the party itself).
struct Connections {
  std::vector<int> fds;
  std::vector<std::optional<ChannelKeys>> keys;  // empty or one per peer; nullopt: plain
  std::vector<std::string> names;                // how peers are named in errors
};

struct PartyAddress {
  std::string host;
  std::uint16_t port = 0;
};

struct ConnectOptions {
  std::chrono::milliseconds timeout{10000};  // the whole set-up
  bool encrypted = true;
  // Encrypted channels: this party's Ed25519 secret key (PEM) and every
  // party's public key (PEM, pinned; index = party id).
  std::string secret_key_pem;
  std::vector<std::string> public_keys_pem;
  // Called with one line for each connection the accepting side dropped
  // before it authenticated (a stranger, garbage, an idle socket); set-up
  // goes on waiting for the real peers. Nothing is printed by default.
  std::function<void(const std::string& line)> on_dropped;
};

// Listens on parties[self], connects to lower ids (retrying until they are
// up) and accepts higher ids; a hello on each connection checks party ids and
// the security mode; encrypted channels then run an ephemeral X25519
// exchange signed with the pinned Ed25519 keys. Throws Error(network) naming
// the peer and the reason (port in use, unreachable, wrong id, bad key).
Connections connect_cluster(PartyId self, const std::vector<PartyAddress>& parties,
                            const ConnectOptions& options);

// Tests: a full mesh of connected socket pairs inside this process;
// result[i] is party i's side. Plain (no keys).
std::vector<Connections> local_socket_mesh(std::size_t parties);

// `count` distinct TCP ports on `host` that are free right now. Pick the ports
// of one cluster with one call: separate calls may return the same port.
std::vector<std::uint16_t> free_tcp_ports(std::size_t count, const std::string& host = "127.0.0.1");

}  // namespace mpcache
