// UTF-8 helpers of the tokenizers (internal).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mpcache::text::detail {

// Decodes the code point at s[i] if it is a well-formed UTF-8 sequence
// (no overlongs, no surrogates, at most U+10FFFF): sets cp, advances i and
// returns true. Otherwise returns false and leaves i alone.
bool next_code_point(std::string_view s, std::size_t& i, char32_t& cp);

void append_utf8(std::string& out, char32_t cp);

// The offset of the first byte that is not part of well-formed UTF-8, or
// std::string_view::npos when `s` is all well-formed.
std::size_t first_invalid_utf8(std::string_view s);

// Appends `bytes` to `out` as valid UTF-8, replacing each maximal subpart of
// an ill-formed sequence by U+FFFD (the WHATWG / Unicode "best practice"
// rule of TextDecoder and Rust's from_utf8_lossy). If !final, a trailing
// sequence that is incomplete but could still become valid is not consumed.
// Returns the number of bytes consumed.
std::size_t append_utf8_lossy(std::string& out, std::string_view bytes, bool final);

}  // namespace mpcache::text::detail
