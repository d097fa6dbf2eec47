// ProtocolMode: the one parser of the mode words, its checks, what it sets
// in the backends' options, and its bytes in job headers. Also the library's
// defaults: a user who sets nothing gets exact truncation.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.proto;

using namespace mpcache;

namespace {
std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_SUITE("protocol mode") {
  TEST_CASE("the backends' options default to exact truncation") {
    CHECK(Rss3Options{}.exact_truncation);
    CHECK(Add2Options{}.exact_truncation);
    const ProtocolMode mode;
    CHECK(mode.backend == ProtocolBackend::rss3);
    CHECK(mode.truncation == TruncationMode::exact);
    CHECK(mode.comparisons == ComparisonMode::circuit);
    CHECK(mode.rss3().exact_truncation);
    CHECK(mode.add2().exact_truncation);
  }

  TEST_CASE("every word parses to the mode whose name it is") {
    for (const auto& b : protocol_backend_names())
      for (const auto& t : truncation_names())
        for (const auto& c : comparison_names()) {
          CAPTURE(b + " " + t + " " + c);
          const bool rss3_only = t == truncation_name(TruncationMode::exact_offline) ||
                                 c == comparisons_name(ComparisonMode::dcf_offline);
          if (b == "add2" && rss3_only) {
            CHECK_THROWS_AS((void)ProtocolMode::parse(b, t, c), Error);
            continue;
          }
          const ProtocolMode mode = ProtocolMode::parse(b, t, c);
          CHECK(protocol_backend_name(mode.backend) == b);
          CHECK(truncation_name(mode.truncation) == t);
          CHECK(comparisons_name(mode.comparisons) == c);
          CHECK(mode.describe() == b + ", " + t + " truncation, " + c + " comparisons");
        }
    CHECK(truncation_names() == std::vector<std::string>{"exact", "exact+offline", "probabilistic"});
    CHECK(comparison_names() == std::vector<std::string>{"circuit", "dcf", "dcf+offline"});
  }

  TEST_CASE("an unknown word is named, with the accepted ones") {
    CHECK(error_of([] { (void)ProtocolMode::parse("rss4", "exact", "circuit"); }) ==
          "invalid argument: unknown protocol 'rss4' (rss3, add2)");
    CHECK(error_of([] { (void)ProtocolMode::parse("rss3", "exactly", "circuit"); }) ==
          "invalid argument: unknown truncation 'exactly' (exact, exact+offline, probabilistic)");
    CHECK(error_of([] { (void)ProtocolMode::parse("rss3", "exact", "dpf"); }) ==
          "invalid argument: unknown comparisons 'dpf' (circuit, dcf, dcf+offline)");
  }

  TEST_CASE("add2 has no offline stores, and an offline mode needs a budget") {
    CHECK(error_of([] { (void)ProtocolMode::parse("add2", "exact+offline", "circuit"); })
              .starts_with("invalid argument: truncation exact+offline: truncation pairs are rss3's"));
    CHECK(error_of([] { (void)ProtocolMode::parse("add2", "exact", "dcf+offline"); })
              .starts_with("invalid argument: comparisons dcf+offline: the stores of keys dealt ahead are rss3's"));
    ProtocolMode pairs = ProtocolMode::parse("rss3", "exact+offline", "circuit");
    pairs.truncation_pairs_budget = 0;
    CHECK_THROWS_AS(pairs.check(), Error);
    ProtocolMode store = ProtocolMode::parse("rss3", "exact", "dcf+offline");
    store.comparison_store_budget = 0;
    CHECK_THROWS_AS(store.check(), Error);
  }

  TEST_CASE("the mode sets truncation, comparisons and budgets and keeps the rest of the options") {
    ProtocolMode mode = ProtocolMode::parse("rss3", "exact+offline", "dcf+offline");
    mode.truncation_pairs_budget = 5 << 20;
    mode.comparison_store_budget = 7 << 20;
    const Rss3Options rss3 = mode.rss3({.exact_truncation = false, .insecure_seed = 9, .compact_weights = true});
    CHECK(rss3.exact_truncation);
    CHECK(rss3.comparisons == Rss3Comparisons::dcf);
    CHECK(rss3.truncation_pairs_budget == (5 << 20));
    CHECK(rss3.offline_budget == (7 << 20));
    CHECK(rss3.insecure_seed == 9);
    CHECK(rss3.compact_weights);
    // Budgets are used only by their offline modes.
    const Rss3Options online = ProtocolMode::parse("rss3", "probabilistic", "dcf").rss3();
    CHECK_FALSE(online.exact_truncation);
    CHECK(online.comparisons == Rss3Comparisons::dcf);
    CHECK(online.truncation_pairs_budget == 0);
    CHECK(online.offline_budget == 0);
    const Add2Options add2 = ProtocolMode::parse("add2", "probabilistic", "dcf").add2({.insecure_seed = 4});
    CHECK_FALSE(add2.exact_truncation);
    CHECK(add2.comparisons == Add2Comparisons::dcf);
    CHECK(add2.insecure_seed == 4);
  }

  TEST_CASE("the mode's bytes decode to the same mode; a bad byte or length is an error") {
    ProtocolMode mode = ProtocolMode::parse("rss3", "exact+offline", "dcf");
    mode.truncation_pairs_budget = 123456789;
    const auto bytes = mode.encode();
    CHECK(ProtocolMode::decode(bytes, "header") == mode);
    auto bad = bytes;
    bad[1] = std::byte{9};
    CHECK(error_of([&] { (void)ProtocolMode::decode(bad, "header"); }) ==
          "protocol error: header: no truncation has code 9");
    CHECK(error_of([&] { (void)ProtocolMode::decode(std::span(bytes).first(10), "header"); }) ==
          "protocol error: header: truncated");
  }
}
