// What a server's client door says to a connection it turns away before
// the handshake (too many handshakes in progress, a key it does not know,
// another server asked for): instead of its first
// handshake bytes (32: an ephemeral key), "MPCDOOR1", the reason's length
// (u32 little endian), 20 zero bytes, then the reason. The client reads it
// where it expects the key and reports the reason, so a turned-away client
// learns why instead of seeing a bare close. Both sides are in
// client_gate.cpp: send_door_refusal (mpcache::turn_away) and the client's
// connect_as_client.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

namespace mpcache::sys {

inline constexpr std::array<unsigned char, 8> door_refusal_magic{'M', 'P', 'C', 'D', 'O', 'O', 'R', '1'};
// A reason that starts so refuses this client for good (its key, the server
// it asked for), not for the door's load: the client does not retry it. A
// bare close is not a refusal: the server may have died mid-handshake.
inline constexpr const char* not_admitted_prefix = "not admitted: ";
inline constexpr std::size_t door_refusal_max = 1024;  // longest reason a client reads

inline std::string encode_door_refusal(std::string reason) {
  if (reason.size() > door_refusal_max) reason.resize(door_refusal_max);
  std::string out(32, '\0');
  std::memcpy(out.data(), door_refusal_magic.data(), door_refusal_magic.size());
  const auto n = static_cast<std::uint32_t>(reason.size());
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + reason;
}

// The reason's length if `first` (a peer's first 32 bytes) opens a door's
// refusal; -1 if not (an ephemeral key matches the magic with odds 2^-64).
inline long door_refusal_length(const std::array<unsigned char, 32>& first) {
  if (std::memcmp(first.data(), door_refusal_magic.data(), door_refusal_magic.size()) != 0) return -1;
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= std::uint32_t(first[8 + i]) << (8 * i);
  return n > door_refusal_max ? -1 : static_cast<long>(n);
}

}  // namespace mpcache::sys
