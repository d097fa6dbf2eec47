module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <queue>
#include "byte_level.hpp"
#include "utf8.hpp"
module mpcache.text;
import mpcache.std;
import :bpe_model;

namespace mpcache::text::detail {

namespace {

std::string byte_token_name(unsigned b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string s = "<0x";
  s.push_back(kHex[b >> 4]);
  s.push_back(kHex[b & 15]);
  s.push_back('>');
  return s;
}

}  // namespace

BpeModel::BpeModel(std::vector<std::string> pieces, Options options, std::string source)
    : pieces_(std::move(pieces)), options_(options), source_(std::move(source)) {
  vocab_.reserve(pieces_.size());
  for (std::size_t id = 0; id < pieces_.size(); ++id) {
    if (pieces_[id].empty()) continue;
    if (!vocab_.emplace(pieces_[id], static_cast<TokenId>(id)).second)
      throw TokenizerError(source_ + ": vocabulary entry " + std::to_string(id) + " repeats entry " +
                           std::to_string(vocab_.find(pieces_[id])->second));
  }
  byte_ids_.resize(256);
  for (unsigned b = 0; b < 256; ++b) {
    if (options_.symbols == Symbols::bytes) {
      const char c = static_cast<char>(b);
      byte_ids_[b] = find(std::string_view(&c, 1));
    } else if (options_.byte_fallback) {
      byte_ids_[b] = find(byte_token_name(b));
    }
  }
  if (options_.unk && *options_.unk >= pieces_.size())
    throw TokenizerError(source_ + ": unk token id " + std::to_string(*options_.unk) + " is not in the vocabulary");
}

std::optional<TokenId> BpeModel::find(std::string_view piece) const {
  const auto it = vocab_.find(piece);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::add_merge(std::string_view left, std::string_view right, std::string_view where) {
  auto need = [&](std::string_view piece, const char* what) {
    const auto id = find(piece);
    if (!id)
      throw TokenizerError(source_ + ": " + std::string(where) + ": the " + what + " of the merge, \"" +
                           (options_.symbols == Symbols::bytes ? bytes_to_byte_level(piece) : std::string(piece)) +
                           "\", is not in the vocabulary");
    return *id;
  };
  const TokenId a = need(left, "left side");
  const TokenId b = need(right, "right side");
  std::string joined;
  joined.reserve(left.size() + right.size());
  joined.append(left).append(right);
  const TokenId c = need(joined, "result");
  merges_.insert_or_assign(key(a, b), Merge{next_rank_++, c});
}

const BpeModel::Merge* BpeModel::find_merge(TokenId a, TokenId b) const {
  const auto it = merges_.find(key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<TokenId>& ids) const {
  if (options_.symbols == Symbols::bytes) {
    for (char ch : word) {
      const auto b = static_cast<unsigned char>(ch);
      if (!byte_ids_[b]) {
        if (!options_.unk)
          throw TokenizerError(source_ + ": byte 0x" + byte_token_name(b).substr(3, 2) +
                               " has no token in the vocabulary and there is no unk token");
        ids.push_back(*options_.unk);
        continue;
      }
      ids.push_back(*byte_ids_[b]);
    }
    return;
  }
  bool last_unk = false;
  std::size_t i = 0;
  while (i < word.size()) {
    const std::size_t start = i;
    char32_t cp = 0;
    if (!next_code_point(word, i, cp)) i = start + 1;  // callers check UTF-8; be safe anyway
    const std::string_view ch = word.substr(start, i - start);
    if (const auto id = find(ch)) {
      ids.push_back(*id);
      last_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char b : ch) all = all && byte_ids_[static_cast<unsigned char>(b)].has_value();
      if (all) {
        for (char b : ch) ids.push_back(*byte_ids_[static_cast<unsigned char>(b)]);
        last_unk = false;
        continue;
      }
    }
    if (!options_.unk)
      throw TokenizerError(source_ + ": the character \"" + std::string(ch) +
                           "\" has no token in the vocabulary and there is no unk token");
    if (!(options_.fuse_unk && last_unk)) ids.push_back(*options_.unk);
    last_unk = true;
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  struct Symbol {
    TokenId id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<TokenId> ids;
  ids.reserve(word.size());
  initial_symbols(word, ids);
  const int n = static_cast<int>(ids.size());
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  std::vector<Symbol> sym(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) sym[static_cast<std::size_t>(i)] = {ids[static_cast<std::size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1, true};

  // Candidate merges, lowest rank first, then leftmost (Hugging Face's order;
  // the same result as OpenAI's "merge every occurrence of the best pair").
  struct Candidate {
    std::uint32_t rank;
    int pos;
    TokenId id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int pos) {
    const Symbol& s = sym[static_cast<std::size_t>(pos)];
    if (s.next < 0) return;
    if (const Merge* m = find_merge(s.id, sym[static_cast<std::size_t>(s.next)].id)) queue.push({m->rank, pos, m->id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[static_cast<std::size_t>(left.next)];
    const Merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->id != top.id || m->rank != top.rank) continue;  // stale candidate
    left.id = m->id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[static_cast<std::size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int i = 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) out.push_back(sym[static_cast<std::size_t>(i)].id);
}

}  // namespace mpcache::text::detail
