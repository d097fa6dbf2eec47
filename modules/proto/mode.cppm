// ProtocolMode: which secure backend runs a job and how it truncates and
// compares, with the offline budgets those choices need. It is the one
// place that names the modes ("rss3", "exact+offline", "dcf+offline", ...):
// every command line, job header and bench row parses and prints them
// through it, and it turns a mode into the backends' option structs.
//
//   backend      rss3 (three parties, honest majority) | add2 (parties 0 and
//                1 online, party 2 deals correlated randomness)
//   truncation   exact (default: a round more per product, correct for every
//                value below 2^62) | probabilistic (one round fewer, fails
//                with a small probability per product) | exact+offline
//                (rss3: exact, with truncation pairs made between steps)
//   comparisons  circuit (default) | dcf (one-round comparisons from DCF
//                keys dealt inline) | dcf+offline (rss3: the keys dealt into
//                stores between steps)
export module mpcache.proto:mode;
import mpcache.std;
import mpcache.core;
import :rss3;
import :add2;

export namespace mpcache {

enum class ProtocolBackend : std::uint8_t { rss3, add2 };
enum class TruncationMode : std::uint8_t { exact, probabilistic, exact_offline };
enum class ComparisonMode : std::uint8_t { circuit, dcf, dcf_offline };

// Bytes of truncation pairs (exact+offline) and of dealt DCF keys
// (dcf+offline) each party may hold, unless the mode says otherwise.
inline constexpr std::uint64_t default_truncation_pairs_budget = std::uint64_t{256} << 20;
inline constexpr std::uint64_t default_comparison_store_budget = std::uint64_t{1} << 30;

const char* protocol_backend_name(ProtocolBackend backend) noexcept;
const char* truncation_name(TruncationMode truncation) noexcept;
const char* comparisons_name(ComparisonMode comparisons) noexcept;
// Every accepted word, in the order help texts list them.
std::vector<std::string> protocol_backend_names();
std::vector<std::string> truncation_names();
std::vector<std::string> comparison_names();
// Throw Error(invalid_argument) naming the word and the accepted ones.
ProtocolBackend parse_protocol_backend(std::string_view name);
TruncationMode parse_truncation(std::string_view name);
ComparisonMode parse_comparisons(std::string_view name);

struct ProtocolMode {
  ProtocolBackend backend = ProtocolBackend::rss3;
  TruncationMode truncation = TruncationMode::exact;
  ComparisonMode comparisons = ComparisonMode::circuit;
  std::uint64_t truncation_pairs_budget = default_truncation_pairs_budget;  // exact+offline only
  std::uint64_t comparison_store_budget = default_comparison_store_budget;  // dcf+offline only

  // The three words, checked (parse, then check()).
  static ProtocolMode parse(std::string_view backend, std::string_view truncation, std::string_view comparisons);
  // Throws Error(invalid_argument) for a combination no backend offers (the
  // offline stores are rss3's) or an offline mode with a zero budget.
  void check() const;

  bool exact() const noexcept { return truncation != TruncationMode::probabilistic; }
  bool truncation_pairs() const noexcept { return truncation == TruncationMode::exact_offline; }
  bool dcf() const noexcept { return comparisons != ComparisonMode::circuit; }
  bool comparison_store() const noexcept { return comparisons == ComparisonMode::dcf_offline; }
  // The same mode with the budgets its truncation and comparisons do not
  // use set to 0: what parties must agree on.
  ProtocolMode effective() const noexcept {
    ProtocolMode out = *this;
    if (!truncation_pairs()) out.truncation_pairs_budget = 0;
    if (!comparison_store()) out.comparison_store_budget = 0;
    return out;
  }
  // "rss3, exact+offline truncation, dcf comparisons".
  std::string describe() const;

  // The backends' options for this mode: `tuning` gives what the mode does
  // not fix (pool, seeds, compact weights, fraction bits); the mode sets
  // truncation, comparisons and the offline budgets (0 where unused).
  Rss3Options rss3(Rss3Options tuning = {}) const;
  Add2Options add2(Add2Options tuning = {}) const;

  // The mode on the wire (job headers): 19 bytes, little-endian.
  static constexpr std::size_t encoded_bytes = 3 + 8 + 8;
  std::array<std::byte, encoded_bytes> encode() const;
  // Throws Error(protocol) naming `what` for a byte no mode has.
  static ProtocolMode decode(std::span<const std::byte> bytes, const std::string& what);

  bool operator==(const ProtocolMode&) const = default;
};

}  // namespace mpcache
