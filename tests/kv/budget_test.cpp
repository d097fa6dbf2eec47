// Budgets by policy name: the default budget runs every policy, and a
// budget below a policy's minimum is refused by a message that names the
// minimum (the budget that would do).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

using namespace mpcache;

TEST_SUITE("policy budgets") {
  TEST_CASE("the default budget is one every policy takes: 48, or the policy's minimum where that is more") {
    for (const auto& name : kv::policy_names()) {
      CAPTURE(name);
      CHECK_NOTHROW((void)kv::make_policy<Plain>(name, kv::default_budget(name)));
      CHECK(kv::default_budget(name) == std::max(kv::usual_budget, kv::minimum_budget(name)));
    }
    CHECK(kv::default_budget("mpcache") == 48);
    CHECK(kv::default_budget("infllm") == 51);  // sinks 4 + window 16 + one block 16 + a partial block 15
  }

  TEST_CASE("each policy's minimum is the least budget it takes, and its refusal names it") {
    for (const auto& name : kv::policy_names()) {
      CAPTURE(name);
      const std::size_t least = kv::minimum_budget(name);
      CHECK_NOTHROW((void)kv::make_policy<Plain>(name, least));
      if (least == 0) continue;  // the full cache ignores the budget
      CHECK_THROWS_WITH_AS((void)kv::make_policy<Plain>(name, least - 1),
                           doctest::Contains(("the minimum is " + std::to_string(least)).c_str()), Error);
    }
    CHECK_THROWS_WITH_AS(
        (void)kv::make_policy<Plain>("infllm", 48),
        "invalid argument: InfLLM: a budget of 48 tokens is below 4 sinks, a local window of 16, one block of 16 and "
        "15 tokens of a block not yet full: the minimum is 51",
        Error);
    CHECK_THROWS_AS((void)kv::minimum_budget("h3o"), Error);
  }

  TEST_CASE("InfLLM's minimum allows for a local window that grows with the budget") {
    // 100 sinks and blocks of 16: the window is budget / 4 > 16 there, so the
    // minimum b solves b >= 100 + b / 4 + 31.
    CHECK(kv::InfLlm<Plain>::minimum_budget(16, 100) == 174);
    CHECK_NOTHROW(kv::InfLlm<Plain>(174, 16, 4, 100));
    CHECK_THROWS_WITH_AS(kv::InfLlm<Plain>(173, 16, 4, 100), doctest::Contains("the minimum is 174"), Error);
  }
}
