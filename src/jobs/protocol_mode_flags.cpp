// See protocol_mode_flags.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <CLI/CLI.hpp>
import mpcache;

#include "protocol_mode_flags.hpp"

namespace mpcache::jobs {
namespace {

std::uint64_t mib(double value) { return static_cast<std::uint64_t>(value * double(1 << 20)); }

std::string list(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : "|") + w;
  return out;
}

}  // namespace

std::vector<ProtocolMode> ProtocolModeFlags::modes() const {
  if (comparisons.empty()) throw Error(ErrorCode::invalid_argument, "--comparisons: no value");
  std::vector<ProtocolMode> out;
  for (const auto& way : comparisons) {
    ProtocolMode m;
    m.backend = parse_protocol_backend(protocol);
    m.truncation = parse_truncation(truncation);
    m.comparisons = parse_comparisons(way);
    m.truncation_pairs_budget = mib(pairs_budget_mib);
    m.comparison_store_budget = mib(store_budget_mib);
    m.check();
    out.push_back(m);
  }
  return out;
}

ProtocolMode ProtocolModeFlags::mode() const {
  if (comparisons.size() != 1)
    throw Error(ErrorCode::invalid_argument, "--comparisons: give one (" + list(comparison_names()) + ")");
  return modes().front();
}

std::vector<std::string> ProtocolModeFlags::args() const {
  std::string ways;
  for (const auto& w : comparisons) ways += (ways.empty() ? "" : ",") + w;
  return {"--protocol", protocol, "--truncation", truncation, "--comparisons", ways,
          "--pairs-budget", std::to_string(pairs_budget_mib), "--offline-budget", std::to_string(store_budget_mib)};
}

void add_protocol_mode_options(CLI::App& command, ProtocolModeFlags& flags, ModeFlagsUse use) {
  command
        .add_option("--protocol", flags.protocol,
                    "rss3 (3 parties, honest majority) or add2 (parties 0 and 1 online, party 2 the dealer of "
                    "correlated randomness)")
        ->capture_default_str()
        ->check(CLI::IsMember(protocol_backend_names()));
  command
      .add_option("--truncation", flags.truncation,
                  "exact: a round more per product, correct for every value below 2^62; probabilistic: one "
                  "round less per product, but each truncated value is garbage with probability |x|/2^64 (about "
                  "1 prompt in 300 at 57 bytes, more with longer prompts); exact+offline (rss3): exact, with "
                  "truncation pairs made between decode steps, so that a decoded token's products take one round "
                  "each, as probabilistic ones do")
      ->capture_default_str()
      ->check(CLI::IsMember(truncation_names()));
  auto* ways = command
                   .add_option("--comparisons", flags.comparisons,
                               "circuit: comparisons on packed bit planes; dcf: one online round per comparison, "
                               "DCF keys dealt inline (by the party outside each pair, or add2's dealer); "
                               "dcf+offline (rss3): the keys dealt into stores between decode steps. Prefills "
                               "compare on the circuit under all three" +
                                   std::string(use.side_by_side ? "; several, comma-separated, run side by side" : ""))
                   ->capture_default_str()
                   ->check(CLI::IsMember(comparison_names()));
  if (use.side_by_side) ways->delimiter(',');
  else ways->expected(1);
  command
      .add_option("--pairs-budget", flags.pairs_budget_mib,
                  "--truncation exact+offline: MiB of truncation pairs each party may hold")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  command
      .add_option("--offline-budget", flags.store_budget_mib,
                  "--comparisons dcf+offline: MiB of dealt DCF keys each party's store may hold")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace mpcache::jobs
