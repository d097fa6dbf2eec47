// Unicode Normalization Form C: canonical decomposition, canonical ordering,
// canonical composition (UAX #15), Hangul done algorithmically.
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include "nfc_tables.hpp"
#include "utf8.hpp"
module mpcache.text;
import mpcache.std;

namespace mpcache::text {

using namespace detail;  // UTF-8 and the tables (plain C++)

namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

std::uint8_t ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* begin = kCombiningClasses;
  const auto* end = kCombiningClasses + kCombiningClassCount;
  const auto* it = std::upper_bound(begin, end, cp, [](char32_t v, const CombiningClassRange& r) { return v < r.lo; });
  if (it == begin) return 0;
  --it;
  return cp <= it->hi ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* begin = kDecompositions;
  const auto* end = kDecompositions + kDecompositionCount;
  const auto* it = std::lower_bound(begin, end, cp, [](const Decomposition& d, char32_t v) { return d.cp < v; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* begin = kCompositions;
  const auto* end = kCompositions + kCompositionCount;
  const auto* it = std::lower_bound(begin, end, std::pair{a, b}, [](const Composition& c, const std::pair<char32_t, char32_t>& v) {
    return c.first != v.first ? c.first < v.first : c.second < v.second;
  });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

std::string to_nfc(std::string_view text) {
  // Below U+0300 nothing decomposes or combines with what precedes it.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; })) return std::string(text);
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    if (!next_code_point(text, i, cp)) {
      cp = 0xFFFD;
      ++i;
    }
    decompose(cp, cps);
  }
  // Canonical ordering: stable sort of each run of non-starters by class.
  for (std::size_t a = 0; a < cps.size();) {
    if (ccc(cps[a]) == 0) {
      ++a;
      continue;
    }
    std::size_t b = a;
    while (b < cps.size() && ccc(cps[b]) != 0) ++b;
    for (std::size_t k = a + 1; k < b; ++k)  // insertion sort: stable, and runs are short
      for (std::size_t m = k; m > a && ccc(cps[m - 1]) > ccc(cps[m]); --m) std::swap(cps[m - 1], cps[m]);
    a = b;
  }
  // Canonical composition.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  std::ptrdiff_t starter = -1;
  for (char32_t cp : cps) {
    const std::uint8_t c = ccc(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<std::size_t>(starter) + 1 == out.size();
      const std::uint8_t last = adjacent ? 0 : ccc(out.back());
      if (adjacent || (last != 0 && last < c)) {
        if (const char32_t composite = compose(out[static_cast<std::size_t>(starter)], cp)) {
          out[static_cast<std::size_t>(starter)] = composite;
          continue;
        }
      }
    }
    if (c == 0) starter = static_cast<std::ptrdiff_t>(out.size());
    out.push_back(cp);
  }
  std::string s;
  s.reserve(text.size());
  for (char32_t cp : out) append_utf8(s, cp);
  return s;
}

}  // namespace mpcache::text
