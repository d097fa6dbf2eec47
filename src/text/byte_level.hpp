// GPT-2's byte <-> printable character alphabet of byte-level BPE (internal).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mpcache::text::detail {

// The character that stands for byte b in byte-level vocabularies ("Ġ" for ' ').
char32_t byte_level_char(unsigned char b);

// The raw bytes a byte-level vocabulary entry stands for ("Ġthe" -> " the"),
// or nullopt if it holds a character outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view piece);

// The inverse: raw bytes -> the vocabulary spelling.
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace mpcache::text::detail
