// Authenticated key exchange for one connection, in plain C++ (OpenSSL 3):
// each side sends an ephemeral X25519 public key, then an Ed25519 signature
// (long-term key, pinned by the peer) over both ephemeral keys and both party
// ids; the X25519 secret goes through HKDF-SHA256 into one AES-256-GCM key
// per direction. Errors are std::runtime_error naming the peer.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace mpcache::sys {

struct DirectionKeys {
  std::array<std::uint8_t, 32> send{};
  std::array<std::uint8_t, 32> recv{};
};

// `first_from_peer`, if given, sees the peer's first 32 bytes (its
// ephemeral key, or whatever the peer sent instead) before anything else
// is done with them; it may throw (a client reading a door's refusal).
DirectionKeys run_handshake(int fd, std::uint32_t self, std::uint32_t peer,
                            const std::string& secret_key_pem, const std::string& peer_public_pem,
                            std::chrono::steady_clock::time_point deadline,
                            const std::function<void(const std::array<unsigned char, 32>&)>& first_from_peer = {});

// New Ed25519 key pair: (secret PEM, public PEM).
std::pair<std::string, std::string> generate_ed25519_pem();
// Throws unless `pem` is an Ed25519 key of that kind; `what` names it in errors.
void check_ed25519_pem(const std::string& pem, bool secret, const std::string& what);

}  // namespace mpcache::sys
