// Pinned costs: exact round and byte counts that tests measure (or plan)
// for an op, a layer, a generation step or a bench case, all kept in
// tests/pinned_costs.txt and checked by one function. A mismatch fails the
// calling test case at the caller's line with the pin's name, the pinned
// and the measured values. Include after the `import` lines.
#pragma once

namespace mpcache::testing {

// What check_pinned reports for `measured` against the pin `name`
// ("pinned cost NAME: expected ..., measured ..."), or nothing if they match.
std::optional<std::string> pinned_mismatch(std::string_view name, std::span<const std::uint64_t> measured);

// Whether `measured` equals the pin `name`, number for number.
bool check_pinned(std::string_view name, std::span<const std::uint64_t> measured,
                  std::source_location where = std::source_location::current());
inline bool check_pinned(std::string_view name, std::uint64_t measured,
                         std::source_location where = std::source_location::current()) {
  return check_pinned(name, std::span<const std::uint64_t>(&measured, 1), where);
}

}  // namespace mpcache::testing
