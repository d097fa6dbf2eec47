// Drafters: the client's guesses of the next tokens, in the clear, for a
// speculative step to verify (:speculate). A drafter sees only what the
// client already holds: its prompt, the tokens chosen so far and public
// text, never the weights. A wrong guess costs a row, never the text.
//   lookup      continue an n-gram that occurred earlier in the prompt or
//               the output (prompt lookup decoding)
//   ngram       the most frequent continuation in a public text (an
//               n-gram model with back-off), tokenized by the client
// (The CLI names them lookup and ngram:FILE: src/jobs/drafter_choice.cpp.)
export module mpcache.model:draft;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

// Proposes exactly `count` tokens to follow `context` (the prompt and every
// token chosen so far; its last is the token the step feeds first).
using Drafter = std::function<std::vector<std::uint32_t>(std::span<const std::uint32_t> context, std::size_t count)>;

namespace detail {
// Tokens one at a time: `next(tokens)` guesses the one after `tokens`, or
// nothing; once it has none, the rest repeats the last token (a row that
// is most likely rejected, but the step's row count is fixed).
template <class Next>
std::vector<std::uint32_t> draft_by(std::span<const std::uint32_t> context, std::size_t count, Next next) {
  std::vector<std::uint32_t> tokens(context.begin(), context.end());
  std::vector<std::uint32_t> out;
  while (out.size() < count) {
    const std::optional<std::uint32_t> guess = next(tokens);
    if (!guess) break;
    out.push_back(*guess);
    tokens.push_back(*guess);
  }
  const std::uint32_t filler = out.empty() ? (context.empty() ? 0 : context.back()) : out.back();
  out.resize(count, filler);
  return out;
}
}  // namespace detail

// Prompt lookup: the token after the most recent earlier occurrence of the
// longest suffix (of at most `longest` tokens) that occurred before.
inline Drafter lookup_drafter(std::size_t longest = 4) {
  return [longest](std::span<const std::uint32_t> context, std::size_t count) {
    return detail::draft_by(context, count, [longest](const std::vector<std::uint32_t>& t) -> std::optional<std::uint32_t> {
      const std::size_t n = t.size();
      for (std::size_t len = std::min(longest, n > 0 ? n - 1 : 0); len >= 1; --len) {
        // An occurrence ending at `end` (exclusive), before the suffix's own.
        for (std::size_t end = n - 1; end >= len; --end)
          if (std::equal(t.end() - static_cast<std::ptrdiff_t>(len), t.end(), t.begin() + static_cast<std::ptrdiff_t>(end - len)))
            return t[end];
      }
      return std::nullopt;
    });
  };
}

// An n-gram model of public `text` (token ids): after up to `order` - 1
// tokens of context, the continuation seen most often (ties: the smaller
// id), backing off to shorter contexts.
class NgramModel {
 public:
  NgramModel(const std::vector<std::uint32_t>& text, std::size_t order) : order_(order) {
    if (order < 2 || order > 4)
      throw Error(ErrorCode::invalid_argument, "n-gram drafter: order " + std::to_string(order) + " outside 2..4");
    std::unordered_map<std::uint64_t, std::unordered_map<std::uint32_t, std::size_t>> counts;
    for (std::size_t i = 1; i < text.size(); ++i)
      for (std::size_t len = 1; len < order && len <= i; ++len) ++counts[key(text, i, len)][text[i]];
    for (const auto& [k, next] : counts) {
      auto best = next.begin();
      for (auto it = next.begin(); it != next.end(); ++it)
        if (it->second > best->second || (it->second == best->second && it->first < best->first)) best = it;
      best_[k] = best->first;
    }
  }
  std::optional<std::uint32_t> next(const std::vector<std::uint32_t>& tokens) const {
    for (std::size_t len = std::min(order_ - 1, tokens.size()); len >= 1; --len)
      if (auto it = best_.find(key(tokens, tokens.size(), len)); it != best_.end()) return it->second;
    return std::nullopt;
  }

 private:
  // The `len` tokens before `at`, with their count (ids keep 20 bits each:
  // a collision only makes a worse guess).
  static std::uint64_t key(const std::vector<std::uint32_t>& t, std::size_t at, std::size_t len) {
    std::uint64_t k = len;
    for (std::size_t i = at - len; i < at; ++i) k = k << 20 | (t[i] & 0xFFFFFu);
    return k;
  }
  std::size_t order_;
  std::unordered_map<std::uint64_t, std::uint32_t> best_;
};

inline Drafter ngram_drafter(std::shared_ptr<const NgramModel> model) {
  return [model](std::span<const std::uint32_t> context, std::size_t count) {
    return detail::draft_by(context, count, [&](const std::vector<std::uint32_t>& t) { return model->next(t); });
  };
}

}  // namespace mpcache
