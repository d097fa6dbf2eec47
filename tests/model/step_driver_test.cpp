// StepDriver (modules/model/step_driver.cppm): the phases around a
// generation's steps, with the backend hooks named by concepts.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"

using namespace mpcache;
using testing::run_rss3;

namespace {

// What a party saw of its driver: whether it compared on the circuit during
// the prefill, what before_step returned, and the arguments a custom
// comparison refill got.
struct Seen {
  bool dcf_before = false, dcf_during = false, dcf_after = false;
  bool prefill_on_circuit = false;
  std::vector<bool> offline;
  std::vector<std::pair<std::size_t, std::size_t>> refills;  // (step, steps behind)
};

Rss3Options store_options(Rss3Comparisons comparisons, std::uint64_t offline_budget, std::uint64_t pairs_budget) {
  return {.exact_truncation = true,
          .comparisons = comparisons,
          .insecure_seed = 3,
          .offline_budget = offline_budget,
          .truncation_pairs_budget = pairs_budget};
}

std::array<Seen, 3> drive(Rss3Options options, CircuitPrefill when, std::size_t prompt_tokens, bool custom_refill) {
  return run_rss3(
             [&](Rss3& p) -> Task<Seen> {
               Seen seen;
               StepDriver<Rss3>::Options driver_options{.circuit_prefill = when};
               if (custom_refill)
                 driver_options.refill_comparisons = [&seen](Rss3&, std::size_t step, std::size_t behind) -> Task<bool> {
                   seen.refills.emplace_back(step, behind);
                   co_return step > 0;
                 };
               StepDriver<Rss3> driver(p, std::move(driver_options));
               seen.dcf_before = p.dcf_comparisons();
               driver.before_prefill();
               seen.prefill_on_circuit = driver.prefill_on_circuit();
               seen.dcf_during = p.dcf_comparisons();
               driver.after_prefill(prompt_tokens);
               seen.dcf_after = p.dcf_comparisons();
               for (std::size_t step = 0; step < 3; ++step) seen.offline.push_back(co_await driver.before_step(step));
               co_return seen;
             },
             options)
      .results;
}

}  // namespace

TEST_SUITE("step driver") {
  TEST_CASE("plain has none of the hooks: every phase is a no-op") {
    static_assert(!CircuitComparisonsOption<Plain> && !TruncationPairsRefill<Plain> && !ComparisonStoreRefill<Plain>);
    Plain p;
    StepDriver<Plain> driver(p);
    driver.before_prefill();
    CHECK_FALSE(driver.prefill_on_circuit());
    driver.after_prefill(8);
    CHECK_FALSE(testing::run(driver.before_step(0)));
    CHECK_FALSE(testing::run(driver.before_step(1)));
  }

  TEST_CASE("rss3 with DCF comparisons and stores: the prefill on the circuit, refills before every step") {
    for (const auto& seen : drive(store_options(Rss3Comparisons::dcf, 16 << 20, 16 << 20), CircuitPrefill::under_dcf,
                                  5, false)) {
      CHECK(seen.dcf_before);
      CHECK(seen.prefill_on_circuit);
      CHECK_FALSE(seen.dcf_during);
      CHECK(seen.dcf_after);
      CHECK(seen.offline == std::vector<bool>{true, true, true});
    }
  }

  TEST_CASE("rss3 with DCF comparisons, no store: on the circuit under_dcf, not under_store") {
    const Rss3Options dcf = store_options(Rss3Comparisons::dcf, 0, 0);
    for (const auto& seen : drive(dcf, CircuitPrefill::under_dcf, 5, false)) {
      CHECK(seen.prefill_on_circuit);
      CHECK_FALSE(seen.dcf_during);
      CHECK(seen.dcf_after);
      CHECK(seen.offline == std::vector<bool>{false, false, false});  // nothing to refill
    }
    for (const auto& seen : drive(dcf, CircuitPrefill::under_store, 5, false)) {
      CHECK_FALSE(seen.prefill_on_circuit);
      CHECK(seen.dcf_during);
    }
  }

  TEST_CASE("a custom comparison refill gets each step and the steps behind it; no prefill, no first refill") {
    const Rss3Options options = store_options(Rss3Comparisons::dcf, 16 << 20, 0);
    for (const auto& seen : drive(options, CircuitPrefill::under_store, 7, true)) {
      CHECK(seen.prefill_on_circuit);
      CHECK(seen.refills == std::vector<std::pair<std::size_t, std::size_t>>{{0, 7}, {1, 1}, {2, 1}});
      CHECK(seen.offline == std::vector<bool>{false, true, true});
    }
    for (const auto& seen : drive(options, CircuitPrefill::under_store, 0, true)) {
      CHECK(seen.refills == std::vector<std::pair<std::size_t, std::size_t>>{{1, 1}, {2, 1}});
      CHECK(seen.offline == std::vector<bool>{false, true, true});
    }
  }
}
