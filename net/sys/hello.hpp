// The hello that opens every connection between two parties, 16 bytes each
// way before anything else:
//   u32 magic "MPCH" | u16 version | u8 encrypted | u8 0 | u32 from | u32 to
// so that a stranger, a peer with the wrong party id, one of another
// protocol version or one in the other security mode is refused with an
// error that says which (connect.cpp sends and checks it).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace mpcache::sys {

inline constexpr std::size_t hello_bytes = 16;

struct Hello {
  std::uint32_t from = 0, to = 0;
  bool encrypted = false;
  std::array<unsigned char, hello_bytes> encode() const;
};

// Checks the peer's hello as party `self` in the given security mode;
// `expected` is the peer's id, or nullopt on the accepting side (the caller
// checks that a missing higher party sent it). Throws std::runtime_error
// naming the peer (`peer_desc`) and what is wrong.
Hello check_hello(const unsigned char* bytes, std::uint32_t self, std::optional<std::uint32_t> expected,
                  bool encrypted, const std::string& peer_desc);

// "party 3": how connection set-up names a party in its errors.
std::string party_name(std::uint32_t id);

}  // namespace mpcache::sys
