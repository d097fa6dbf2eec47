// Links the installed mpcache, imports its modules, runs a 3-party
// multiplication and round-trips text through the client's byte tokenizer
// (mpcache.text); exits non-zero unless both are right.
#include "prelude.hpp"  // installed with the package; first, as in the library
#include <cstdio>
import mpcache;
import mpcache.text;

int main() {
  using namespace mpcache;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  RingTensor x = ring_zeros({4}), y = ring_zeros({4});
  for (std::size_t i = 0; i < 4; ++i) {
    x(i) = 1000 + i;
    y(i) = Ring(0) - (7 + i);  // negative in the signed view
  }
  auto party = [&](PartyId id) -> Task<RingTensor> {
    auto state = co_await Rss3Party::setup(network.endpoint(id));
    Rss3 p = state->session();
    auto a = co_await p.input(0, id == 0 ? std::optional(x) : std::nullopt, {4});
    auto b = co_await p.input(2, id == 2 ? std::optional(y) : std::nullopt, {4});
    co_return co_await p.reveal(co_await p.mul(a, b));
  };
  auto results = run_parties(scheduler, network, party);
  for (const auto& r : results)
    if (r != ring_mul(x, y)) {
      std::puts("consumer: wrong product");
      return 1;
    }
  std::printf("consumer: 3-party product ok, %lld\n",
              static_cast<long long>(static_cast<std::int64_t>(results[0](0))));

  const std::unique_ptr<text::Tokenizer> tok = text::make_byte_tokenizer();
  const std::string prompt = "It is a truth universally acknowledged";
  const std::vector<text::TokenId> ids = tok->encode(prompt);
  if (ids.size() != prompt.size() || ids[0] != 'I' || tok->decode(ids) != prompt || tok->vocab_size() != 256) {
    std::puts("consumer: the byte tokenizer does not round-trip");
    return 1;
  }
  std::printf("consumer: %s tokenizer round-trip ok, %zu tokens\n", tok->name().c_str(), ids.size());
  return 0;
}
