// check_pinned (pinned_costs.hpp): reads tests/pinned_costs.txt, whose path
// the build compiles in, once per test binary.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <source_location>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include <doctest/doctest.h>

#include "pinned_costs.hpp"

namespace mpcache::testing {

namespace {

using Table = std::map<std::string, std::vector<std::uint64_t>, std::less<>>;

// A line: a name, then its numbers; `#` starts a comment.
Table read_table(const char* path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string("cannot read the pinned costs, ") + path);
  Table table;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name;
    if (!(words >> name)) continue;
    std::vector<std::uint64_t> values;
    for (std::uint64_t v; words >> v;) values.push_back(v);
    const bool malformed = !words.eof() || values.empty();
    if (malformed || !table.emplace(name, std::move(values)).second)
      throw std::runtime_error(std::string(path) + ":" + std::to_string(number) +
                               (malformed ? ": expected a name and numbers" : ": " + name + " pinned twice"));
  }
  return table;
}

const Table& table() {
  static const Table pins = read_table(MPCACHE_PINNED_COSTS_FILE);
  return pins;
}

std::string joined(std::span<const std::uint64_t> values) {
  std::string out;
  for (std::uint64_t v : values) out += (out.empty() ? "" : " ") + std::to_string(v);
  return out;
}

}  // namespace

std::optional<std::string> pinned_mismatch(std::string_view name, std::span<const std::uint64_t> measured) {
  const auto it = table().find(name);
  if (it == table().end())
    return "no pinned cost named " + std::string(name) + " in " + MPCACHE_PINNED_COSTS_FILE;
  const std::vector<std::uint64_t>& expected = it->second;
  if (std::equal(expected.begin(), expected.end(), measured.begin(), measured.end())) return std::nullopt;
  return "pinned cost " + std::string(name) + ": expected " + joined(expected) + ", measured " + joined(measured);
}

bool check_pinned(std::string_view name, std::span<const std::uint64_t> measured, std::source_location where) {
  const std::optional<std::string> mismatch = pinned_mismatch(name, measured);
  if (mismatch) ADD_FAIL_CHECK_AT(where.file_name(), static_cast<int>(where.line()), *mismatch);
  return !mismatch;
}

}  // namespace mpcache::testing
