// The connection hello (see hello.hpp).
#include "hello.hpp"
#include <stdexcept>

namespace mpcache::sys {
namespace {

constexpr std::uint32_t hello_magic = 0x4843504Du;  // "MPCH"
constexpr std::uint16_t hello_version = 1;

std::uint32_t get32(const unsigned char* b) {
  return std::uint32_t(b[0]) | std::uint32_t(b[1]) << 8 | std::uint32_t(b[2]) << 16 |
         std::uint32_t(b[3]) << 24;
}

}  // namespace

std::string party_name(std::uint32_t id) { return "party " + std::to_string(id); }

std::array<unsigned char, hello_bytes> Hello::encode() const {
  std::array<unsigned char, hello_bytes> b{};
  auto put32 = [&](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<unsigned char>(v >> (8 * i));
  };
  put32(0, hello_magic);
  b[4] = hello_version & 0xFF;
  b[5] = hello_version >> 8;
  b[6] = encrypted ? 1 : 0;
  put32(8, from);
  put32(12, to);
  return b;
}

Hello check_hello(const unsigned char* b, std::uint32_t self, std::optional<std::uint32_t> expected,
                  bool encrypted, const std::string& peer_desc) {
  if (get32(b) != hello_magic)
    throw std::runtime_error(party_name(self) + ": " + peer_desc +
                             " is not an mpcache party (bad hello magic)");
  const unsigned version = unsigned(b[4]) | unsigned(b[5]) << 8;
  if (version != hello_version)
    throw std::runtime_error(party_name(self) + ": " + peer_desc + " speaks protocol version " +
                             std::to_string(version) + ", this party " +
                             std::to_string(hello_version));
  Hello h{get32(b + 8), get32(b + 12), b[6] != 0};
  if (expected && h.from != *expected)
    throw std::runtime_error(party_name(self) + ": expected " + party_name(*expected) + " at " + peer_desc +
                             " but it says it is " + party_name(h.from) +
                             " (wrong party id; check the cluster config)");
  if (h.to != self)
    throw std::runtime_error(party_name(self) + ": " + party_name(h.from) + " at " + peer_desc +
                             " wants to talk to " + party_name(h.to) +
                             " (wrong party id; check the cluster config)");
  if (h.encrypted != encrypted)
    throw std::runtime_error(party_name(self) + ": " + party_name(h.from) + " at " + peer_desc + " runs " +
                             (h.encrypted ? "with" : "without") + " encryption, this party " +
                             (encrypted ? "with" : "without") +
                             " encryption (all parties must agree on --insecure)");
  return h;
}

}  // namespace mpcache::sys
