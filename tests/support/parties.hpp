// Test support: run one coroutine per party, all in one process, on the
// in-process transport. Include after the `import` lines.
#pragma once
#include "real_tensors.hpp"

namespace mpcache::testing {

template <class R>
struct PartyRun {
  std::array<R, 3> results;
  std::array<CostCounters, 3> costs;  // measured after key set-up

  // Rounds on the critical path (the counters start after key set-up).
  std::uint64_t max_rounds() const {
    CriticalPath path;
    for (const auto& c : costs) path.add(0, c.rounds);
    return path.rounds();
  }
};

// fn(P&) -> Task<R> at parties 0, 1, 2 concurrently, each on a session of
// its `Party` (Rss3Party or Add2Party) set up with `options`.
template <class Party, class Options, class Fn>
auto run_sessions(Fn fn, const Options& options) {
  using P = decltype(std::declval<Party&>().session());
  using R = typename decltype(fn(std::declval<P&>()))::value_type;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  PartyRun<R> run;
  auto party_main = [&](PartyId id) -> Task<R> {
    auto party = co_await Party::setup(network.endpoint(id), options);
    const CostCounters before = network.endpoint(id).costs();
    P session = party->session();
    R result = co_await fn(session);
    run.costs[id] = network.endpoint(id).costs() - before;
    co_return result;
  };
  auto results = run_parties(scheduler, network, party_main);
  for (std::size_t i = 0; i < 3; ++i) run.results[i] = std::move(results[i]);
  return run;
}

// The helpers below run probabilistic truncation unless a test passes its
// options: the costs the suites pin were counted under it. (The library's
// own default, Rss3Options{} and Add2Options{}, is exact truncation.)
inline constexpr bool default_test_truncation_exact = false;

template <class Fn>
auto run_rss3(Fn fn, Rss3Options options = {.exact_truncation = default_test_truncation_exact}) {
  return run_sessions<Rss3Party>(fn, options);
}

// Parties 0 and 1 and the dealer (party 2): results[2] is the dealer's
// (placeholders: zeros).
template <class Fn>
auto run_add2(Fn fn, Add2Options options = {.exact_truncation = default_test_truncation_exact, .insecure_seed = 7}) {
  return run_sessions<Add2Party>(fn, options);
}

// A secret input from `owner`; only the owner passes the value.
template <Protocol P>
Task<typename P::Share> share_of(P& p, PartyId owner, const RingTensor& v) {
  return p.input(owner, p.holds_input(owner) ? std::optional<RingTensor>(v) : std::nullopt,
                 shape_of(v));
}

// Every party sends one message to both others, twice: afterwards every
// clock is equal (they differ by at most one after an input), so an op
// measured from here starts its critical path at the same round everywhere.
inline Task<void> align_clocks(Endpoint& endpoint) {
  constexpr StreamId stream = 0xA1167EC10C5ull;
  for (int round = 0; round < 2; ++round) {
    for (PartyId peer = 0; peer < endpoint.parties(); ++peer)
      if (peer != endpoint.id()) endpoint.send(peer, stream, std::vector<std::byte>(1));
    for (PartyId peer = 0; peer < endpoint.parties(); ++peer)
      if (peer != endpoint.id()) (void)co_await endpoint.recv(peer, stream);
  }
}

// Rounds an operation added to the critical path (CriticalPath).
inline std::uint64_t critical_rounds(const std::array<CostCounters, 3>& before,
                                     const std::array<CostCounters, 3>& after) {
  CriticalPath path;
  for (std::size_t i = 0; i < 3; ++i) path.add(before[i].rounds, after[i].rounds);
  return path.rounds();
}

// Every party's counters around one operation: `inputs` shared from party
// 0 first (in order), then the clocks aligned by `align`, then op(P&, shares).
struct CostWindow {
  std::array<CostCounters, 3> before, after;
};
template <class Party, class Options, class Op, class Align>
CostWindow measure_window(const std::vector<RingTensor>& inputs, Op op, const Options& options, Align align) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  CostWindow w;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Party::setup(network.endpoint(id), options);
    auto p = state->session();
    std::vector<typename decltype(p)::Share> shares;
    for (const auto& x : inputs) shares.push_back(co_await share_of(p, 0, x));
    co_await align(network.endpoint(id));
    w.before[id] = network.endpoint(id).costs();
    (void)co_await op(p, shares);
    w.after[id] = network.endpoint(id).costs();
  });
  return w;
}

// Shares x from party 0 (seeded keys), aligns the clocks, then measures
// op(Rss3&, share) alone. Rounds: the critical path; bytes: payload sent per
// party (mpcache::OpCost, the type of the backends' cost models, so measured
// and modelled costs compare directly).
template <class Op>
OpCost measure_op(const RingTensor& x, Op op, Rss3Options options) {
  const CostWindow w = measure_window<Rss3Party>(
      {x}, [&](Rss3& p, std::vector<Rss3Share>& s) { return op(p, s[0]); }, options, align_clocks);
  OpCost cost;
  for (std::size_t i = 0; i < 3; ++i) cost.bytes[i] = (w.after[i] - w.before[i]).payload_bytes_sent();
  cost.rounds = critical_rounds(w.before, w.after);
  return cost;
}

// measure_op after every party made `count` truncation pairs at each of
// `shifts` and the session took them (options: exact truncation with a
// pairs budget), so that exact products in the window take one round.
template <class Op>
OpCost measure_op_with_pairs(const RingTensor& x, Op op, Rss3Options options, const std::vector<int>& shifts,
                             std::size_t count) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), options);
    Rss3 p = party->session();
    const Rss3Share a = co_await share_of(p, 0, x);
    for (int shift : shifts) (void)co_await party->prepare_truncations(shift, count);
    p.take_truncation_pairs();
    co_await align_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    (void)co_await op(p, a);
    after[id] = network.endpoint(id).costs();
  });
  OpCost cost;
  for (std::size_t i = 0; i < 3; ++i) cost.bytes[i] = (after[i] - before[i]).payload_bytes_sent();
  cost.rounds = critical_rounds(before, after);
  return cost;
}

template <class Op>
OpCost measure_op(const RingTensor& x, Op op, std::uint64_t seed = 1) {
  return measure_op(x, op, Rss3Options{.exact_truncation = default_test_truncation_exact, .insecure_seed = seed});
}

// fn(Plain&) -> Task<R>.
template <class Fn>
auto run_plain(Fn fn) {
  Scheduler scheduler;
  Plain plain;
  return sync_wait(scheduler, fn(plain));
}

// The secure backend run_both uses: rss3, or add2 when the environment has
// MPCACHE_TEST_BACKEND=add2 (ctest runs the ops suite once more that way,
// so every accuracy bound written for rss3 is checked on add2 too).
inline bool testing_add2() {
  const char* backend = std::getenv("MPCACHE_TEST_BACKEND");
  return backend && std::string_view(backend) == "add2";
}

// add2's comparisons under run_both: MPCACHE_TEST_ADD2_COMPARISONS=dcf
// runs the ops suite on the dealer's DCF keys (ctest test_ops_add2_dcf).
inline Add2Comparisons testing_add2_comparisons() {
  const char* mode = std::getenv("MPCACHE_TEST_ADD2_COMPARISONS");
  return mode && std::string_view(mode) == "dcf" ? Add2Comparisons::dcf : Add2Comparisons::circuit;
}

// rss3's comparisons under run_both: MPCACHE_TEST_RSS3_COMPARISONS=dcf runs
// the ops suite on DCF keys dealt by the party outside each pair (ctest
// test_ops_rss3_dcf).
inline Rss3Comparisons testing_rss3_comparisons() {
  const char* mode = std::getenv("MPCACHE_TEST_RSS3_COMPARISONS");
  return mode && std::string_view(mode) == "dcf" ? Rss3Comparisons::dcf : Rss3Comparisons::circuit;
}

// fn is generic over the backend ([&]<class P>(P& p) -> Task<R>); returns the
// secure run (all parties) and the plain result. Under add2 the dealer
// computes no value, so its slot (2) repeats party 0's result.
template <class Fn>
auto run_both(Fn fn, Rss3Options options = {.exact_truncation = default_test_truncation_exact}) {
  auto clear = run_plain([&](Plain& p) { return fn(p); });
  if (testing_add2()) {
    auto secure = run_add2([&](Add2& p) { return fn(p); },
                           Add2Options{.frac_bits = options.frac_bits,
                                       .exact_truncation = options.exact_truncation,
                                       .comparisons = testing_add2_comparisons(),
                                       .insecure_seed = options.insecure_seed.value_or(7)});
    secure.results[2] = secure.results[0];
    return std::pair{std::move(secure), std::move(clear)};
  }
  if (testing_rss3_comparisons() == Rss3Comparisons::dcf) options.comparisons = Rss3Comparisons::dcf;
  auto secure = run_rss3([&](Rss3& p) { return fn(p); }, options);
  return std::pair{std::move(secure), std::move(clear)};
}

inline RingTensor random_ring(const Shape& shape, std::uint64_t seed) {
  return ring_sample(shape, seed);
}

// Uniform reals in [lo, hi), deterministic.
inline RealTensor random_real(const Shape& shape, double lo, double hi, std::uint64_t seed) {
  RingTensor bits = random_ring(shape, seed);
  RealTensor out = RealTensor::from_shape(shape);
  auto b = bits.begin();
  for (auto& v : out) v = lo + (hi - lo) * (static_cast<double>(*b++ >> 11) * 0x1p-53);
  return out;
}

}  // namespace mpcache::testing
