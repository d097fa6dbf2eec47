// libFuzzer target for a server's client door (ClientDoor::authenticate):
// the input is every byte a connecting client sends, the hello ("MPCCLNT1",
// the server wanted, the client's raw Ed25519 key) and then its part of the
// key exchange (an X25519 key, a signature). The door must refuse whatever
// is not a client it admits with Error(network) naming why, never crash,
// hang past its deadline, or read beyond what came. The door is server 1's
// and admits one client key, fixed below so that the corpus's hellos keep
// reaching the key exchange; no input can sign it (the transcript holds the
// server's fresh ephemeral key), so the door always refuses.
//   cmake --preset fuzz && cmake --build --preset fuzz
//   build/fuzz/tests/fuzz/fuzz_client_door tests/fuzz/corpus/client_door -max_total_time=60 -max_len=4096
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <sys/socket.h>
#include <unistd.h>
import mpcache.core;
import mpcache.net;

using namespace mpcache;

namespace {

// Test keys, made for this target only (openssl genpkey -algorithm ed25519).
const std::string server_secret =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIF4MO/JX8kllHvmHZbDuF8e/pHngVsp5z4CcRPFGIEVg\n"
    "-----END PRIVATE KEY-----\n";
// Raw key 75be79eb95eeae95db7b227b9ceb44cfc2276363705b50179e1efa676f69fac5.
const std::string client_public =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEAdb5565XurpXbeyJ7nOtEz8InY2NwW1AXnh76Z29p+sU=\n"
    "-----END PUBLIC KEY-----\n";

ClientDoor& door() {
  static ClientDoor d("127.0.0.1", 0, 1, server_secret, {ClientKeyPem{"fuzz", client_public}});
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) __builtin_trap();
  // The client's bytes wait in the socket (inputs stay far below its buffer)
  // and then it stops writing: the door meets the end of them, never silence.
  for (std::size_t at = 0; at < size;) {
    const auto n = ::write(ends[1], data + at, size - at);
    if (n <= 0) __builtin_trap();
    at += static_cast<std::size_t>(n);
  }
  ::shutdown(ends[1], SHUT_WR);
  const auto start = std::chrono::steady_clock::now();
  try {
    const ClientChannel channel = door().authenticate(PendingClient{ends[0], "fuzz"}, start + std::chrono::seconds(2));
    ::close(channel.fd);
    __builtin_trap();  // a client that cannot sign was admitted
  } catch (const Error& e) {
    if (e.code() != ErrorCode::network) __builtin_trap();
    if (std::string_view(e.what()).find("fuzz") == std::string_view::npos) __builtin_trap();  // names the connection
  }
  // Every byte was there at once: the door never waits out its deadline.
  if (std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) __builtin_trap();
  ::close(ends[1]);
  return 0;
}
