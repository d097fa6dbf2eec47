// The command-line face of ProtocolMode: one set of flags (--protocol,
// --truncation, --comparisons, --pairs-budget, --offline-budget) that every
// command running a secure computation adds, with the words and checks of
// ProtocolMode itself, and one way to pass them on to a child party.
// Include after `import mpcache;`.
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mpcache::jobs {

struct ProtocolModeFlags {
  std::string protocol = "rss3";
  std::string truncation = "exact";
  // One word, or several (comma-separated) where the command runs them side
  // by side (ModeFlagsUse::side_by_side).
  std::vector<std::string> comparisons{"circuit"};
  double pairs_budget_mib = double(default_truncation_pairs_budget >> 20);  // exact+offline
  double store_budget_mib = double(default_comparison_store_budget >> 20);  // dcf+offline

  // Every mode asked for (one per comparisons word), parsed and checked.
  std::vector<ProtocolMode> modes() const;
  // The one mode asked for; throws if several comparisons were given.
  ProtocolMode mode() const;
  // The same choice as flags of a child process.
  std::vector<std::string> args() const;
};

struct ModeFlagsUse {
  bool side_by_side = false;  // --comparisons takes a comma-separated list
};

// Adds the flags to `command`; `flags` holds the command's defaults.
void add_protocol_mode_options(CLI::App& command, ProtocolModeFlags& flags, ModeFlagsUse use = {});

}  // namespace mpcache::jobs
