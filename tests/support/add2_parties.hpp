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
Add2OpCost measure_add2(const std::vector<RingTensor>& inputs, Op op, Add2Options options = {.insecure_seed = 3}) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Add2Party::setup(network.endpoint(id), options);
    Add2 p = state->session();
    std::vector<Add2Share> shares;
    for (const auto& x : inputs) shares.push_back(co_await share_of(p, 0, x));
    co_await align_online_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    (void)co_await op(p, shares);
    after[id] = network.endpoint(id).costs();
  });
  Add2OpCost cost;
  std::uint64_t b = 0, a = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    b = std::max(b, before[i].rounds);
    a = std::max(a, after[i].rounds);
    cost.bytes[i] = (after[i] - before[i]).payload_bytes_sent();
  }
  cost.rounds = a - b;
  cost.dealer_bytes = (after[2] - before[2]).payload_bytes_sent();
  return cost;
}

}  // namespace mpcache::testing
