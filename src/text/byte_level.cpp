#include "byte_level.hpp"

#include <array>

#include "utf8.hpp"

namespace mpcache::text::detail {

namespace {

// bytes_to_unicode() of GPT-2's encoder.py: printable Latin-1 bytes stand for
// themselves, the other 68 bytes take U+0100.. in byte order.
constexpr std::array<char32_t, 256> make_alphabet() {
  std::array<char32_t, 256> a{};
  char32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    a[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return a;
}

constexpr std::array<char32_t, 256> kAlphabet = make_alphabet();

// Inverse over U+0000..U+0143: -1 where a character is not in the alphabet.
constexpr std::array<int, 324> make_inverse() {
  std::array<int, 324> inv{};
  for (int& v : inv) v = -1;
  for (unsigned b = 0; b < 256; ++b) inv[kAlphabet[b]] = static_cast<int>(b);
  return inv;
}

constexpr std::array<int, 324> kInverse = make_inverse();

}  // namespace

char32_t byte_level_char(unsigned char b) { return kAlphabet[b]; }

std::optional<std::string> byte_level_to_bytes(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  std::size_t i = 0;
  while (i < piece.size()) {
    char32_t cp = 0;
    if (!next_code_point(piece, i, cp)) return std::nullopt;
    if (cp >= kInverse.size() || kInverse[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(kInverse[cp]));
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, kAlphabet[static_cast<unsigned char>(c)]);
  return out;
}

}  // namespace mpcache::text::detail
