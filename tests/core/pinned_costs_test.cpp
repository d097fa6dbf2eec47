// The pinned costs' checker (tests/support/pinned_costs.hpp) against its
// own table: a match passes, a mismatch or an unknown name fails and says
// which numbers differ.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
#include "../support/pinned_costs.hpp"

using mpcache::testing::check_pinned;
using mpcache::testing::pinned_mismatch;

namespace {
const std::vector<std::uint64_t> eos_rss3{210, 224, 190, 190, 188, 190};
}  // namespace

TEST_CASE("a pinned cost matches number for number") {
  CHECK(pinned_mismatch("model.eos.rss3.step_rounds", eos_rss3) == std::nullopt);
  CHECK(check_pinned("model.eos.rss3.step_rounds", eos_rss3));
  CHECK(check_pinned("ops.one_hot_64.rounds", 10));
}

TEST_CASE("a mismatch names the pin, the pinned and the measured numbers") {
  std::vector<std::uint64_t> off = eos_rss3;
  off.back() += 1;
  CHECK(pinned_mismatch("model.eos.rss3.step_rounds", off) ==
        "pinned cost model.eos.rss3.step_rounds: expected 210 224 190 190 188 190, measured 210 224 190 190 188 191");
  off.pop_back();
  CHECK(pinned_mismatch("model.eos.rss3.step_rounds", off).has_value());  // fewer numbers
  const auto unknown = pinned_mismatch("no.such.pin", eos_rss3);
  REQUIRE(unknown.has_value());
  CHECK(unknown->starts_with("no pinned cost named no.such.pin in "));
}

// should_fail: the case passes only if check_pinned fails it.
TEST_CASE("check_pinned fails the test case it runs in" * doctest::should_fail()) {
  (void)check_pinned("ops.one_hot_64.rounds", 11);
}
