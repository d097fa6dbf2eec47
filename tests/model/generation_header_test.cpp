// The generation job's header carries the client's protocol mode: a party
// started with another mode is refused at set-up, naming both (the
// backends' set-up names a differing truncation or comparisons; the header
// any other difference); the header's layout is versioned, and a header of
// the old layout is refused by name.
// A library user who sets nothing generates under exact truncation.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/fixture_generation.hpp"

using namespace mpcache;

TEST_SUITE("generation header") {
  TEST_CASE("a job with no options set runs rss3 with exact truncation and circuit comparisons") {
    const GenerationJob job{};
    CHECK(job.mode.backend == ProtocolBackend::rss3);
    CHECK(job.mode.truncation == TruncationMode::exact);
    CHECK(job.mode.comparisons == ComparisonMode::circuit);
    CHECK(job.mode.rss3(job.rss3).exact_truncation);
    CHECK(job.mode.add2(job.add2).exact_truncation);
  }

  TEST_CASE("the header's bytes decode to the same header") {
    GenerationHeader h{7, 3, 48, 0x1234, 96 << 20, ProtocolMode::parse("rss3", "exact+offline", "dcf+offline"),
                       "mpcache"};
    const auto bytes = h.encode();
    const GenerationHeader back = GenerationHeader::decode(bytes, 0);
    CHECK(back.prompt_length == 7);
    CHECK(back.new_tokens == 3);
    CHECK(back.budget == 48);
    CHECK(back.config_digest == 0x1234);
    CHECK(back.memory_budget == (96 << 20));
    CHECK(back.mode == h.mode);
    CHECK(back.policy == "mpcache");
    // One byte short, one too many, a policy name past its bound.
    CHECK_THROWS_AS((void)GenerationHeader::decode(std::span(bytes).first(bytes.size() - 1), 0), Error);
    auto longer = bytes;
    longer.push_back(std::byte{0});
    CHECK_THROWS_AS((void)GenerationHeader::decode(longer, 0), Error);
    h.policy.assign(65, 'x');
    CHECK_THROWS_AS((void)GenerationHeader::decode(h.encode(), 0), Error);
  }

  TEST_CASE("a header of the old layout (no magic, no version) is refused by name") {
    // Version 1: five words and the policy name.
    std::vector<std::byte> v1(40 + 7);
    const std::uint64_t words[5] = {7, 3, 48, 0x1234, 96 << 20};
    std::memcpy(v1.data(), words, 40);
    std::memcpy(v1.data() + 40, "mpcache", 7);
    try {
      (void)GenerationHeader::decode(v1, 0);
      FAIL("a version 1 header was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::protocol);
      CHECK(std::string(e.what()).find("generation header from party 0: not a version 3 header") != std::string::npos);
    }
  }

  TEST_CASE("a party started with another truncation is refused at set-up, naming both") {
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    std::string what;
    try {
      (void)run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
        GenerationJob job;
        job.model_dir = testing::fixture_dir();
        job.new_tokens = 1;
        job.rss3.insecure_seed = 5;
        if (id == 2) job.mode.truncation = TruncationMode::probabilistic;
        if (id == 0) job.prompt = testing::fixture_prompt();
        co_return co_await generate_party(network.endpoint(id), std::move(job));
      });
    } catch (const Error& e) {
      what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find("party 2") != std::string::npos);
    CHECK(what.find("exact truncation") != std::string::npos);
    CHECK(what.find("probabilistic truncation") != std::string::npos);
  }

  TEST_CASE("offline budgets count only where their mode uses them") {
    ProtocolMode a = ProtocolMode::parse("rss3", "exact", "circuit"), b = a;
    b.truncation_pairs_budget = 1;
    b.comparison_store_budget = 2;
    CHECK(a.effective() == b.effective());
    a.truncation = b.truncation = TruncationMode::exact_offline;
    CHECK_FALSE(a.effective() == b.effective());
  }
}
