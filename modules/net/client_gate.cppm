// A service's door for clients outside the computing parties: a server
// listens on its client port and admits only clients whose Ed25519 public
// keys it was given; a client pins each server's key. Each side then holds
// one encrypted, authenticated connection per peer (net/sys/client_gate.cpp;
// the key exchange is the mesh's, net/sys/handshake.cpp), which becomes a
// two-party TcpTransport of its own on the server's loop.
//
// next_connection() and authenticate() block: a server runs them on threads
// it owns (one handshake per connection, so a silent stranger delays no
// other client) and hands each channel to its loop (LoopInbox), so a slow or
// hostile stranger never stalls the sessions in flight either.
export module mpcache.net:client_gate;
import mpcache.std;
import mpcache.core;
import :connect;

export namespace mpcache {

struct ClientKeyPem {
  std::string name;        // how logs name the client (e.g. its key file's name)
  std::string public_pem;  // Ed25519 public key
};

// An authenticated connection: the descriptor (blocking mode; the
// transport takes it over) and its channel keys.
// A connection the door took but has not authenticated yet.
struct PendingClient {
  int fd = -1;
  std::string remote;  // host:port of the other end
};

struct ClientChannel {
  int fd = -1;
  ChannelKeys keys;
  std::string peer;    // the client's key name (at a server) or "server N" (at a client)
  std::string remote;  // host:port of the other end
};

class ClientDoor {
 public:
  // Listens on host:port (port 0: any free one; see port()). Throws
  // Error(network) naming the address when it cannot.
  ClientDoor(const std::string& host, std::uint16_t port, PartyId server, std::string secret_key_pem,
             std::vector<ClientKeyPem> allowed);
  ~ClientDoor();
  ClientDoor(const ClientDoor&) = delete;
  ClientDoor& operator=(const ClientDoor&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  // The next connection, or nullopt once `deadline` passed.
  std::optional<PendingClient> next_connection(std::chrono::steady_clock::time_point deadline);
  // The client's hello and key exchange, by `deadline`; safe on several
  // threads at once. A client that fails (unknown key, bad hello, silence)
  // gets Error(network) naming its address and the reason, and its
  // connection is closed.
  ClientChannel authenticate(PendingClient connection, std::chrono::steady_clock::time_point deadline) const;

 private:
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  PartyId server_;
  std::string secret_key_pem_;
  std::vector<ClientKeyPem> allowed_;
};

// A client's channel to server `server` at host:port, pinning its public
// key. Throws Error(network) naming the server and the reason (unreachable,
// refused: not among the server's client keys, wrong server key).
ClientChannel connect_to_server(const std::string& host, std::uint16_t port, PartyId server,
                                const std::string& client_secret_pem, const std::string& client_public_pem,
                                const std::string& server_public_pem, std::chrono::milliseconds timeout);

// Tells a connection the door will not take (too many handshakes) why, in
// place of the handshake's first bytes, where a client looks for it
// (connect_to_server then throws naming the reason), and ends this side's
// writing. Never blocks. The caller closes the descriptor once the client
// has read it (its end closes) or soon after: closed at once, the client's
// unread hello would reset the connection and could lose the reason.
void turn_away(const PendingClient& connection, const std::string& why);

// Closes a channel's descriptor that no transport took over.
void close_descriptor(int fd);

}  // namespace mpcache
