// ProtocolMode (see modules/proto/mode.cppm): the only place the mode words
// are spelled.
module mpcache.proto;
import mpcache.std;
import mpcache.core;

namespace mpcache {
namespace {

template <class Enum, std::size_t N>
struct Words {
  std::array<std::pair<Enum, const char*>, N> table;

  const char* name(Enum e) const noexcept {
    for (const auto& [value, word] : table)
      if (value == e) return word;
    return "?";
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : table) out.emplace_back(entry.second);
    return out;
  }
  Enum parse(std::string_view word, const char* what) const {
    for (const auto& [value, name] : table)
      if (word == name) return value;
    std::string accepted;
    for (const auto& entry : table) accepted += std::string(accepted.empty() ? "" : ", ") + entry.second;
    throw Error(ErrorCode::invalid_argument,
                "unknown " + std::string(what) + " '" + std::string(word) + "' (" + accepted + ")");
  }
  Enum from_byte(std::uint8_t byte, const char* what, const std::string& message) const {
    for (const auto& entry : table)
      if (static_cast<std::uint8_t>(entry.first) == byte) return entry.first;
    throw Error(ErrorCode::protocol, message + ": no " + what + " has code " + std::to_string(byte));
  }
};

constexpr Words<ProtocolBackend, 2> backends{{{{ProtocolBackend::rss3, "rss3"}, {ProtocolBackend::add2, "add2"}}}};
constexpr Words<TruncationMode, 3> truncations{{{{TruncationMode::exact, "exact"},
                                                 {TruncationMode::exact_offline, "exact+offline"},
                                                 {TruncationMode::probabilistic, "probabilistic"}}}};
constexpr Words<ComparisonMode, 3> comparison_words{{{{ComparisonMode::circuit, "circuit"},
                                                      {ComparisonMode::dcf, "dcf"},
                                                      {ComparisonMode::dcf_offline, "dcf+offline"}}}};

}  // namespace

const char* protocol_backend_name(ProtocolBackend backend) noexcept { return backends.name(backend); }
const char* truncation_name(TruncationMode truncation) noexcept { return truncations.name(truncation); }
const char* comparisons_name(ComparisonMode comparisons) noexcept { return comparison_words.name(comparisons); }
std::vector<std::string> protocol_backend_names() { return backends.names(); }
std::vector<std::string> truncation_names() { return truncations.names(); }
std::vector<std::string> comparison_names() { return comparison_words.names(); }
ProtocolBackend parse_protocol_backend(std::string_view name) { return backends.parse(name, "protocol"); }
TruncationMode parse_truncation(std::string_view name) { return truncations.parse(name, "truncation"); }
ComparisonMode parse_comparisons(std::string_view name) { return comparison_words.parse(name, "comparisons"); }

ProtocolMode ProtocolMode::parse(std::string_view backend, std::string_view truncation,
                                 std::string_view comparisons) {
  ProtocolMode mode;
  mode.backend = parse_protocol_backend(backend);
  mode.truncation = parse_truncation(truncation);
  mode.comparisons = parse_comparisons(comparisons);
  mode.check();
  return mode;
}

void ProtocolMode::check() const {
  if (backend == ProtocolBackend::add2 && truncation_pairs())
    throw Error(ErrorCode::invalid_argument,
                "truncation exact+offline: truncation pairs are rss3's; add2 has none (truncation exact)");
  if (backend == ProtocolBackend::add2 && comparison_store())
    throw Error(ErrorCode::invalid_argument,
                "comparisons dcf+offline: the stores of keys dealt ahead are rss3's; add2's dealer deals online "
                "(comparisons dcf)");
  if (truncation_pairs() && truncation_pairs_budget == 0)
    throw Error(ErrorCode::invalid_argument, "truncation exact+offline needs a truncation pairs budget above 0");
  if (comparison_store() && comparison_store_budget == 0)
    throw Error(ErrorCode::invalid_argument, "comparisons dcf+offline needs a comparison store budget above 0");
}

std::string ProtocolMode::describe() const {
  return std::string(protocol_backend_name(backend)) + ", " + truncation_name(truncation) + " truncation, " +
         comparisons_name(comparisons) + " comparisons";
}

Rss3Options ProtocolMode::rss3(Rss3Options tuning) const {
  tuning.exact_truncation = exact();
  tuning.truncation_pairs_budget = truncation_pairs() ? truncation_pairs_budget : 0;
  tuning.comparisons = dcf() ? Rss3Comparisons::dcf : Rss3Comparisons::circuit;
  tuning.offline_budget = comparison_store() ? comparison_store_budget : 0;
  return tuning;
}

Add2Options ProtocolMode::add2(Add2Options tuning) const {
  tuning.exact_truncation = exact();
  tuning.comparisons = dcf() ? Add2Comparisons::dcf : Add2Comparisons::circuit;
  return tuning;
}

std::array<std::byte, ProtocolMode::encoded_bytes> ProtocolMode::encode() const {
  std::array<std::byte, encoded_bytes> out{};
  out[0] = std::byte(static_cast<std::uint8_t>(backend));
  out[1] = std::byte(static_cast<std::uint8_t>(truncation));
  out[2] = std::byte(static_cast<std::uint8_t>(comparisons));
  put_u64(out.data() + 3, truncation_pairs_budget);
  put_u64(out.data() + 11, comparison_store_budget);
  return out;
}

ProtocolMode ProtocolMode::decode(std::span<const std::byte> bytes, const std::string& what) {
  ByteReader in(bytes, what);
  ProtocolMode mode;
  mode.backend = backends.from_byte(in.u8(), "protocol", what);
  mode.truncation = truncations.from_byte(in.u8(), "truncation", what);
  mode.comparisons = comparison_words.from_byte(in.u8(), "comparisons", what);
  mode.truncation_pairs_budget = in.u64();
  mode.comparison_store_budget = in.u64();
  in.end();
  return mode;
}

}  // namespace mpcache
