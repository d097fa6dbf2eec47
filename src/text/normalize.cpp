module mpcache.text;
import mpcache.std;
import :pipeline;

namespace mpcache::text::detail {

void normalize(const std::vector<Normalizer>& normalizers, std::string& text) {
  for (const Normalizer& n : normalizers) {
    switch (n.kind) {
      case Normalizer::Kind::prepend:
        if (!text.empty()) text.insert(0, n.text);
        break;
      case Normalizer::Kind::replace: {
        if (n.from.empty() || text.find(n.from) == std::string::npos) break;
        std::string out;
        out.reserve(text.size() + text.size() / 4);
        std::size_t i = 0;
        for (std::size_t j = text.find(n.from); j != std::string::npos; j = text.find(n.from, i)) {
          out.append(text, i, j - i).append(n.text);
          i = j + n.from.size();
        }
        out.append(text, i, std::string::npos);
        text = std::move(out);
        break;
      }
      case Normalizer::Kind::nfc:
        text = to_nfc(text);
        break;
    }
  }
}

}  // namespace mpcache::text::detail
