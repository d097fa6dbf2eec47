module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include "unicode.hpp"
#include "utf8.hpp"
module mpcache.text;
import mpcache.std;

namespace mpcache::text {

using namespace detail;  // UTF-8 and the character classes (plain C++)

namespace {

constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text as code points with their classes and byte offsets.
struct Chars {
  std::vector<char32_t> cp;
  std::vector<CharClass> cls;
  std::vector<std::size_t> off;  // off[i]: byte offset of cp[i]; off[n] = text size
  std::size_t size() const { return cp.size(); }
};

Chars decode(std::string_view text) {
  Chars c;
  c.cp.reserve(text.size());
  c.cls.reserve(text.size());
  c.off.reserve(text.size() + 1);
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t start = i;
    char32_t cp = 0;
    if (!next_code_point(text, i, cp)) {  // callers check UTF-8 first; be safe anyway
      cp = 0xFFFD;
      i = start + 1;
    }
    c.cp.push_back(cp);
    c.cls.push_back(classify(cp));
    c.off.push_back(start);
  }
  c.off.push_back(text.size());
  return c;
}

char32_t lower_ascii(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length (in code points) of a contraction at i: 's 't 're 've 'm 'll 'd.
std::size_t contraction(const Chars& c, std::size_t i, bool ignore_case) {
  const std::size_t n = c.size();
  if (c.cp[i] != U'\'' || i + 1 >= n) return 0;
  auto at = [&](std::size_t k) { return ignore_case ? lower_ascii(c.cp[k]) : c.cp[k]; };
  const char32_t a = at(i + 1);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 < n) {
    const char32_t b = at(i + 2);
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  }
  return 0;
}

std::size_t run_of(const Chars& c, std::size_t i, CharClass cls) {
  while (i < c.size() && c.cls[i] == cls) ++i;
  return i;
}

bool is_other(const Chars& c, std::size_t i) { return c.cls[i] == CharClass::other; }
bool is_crlf(char32_t cp) { return cp == U'\r' || cp == U'\n'; }

// \s+(?!\S)|\s+ at a whitespace character i: the end of the match.
std::size_t whitespace_tail(const Chars& c, std::size_t i) {
  const std::size_t j = run_of(c, i, CharClass::space);
  if (j == c.size() || j - i == 1) return j;  // \s+(?!\S) takes all, or \s+ takes the one char
  return j - 1;                                // leave the last space for the next word
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::size_t match_gpt2(const Chars& c, std::size_t i) {
  const std::size_t n = c.size();
  if (const std::size_t k = contraction(c, i, false)) return i + k;
  const bool space = c.cp[i] == U' ' && i + 1 < n;
  const std::size_t s = space ? i + 1 : i;  // where a class run would start after an optional space
  // ( ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+): without the optional space the
  // class run would start at ' ', which is in none of the three classes.
  for (CharClass cls : {CharClass::letter, CharClass::number, CharClass::other})
    if (c.cls[s] == cls) return run_of(c, s, cls);
  return whitespace_tail(c, i);
}

// LLaMA-3 / Qwen2:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
// | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
std::size_t match_llama3(const Chars& c, std::size_t i, std::size_t max_digits) {
  const std::size_t n = c.size();
  if (const std::size_t k = contraction(c, i, true)) return i + k;
  const CharClass cls = c.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls == CharClass::letter) return run_of(c, i, CharClass::letter);
  if (cls != CharClass::number && !is_crlf(c.cp[i]) && i + 1 < n && c.cls[i + 1] == CharClass::letter)
    return run_of(c, i + 1, CharClass::letter);
  // \p{N}{1,k}
  if (cls == CharClass::number) {
    std::size_t j = i;
    while (j < n && j - i < max_digits && c.cls[j] == CharClass::number) ++j;
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  std::size_t s = i;
  if (c.cp[i] == U' ' && i + 1 < n && is_other(c, i + 1)) s = i + 1;
  if (is_other(c, s)) {
    std::size_t j = run_of(c, s, CharClass::other);
    while (j < n && is_crlf(c.cp[j])) ++j;
    return j;
  }
  // \s*[\r\n]+ : up to and including the last \r or \n of the whitespace run
  const std::size_t j = run_of(c, i, CharClass::space);
  for (std::size_t k = j; k > i; --k)
    if (is_crlf(c.cp[k - 1])) return k;
  return whitespace_tail(c, i);
}

}  // namespace

std::string_view pattern_text(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::gpt2: return kGpt2;
    case SplitPattern::llama3: return kLlama3;
    case SplitPattern::qwen2: return kQwen2;
  }
  return {};
}

std::optional<SplitPattern> recognize_split_pattern(std::string_view regex) {
  for (SplitPattern p : {SplitPattern::gpt2, SplitPattern::llama3, SplitPattern::qwen2})
    if (regex == pattern_text(p)) return p;
  return std::nullopt;
}

void split_by_pattern(SplitPattern pattern, std::string_view text, std::vector<std::string_view>& out) {
  const Chars c = decode(text);
  std::size_t i = 0;
  while (i < c.size()) {
    std::size_t j = 0;
    switch (pattern) {
      case SplitPattern::gpt2: j = match_gpt2(c, i); break;
      case SplitPattern::llama3: j = match_llama3(c, i, 3); break;
      case SplitPattern::qwen2: j = match_llama3(c, i, 1); break;
    }
    if (j <= i) j = i + 1;  // cannot happen: every character matches
    out.push_back(text.substr(c.off[i], c.off[j] - c.off[i]));
    i = j;
  }
}

}  // namespace mpcache::text
