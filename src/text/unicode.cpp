#include "unicode.hpp"

#include <algorithm>
#include <array>

namespace mpcache::text::detail {

namespace {

bool is_white_space(char32_t cp) {
  // Unicode White_Space (PropList.txt); unchanged since Unicode 6.3.
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

constexpr std::array<CharClass, 128> make_ascii() {
  std::array<CharClass, 128> t{};
  for (char32_t c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = CharClass::letter;
    else if (c >= '0' && c <= '9') t[c] = CharClass::number;
    else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) t[c] = CharClass::space;
    else t[c] = CharClass::other;
  }
  return t;
}

constexpr std::array<CharClass, 128> kAscii = make_ascii();

}  // namespace

CharClass classify(char32_t cp) {
  if (cp < 128) return kAscii[cp];
  if (is_white_space(cp)) return CharClass::space;
  const CodePointRange* begin = kLetterNumberRanges;
  const CodePointRange* end = kLetterNumberRanges + kLetterNumberRangeCount;
  const CodePointRange* it =
      std::upper_bound(begin, end, cp, [](char32_t v, const CodePointRange& r) { return v < r.lo; });
  if (it == begin) return CharClass::other;
  --it;
  return cp <= it->hi ? it->cls : CharClass::other;
}

}  // namespace mpcache::text::detail
