// Test support for add2's exact costs: parties 0 and 1 and the dealer
// (party 2), in one process. Include after parties.hpp (which has run_add2).
#pragma once

namespace mpcache::testing {

// Online and offline cost of one add2 operation on inputs shared first.
struct Add2OpCost {
  std::uint64_t rounds = 0;               // online critical path (parties 0 and 1)
  std::array<std::uint64_t, 2> bytes{};   // online payload sent by parties 0 and 1
  std::uint64_t dealer_bytes = 0;         // offline: what the dealer sent
};

// Parties 0 and 1 exchange two messages: their clocks are then equal. The
// dealer takes no part, as online: its messages carry its setup-time
// clock, so they never lengthen the parties' critical path.
inline Task<void> align_online_clocks(Endpoint& endpoint) {
  constexpr StreamId stream = 0xA1167EC10C6ull;
  if (endpoint.id() == add2_dealer) co_return;
  const PartyId other = endpoint.id() == 0 ? 1 : 0;
  for (int round = 0; round < 2; ++round) {
    endpoint.send(other, stream, std::vector<std::byte>(1));
    (void)co_await endpoint.recv(other, stream);
  }
}

// Shares `inputs` (owner 0 each, in order), aligns the online clocks, then
// measures op(Add2&, shares).
template <class Op>
Add2OpCost measure_add2(const std::vector<RingTensor>& inputs, Op op,
                        Add2Options options = {.exact_truncation = default_test_truncation_exact, .insecure_seed = 3}) {
  const CostWindow w = measure_window<Add2Party>(inputs, op, options, align_online_clocks);
  Add2OpCost cost;
  for (std::size_t i = 0; i < 2; ++i) cost.bytes[i] = (w.after[i] - w.before[i]).payload_bytes_sent();
  cost.rounds = std::max(w.after[0].rounds, w.after[1].rounds) - std::max(w.before[0].rounds, w.before[1].rounds);
  cost.dealer_bytes = (w.after[2] - w.before[2]).payload_bytes_sent();
  return cost;
}

}  // namespace mpcache::testing
