module mpcache.text;
import mpcache.std;
import :pipeline;

namespace mpcache::text::detail {

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  std::size_t i = 0;
  while (true) {
    const std::size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i).append(to);
    i = j + from.size();
  }
  out.append(s, i, std::string::npos);
  s = std::move(out);
}

void split_digits(const std::string& w, bool individual, std::vector<std::string>& out) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0;
  while (i < w.size()) {
    std::size_t j = i + 1;
    if (digit(w[i])) {
      if (!individual)
        while (j < w.size() && digit(w[j])) ++j;
    } else {
      while (j < w.size() && !digit(w[j])) ++j;
    }
    out.emplace_back(w, i, j - i);
    i = j;
  }
}

// Split before every `mark` (the mark stays with what follows it).
void split_before(const std::string& w, std::string_view mark, std::vector<std::string>& out) {
  std::size_t start = 0;
  std::size_t i = w.find(mark, 1);
  while (i != std::string::npos) {
    out.emplace_back(w, start, i - start);
    start = i;
    i = w.find(mark, i + mark.size());
  }
  out.emplace_back(w, start, std::string::npos);
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizer>& steps, std::string text, bool at_start,
                  std::vector<std::string>& words) {
  std::vector<std::string> cur;
  cur.push_back(std::move(text));
  std::vector<std::string> next;
  std::vector<std::string_view> parts;
  for (const PreTokenizer& step : steps) {
    next.clear();
    for (std::size_t k = 0; k < cur.size(); ++k) {
      std::string& w = cur[k];
      switch (step.kind) {
        case PreTokenizer::Kind::split:
          parts.clear();
          split_by_pattern(step.pattern, w, parts);
          for (std::string_view p : parts) next.emplace_back(p);
          break;
        case PreTokenizer::Kind::byte_level:
          if (step.add_prefix_space && !w.starts_with(' ')) w.insert(w.begin(), ' ');
          if (step.use_regex) {
            parts.clear();
            split_by_pattern(SplitPattern::gpt2, w, parts);
            for (std::string_view p : parts) next.emplace_back(p);
          } else {
            next.push_back(std::move(w));
          }
          break;
        case PreTokenizer::Kind::metaspace: {
          replace_all(w, " ", step.replacement);
          const bool prepend = step.prepend == PrependScheme::always ||
                               (step.prepend == PrependScheme::first && at_start && k == 0);
          if (prepend && !w.starts_with(step.replacement)) w.insert(0, step.replacement);
          if (step.split) split_before(w, step.replacement, next);
          else next.push_back(std::move(w));
          break;
        }
        case PreTokenizer::Kind::digits:
          split_digits(w, step.individual_digits, next);
          break;
      }
    }
    std::swap(cur, next);
  }
  for (std::string& w : cur)
    if (!w.empty()) words.push_back(std::move(w));
}

}  // namespace mpcache::text::detail
