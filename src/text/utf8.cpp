#include "utf8.hpp"

namespace mpcache::text::detail {

namespace {

// For a lead byte: the number of continuation bytes and the allowed range of
// the first continuation byte (Unicode Table 3-7). need == -1: not a lead byte.
struct Lead {
  int need;
  unsigned char lo;
  unsigned char hi;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {-1, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}

// Length of the well-formed prefix of the sequence at s[i]: the sequence
// length if complete and valid (status 0); else how many bytes form a valid
// but incomplete prefix running to the end of s (status 1), or the maximal
// invalid subpart to replace (status 2).
struct Scan {
  std::size_t len;
  int status;
};

Scan scan(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const Lead lead = lead_of(b);
  if (lead.need == 0) return {1, 0};
  if (lead.need < 0) return {1, 2};
  for (int k = 1; k <= lead.need; ++k) {
    if (i + static_cast<std::size_t>(k) >= s.size()) return {static_cast<std::size_t>(k), 1};
    const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    const unsigned char lo = k == 1 ? lead.lo : 0x80;
    const unsigned char hi = k == 1 ? lead.hi : 0xBF;
    if (c < lo || c > hi) return {static_cast<std::size_t>(k), 2};
  }
  return {static_cast<std::size_t>(lead.need) + 1, 0};
}

}  // namespace

bool next_code_point(std::string_view s, std::size_t& i, char32_t& cp) {
  if (i >= s.size()) return false;
  const Scan sc = scan(s, i);
  if (sc.status != 0) return false;
  const auto b0 = static_cast<unsigned char>(s[i]);
  char32_t v = 0;
  switch (sc.len) {
    case 1: v = b0; break;
    case 2: v = b0 & 0x1Fu; break;
    case 3: v = b0 & 0x0Fu; break;
    default: v = b0 & 0x07u; break;
  }
  for (std::size_t k = 1; k < sc.len; ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  cp = v;
  i += sc.len;
  return true;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::size_t first_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Scan sc = scan(s, i);
    if (sc.status != 0) return i;
    i += sc.len;
  }
  return std::string_view::npos;
}

std::size_t append_utf8_lossy(std::string& out, std::string_view bytes, bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::size_t i = 0;
  std::size_t run = 0;  // start of the pending run of valid bytes
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Scan sc = scan(bytes, i);
    if (sc.status == 0) {
      i += sc.len;
      continue;
    }
    out.append(bytes.substr(run, i - run));
    if (sc.status == 1 && !final) return i;  // incomplete at the end: keep for later
    out.append(kReplacement);
    i += sc.len;
    run = i;
  }
  out.append(bytes.substr(run, i - run));
  return i;
}

}  // namespace mpcache::text::detail
