// The whole stack on add2: the decoder fixture's logits against float64 and
// rss3, and private generation with the dealer as the third process.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"
#include "../support/fixture_generation.hpp"

using namespace mpcache;

namespace {
using testing::fixture_prompt;
const std::filesystem::path fixture = testing::fixture_dir();

// MPCache over the fixture: prefill 64 tokens, decode the rest; the last
// logits, revealed (float64 on Ref).
template <class P>
Task<RealTensor> last_logits(P& p, PartyId owner) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  const auto tokens = fixture_prompt();
  const std::size_t prefix = 64;
  const WeightSource source = p.holds_input(owner) ? weights_from_file(fixture / "model.safetensors") : no_weights();
  auto weights = co_await load_llama(p, c, source, owner);
  Decoder<P> decoder(weights);
  auto o = kv::MpCacheOptions::paper();
  o.cluster = 4;
  kv::MpCache<P> policy(16, o);
  const bool client = p.holds_input(0);
  std::optional<std::vector<std::uint32_t>> head;
  if (client) head.emplace(tokens.begin(), tokens.begin() + prefix);
  typename P::Share l = co_await decoder.prefill(p, policy, 0, std::move(head), prefix);
  for (std::size_t t = prefix; t < tokens.size(); ++t)
    l = co_await decoder.decode(p, policy, 0, client ? std::optional<std::uint32_t>(tokens[t]) : std::nullopt);
  if constexpr (ExactReals<P>) {
    co_return p.to_real(l);
  } else {
    co_return FixedPoint(p.frac_bits()).decode(co_await p.reveal(l));
  }
}

std::vector<std::uint32_t> generate_tokens(ProtocolBackend protocol, const std::string& policy) {
  return testing::generate_on_fixture(protocol, policy, 48, 6);
}
}  // namespace

TEST_SUITE("add2 decoder") {
  TEST_CASE("MPCache decode on add2 agrees with float64 and with rss3 within fixed-point error") {
    Ref r;
    const auto reference = testing::run(last_logits(r, 0));
    auto add2 = testing::run_add2([](Add2& p) { return last_logits(p, 1); }, {.exact_truncation = true, .insecure_seed = 4});
    auto rss3 = testing::run_rss3([](Rss3& p) { return last_logits(p, 1); }, {.exact_truncation = true, .insecure_seed = 4});
    const double vs_ref = testing::max_abs_diff(add2.results[0], reference);
    const double vs_rss3 = testing::max_abs_diff(add2.results[0], rss3.results[0]);
    MESSAGE("add2 MPCache decode: max |logit error| " << vs_ref << " against float64, " << vs_rss3 << " against rss3");
    CHECK(vs_ref < 5e-2);
    CHECK(vs_rss3 < 5e-2);
    CHECK(add2.results[1] == add2.results[0]);
  }

  TEST_CASE("generate_party on add2 chooses the tokens rss3 chooses, full cache and MPCache") {
    for (const std::string policy : {"full", "mpcache"}) {
      const auto add2 = generate_tokens(ProtocolBackend::add2, policy);
      const auto rss3 = generate_tokens(ProtocolBackend::rss3, policy);
      CHECK(add2.size() == 6);
      CHECK(add2 == rss3);
    }
  }

  TEST_CASE("under add2 the dealer can be neither the client nor the model owner") {
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    GenerationJob job;
    job.model_dir = fixture;
    job.mode.backend = ProtocolBackend::add2;
    job.owner = 2;
    CHECK_THROWS_WITH(testing::run(generate_party(network.endpoint(1), job)),
                      doctest::Contains("under add2 party 2 is the dealer"));
  }
}
