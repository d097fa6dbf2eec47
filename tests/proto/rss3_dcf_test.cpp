// rss3 with comparisons = dcf: msb_bits from a DCF dealt by the party
// outside the pair that opens the masked input (src/proto/rss3_dcf.cpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"
#include "../support/signed_edges.hpp"
#include "../support/comparison_paths.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using mpcache::testing::random_ring;
using mpcache::testing::run_rss3;
using mpcache::testing::share_of;
using mpcache::testing::signed_edges;

static_assert(CostModel<Rss3DcfCosts>);
static_assert(DcfCostsOption<Rss3>);
static_assert(DcfCostsOption<Add2>);

namespace {

// Probabilistic truncation: the costs pinned below were counted under it.
constexpr Rss3Options dcf_options(std::uint64_t seed = 7) {
  return {.exact_truncation = false, .comparisons = Rss3Comparisons::dcf, .insecure_seed = seed};
}

// 1 where x < 0 as a w-bit signed value.
Ring sign_of(Ring x, int width) { return (x >> (width - 1)) & 1; }

// `calls` msb_bits (or msb_arith) of the same share in a row (the dealer
// rotates), each revealed.
std::vector<RingTensor> signs(const RingTensor& x, int width, int calls, Rss3Options options,
                              Rss3DcfOutput output = Rss3DcfOutput::bit) {
  return run_rss3(
             [&](Rss3& p) -> Task<std::vector<RingTensor>> {
               auto s = co_await share_of(p, 1, x);
               std::vector<RingTensor> out;
               for (int c = 0; c < calls; ++c)
                 out.push_back(output == Rss3DcfOutput::arith ? co_await p.reveal(co_await p.msb_arith(s, width))
                                                              : co_await p.reveal_bits(co_await p.msb_bits(s, width)));
               co_return out;
             },
             options)
      .results[0];
}

// One op after the clocks are aligned: rounds, payload per party, and the
// bytes each party dealt.
struct DealtCost {
  OpCost cost;
  std::array<std::uint64_t, 3> dealt{};
  std::array<Rss3DcfStats, 3> stats;  // each party's dcf counters afterwards
};
template <class Op>
DealtCost measure_dealt(const RingTensor& x, Op op, Rss3Options options) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  DealtCost out;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), options);
    Rss3 p = party->session();
    auto s = co_await share_of(p, 0, x);
    co_await mpcache::testing::align_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    (void)co_await op(p, s);
    after[id] = network.endpoint(id).costs();
    out.dealt[id] = party->dealt_bytes();
    out.stats[id] = party->dcf_stats();
  });
  for (std::size_t i = 0; i < 3; ++i) out.cost.bytes[i] = (after[i] - before[i]).payload_bytes_sent();
  out.cost.rounds = mpcache::testing::critical_rounds(before, after);
  return out;
}

}  // namespace

TEST_CASE("rss3 dcf: msb_bits is the sign on edge and random values at every width tested, every dealer") {
  for (const int width : {2, 3, 8, 17, 27, 33, 63, 64}) {
    const RingTensor x = signed_edges(width, 40 + static_cast<std::uint64_t>(width));
    const auto dcf = signs(x, width, 3, dcf_options()), circuit = signs(x, width, 1, {.insecure_seed = 7});
    for (int call = 0; call < 3; ++call)  // dealt by parties 2, 0, 1
      for (std::size_t i = 0; i < x.size(); ++i) {
        INFO("width " << width << ", call " << call << ", element " << i << ", value " << static_cast<std::int64_t>(x(i)));
        CHECK(dcf[call](i) == (static_cast<std::int64_t>(x(i)) < 0 ? 1u : 0u));
        CHECK(dcf[call](i) == circuit[0](i));
      }
  }
}

TEST_CASE("rss3 dcf: the sign of values wider than the width is that of their low w bits") {
  // msb_bits reads a mod 2^w, as the circuit does: +2^(w-1) is negative there.
  const int width = 27;
  RingTensor x = random_ring({300}, 12);
  x(0) = Ring{1} << (width - 1);
  x(1) = (Ring{1} << width) - 1;
  x(2) = Ring{1} << width;
  const auto dcf = signs(x, width, 1, dcf_options(9));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(dcf[0](i) == sign_of(x(i), width));
  CHECK(dcf[0](0) == 1);
  CHECK(dcf[0](1) == 1);
  CHECK(dcf[0](2) == 0);
}

TEST_CASE("rss3 dcf: a large batch is dealt by all three parties, a third each") {
  constexpr std::size_t n = 5000;  // 79 words: split into thirds at word boundaries
  const RingTensor x = random_ring({n}, 13);
  for (const int width : {27, 64}) {
    const auto dcf = signs(x, width, 1, dcf_options(5));
    for (std::size_t i = 0; i < n; ++i) CHECK(dcf[0](i) == sign_of(x(i), width));
    const DealtCost c = measure_dealt(
        x, [width](Rss3& p, const Rss3Share& s) -> Task<Rss3Bits> { co_return co_await p.msb_bits(s, width); },
        dcf_options(5));
    const Rss3DcfCost model = rss3_dcf_cost(width, n);
    CHECK(c.cost.rounds == 2);
    CHECK(c.cost.bytes == model.bytes);
    CHECK(c.dealt == model.dealt);
    // Chunks of 26, 26 and 27 words: 1664, 1664 and 1672 elements.
    for (std::size_t id = 0; id < 3; ++id) {
      const std::size_t k = id == 2 ? 1672 : 1664;
      CHECK(c.dealt[id] == 2 * dcf_correction_bytes(width - 1, 1, k) + k / 8);
    }
  }
}

TEST_CASE("rss3 dcf: msb_bits costs two rounds, the opening, the result bits and the dealer's keys") {
  constexpr std::size_t n = 1000;
  const RingTensor a = random_ring({n}, 1);
  for (const int width : {2, 27, 40, 64}) {
    INFO("width " << width);
    const DealtCost c = measure_dealt(
        a, [width](Rss3& p, const Rss3Share& s) -> Task<Rss3Bits> { co_return co_await p.msb_bits(s, width); },
        dcf_options(3));
    // A small batch: party 2 deals the first call; 0 and 1 open to each
    // other (ceil(w/8) bytes an element) and exchange their result bits.
    const std::uint64_t keys = dcf_correction_bytes(width - 1, 1, n);
    const std::uint64_t pair = static_cast<std::uint64_t>((width + 7) / 8) * n + n / 8;
    CHECK(c.cost.rounds == 2);
    CHECK(c.cost.bytes[0] == pair);
    CHECK(c.cost.bytes[1] == pair);
    CHECK(c.cost.bytes[2] == 2 * keys + n / 8);
    CHECK(c.dealt == std::array<std::uint64_t, 3>{0, 0, 2 * keys + n / 8});
    const OpCost model = Rss3DcfCosts::msb_bits(width, n, 0);
    CHECK(model.rounds == c.cost.rounds);
    CHECK(model.bytes == c.cost.bytes);
  }
  // Pinned: w = 27 is 4125 bytes from each of the pair and 838,875 dealt
  // (26 levels of 16 bytes and 27 bits an element, to each, and a bit of
  // msb(r) to one); w = 64: 8125 and 2,032,125.
  testing::check_pinned("proto.rss3_dcf.msb_w27.bytes", Rss3DcfCosts::msb_bits(27, n, 0).bytes);
  testing::check_pinned("proto.rss3_dcf.msb_w64.bytes", Rss3DcfCosts::msb_bits(64, n, 0).bytes);
  // The dealer rotates with the call, as the circuit's lead: call 1 is party 0's.
  testing::check_pinned("proto.rss3_dcf.msb_w27_fork1.bytes", Rss3DcfCosts::msb_bits(27, n, 1).bytes);
  // Everything else costs what the circuit model says.
  CHECK(Rss3DcfCosts::mul(n).bytes == Rss3Costs::mul(n).bytes);
  CHECK(Rss3DcfCosts::bit_dot(n, 4).rounds == Rss3Costs::bit_dot(n, 4).rounds);
}

TEST_CASE("rss3 dcf: compare_on_circuit holds for its stream and the forks made after, not for other streams") {
  // A service's sessions choose apart: one prefills on the circuit while
  // another compares with DCF keys.
  const RingTensor x = random_ring({64}, 5);
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<std::array<std::uint64_t, 3>, 3> dealt{};  // per party: after setup, after the circuit call, after the dcf call
  std::array<RingTensor, 2> got;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), dcf_options(11));
    Rss3 a = party->session(), b = party->session();
    auto sa = co_await share_of(a, 0, x);
    auto sb = co_await share_of(b, 0, x);
    Rss3 early = a.fork();
    a.compare_on_circuit(true);
    Rss3 late = a.fork();
    CHECK(!a.dcf_comparisons());
    CHECK(!late.dcf_comparisons());
    CHECK(early.dcf_comparisons());
    CHECK(b.dcf_comparisons());
    dealt[id][0] = party->dealt_bytes();
    auto on_circuit = co_await late.reveal_bits(co_await late.msb_bits(sa, 64));
    dealt[id][1] = party->dealt_bytes();
    auto with_keys = co_await b.reveal_bits(co_await b.msb_bits(sb, 64));
    dealt[id][2] = party->dealt_bytes();
    a.compare_on_circuit(false);
    CHECK(a.dcf_comparisons());
    if (id == 0) got = {on_circuit, with_keys};
  });
  std::uint64_t dealt_by_dcf = 0;
  for (PartyId id = 0; id < 3; ++id) {
    CHECK(dealt[id][1] == dealt[id][0]);  // the circuit's call dealt no key
    dealt_by_dcf += dealt[id][2] - dealt[id][1];
  }
  CHECK(dealt_by_dcf > 0);  // the other stream's call did
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK((got[0].data()[i] & 1) == sign_of(x.data()[i], 64));
    CHECK((got[1].data()[i] & 1) == sign_of(x.data()[i], 64));
  }
}

TEST_CASE("rss3 dcf: two calls in a row take four rounds, dealt by parties 2 then 0") {
  constexpr std::size_t n = 100;
  const RingTensor a = random_ring({n}, 2);
  const DealtCost c = measure_dealt(
      a,
      [](Rss3& p, const Rss3Share& s) -> Task<void> {
        (void)co_await p.msb_bits(s, 32);
        (void)co_await p.msb_bits(s, 32);
      },
      dcf_options(4));
  const OpCost model = Rss3DcfCosts::msb_bits(32, n, 0) + Rss3DcfCosts::msb_bits(32, n, 1);
  CHECK(c.cost.rounds == model.rounds);
  CHECK(c.cost.bytes == model.bytes);
  const std::uint64_t dealt = 2 * dcf_correction_bytes(31, 1, n) + (n + 7) / 8;
  CHECK(c.dealt == std::array<std::uint64_t, 3>{dealt, 0, dealt});
}

TEST_CASE("rss3 dcf: ops plan on the dcf costs, and argmax takes the rounds they model") {
  // A level of pairs: msb 2 + bit_dot 2 rounds, against the circuit's 6 + 2.
  testing::check_pinned("ops.tournament.dcf.level_rounds_2_16", std::vector<std::uint64_t>{
      ops::tournament_level_rounds<Rss3DcfCosts>(2), ops::tournament_level_rounds<Rss3DcfCosts>(16)});
  testing::check_pinned("ops.tournament.circuit.level_rounds_2_16", std::vector<std::uint64_t>{
      ops::tournament_level_rounds<Rss3Costs>(2), ops::tournament_level_rounds<Rss3Costs>(16)});
  // One group of 16 by bits (msb 2 + an AND of 15 bits 4 + bit_dot 2): 8
  // rounds, against 12 for the circuit; by counting wins (2 + 2 + a
  // product 1) 5, which the planner takes and argmax measures.
  CHECK(ops::tournament_plan<Rss3DcfCosts>(1, 16) == std::vector<std::size_t>{16});
  testing::check_pinned("ops.tournament.dcf.count_level_rounds_16",
                        ops::tournament_count_level_rounds<Rss3DcfCosts>(16));
  CHECK(ops::tournament_levels<Rss3DcfCosts>(1, 16) == std::vector<ops::TournamentLevel>{{16, true}});
  CHECK(ops::tournament_levels<Rss3Costs>(1, 16) == std::vector<ops::TournamentLevel>{{16, false}});
  const RingTensor row = random_ring({1, 16}, 3);
  const DealtCost c = measure_dealt(
      row, [](Rss3& p, const Rss3Share& s) -> Task<void> { (void)co_await ops::argmax_last(p, s); }, dcf_options(6));
  testing::check_pinned("ops.tournament.dcf.count_level_rounds_16", c.cost.rounds);
  // Bytes: 120 signs at 64 bits, needed mod 2^5 only (their sums are
  // compared on 5 bits: 1 byte each reshared, not 8), 16 at 5 bits (dealers
  // rotate, so compare the parties' total), and the product of 16 wins
  // with values and indices.
  const auto total = [](const OpCost& o) { return o.bytes[0] + o.bytes[1] + o.bytes[2]; };
  CHECK(total(c.cost) == total(Rss3DcfCosts::msb_arith(64, 120, 0, 5)) + total(Rss3DcfCosts::msb_arith(5, 16, 0)) +
                             total(Rss3DcfCosts::mul(32)));
  CHECK(total(Rss3DcfCosts::msb_arith(64, 120, 0)) - total(Rss3DcfCosts::msb_arith(64, 120, 0, 5)) == 2 * 120 * 7);
  // Many long rows: the dealt keys make bytes dear, so the plan on DcfCosts
  // differs from the circuit's, and argmax follows the option's plan
  // (with_costs), not the type's.
  const auto dcf_plan = ops::tournament_plan<Rss3DcfCosts>(64, 1024), circuit_plan = ops::tournament_plan<Rss3Costs>(64, 1024);
  MESSAGE("rows of 1024 x 64: dcf plan of " << dcf_plan.size() << " levels, circuit plan of " << circuit_plan.size());
  CHECK(dcf_plan != circuit_plan);
  auto planned = run_rss3([](Rss3& p) -> Task<std::vector<std::size_t>> {
    co_return with_costs(p, [&]<CostModel C>() { return ops::tournament_plan<C>(64, 1024); });
  }, dcf_options(6));
  CHECK(planned.results[0] == dcf_plan);
}

TEST_CASE("rss3 dcf: argmax, ReLU and GeLU give the circuit path's results") {
  const RingTensor logits = mpcache::testing::tied_logits();
  auto run = [&](Rss3Comparisons comparisons) {
    return run_rss3(
        [&](Rss3& p) {
          return mpcache::testing::comparison_results(p, logits, [](Rss3&, const Rss3Share& x) { return x; });
        },
        {.exact_truncation = true, .comparisons = comparisons, .insecure_seed = 21});
  };
  // Under exact truncation the dcf path takes GeLU's spline of degree-4
  // pieces (ops::detail::splines_pay), the circuit the high-degree pieces:
  // they agree to both fits' errors (4.1e-4 and 1.1e-4), 6e-4 in fixed point.
  mpcache::testing::check_comparison_results(logits, run(Rss3Comparisons::dcf).results[0],
                                             run(Rss3Comparisons::circuit).results[0],
                                             static_cast<std::int64_t>(std::ldexp(6e-4, default_frac_bits)));
}

TEST_CASE("rss3: parties whose comparisons differ are refused at setup") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
    try {
      (void)co_await Rss3Party::setup(network.endpoint(id),
                                      {.comparisons = id == 0 ? Rss3Comparisons::dcf : Rss3Comparisons::circuit});
    } catch (const Error& e) {
      co_return e.what();
    }
    co_return "";
  });
  // Party 1 hears party 0's settings (keys go to the next party).
  CHECK(results[1].find("party 1: party 0 uses 18 fraction bits, exact truncation, dcf comparisons, "
                        "this party 18 fraction bits, exact truncation, circuit comparisons") != std::string::npos);
  CHECK(results[0].find("party 0: party 2 uses 18 fraction bits, exact truncation, circuit comparisons, "
                        "this party 18 fraction bits, exact truncation, dcf comparisons") != std::string::npos);
}


TEST_CASE("rss3: parties whose offline store or dcf slices differ are refused at setup, naming both sizes") {
  // Plans read the store's costs, and the dealer serves from its store or
  // deals inline slice by slice: parties that differ would split apart.
  auto refusals = [](auto options_of) {
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    return run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
      try {
        (void)co_await Rss3Party::setup(network.endpoint(id), options_of(id));
      } catch (const Error& e) {
        co_return e.what();
      }
      co_return "";
    });
  };
  auto store = refusals([](PartyId id) {
    return Rss3Options{.comparisons = Rss3Comparisons::dcf, .offline_budget = id == 0 ? 4096u : 8192u};
  });
  CHECK(store[1].find("party 1: party 0 uses 18 fraction bits, exact truncation, dcf comparisons, an offline "
                      "store of 4096 bytes, this party 18 fraction bits, exact truncation, dcf comparisons, an "
                      "offline store of 8192 bytes") != std::string::npos);
  CHECK(store[2] == "");  // party 2 hears party 1, which agrees with it
  auto slices = refusals([](PartyId id) {
    return Rss3Options{.comparisons = Rss3Comparisons::dcf, .dcf_slice_bytes = id == 2 ? 1024u : 2048u};
  });
  CHECK(slices[0].find("party 0: party 2 uses 18 fraction bits, exact truncation, dcf comparisons, dcf slices "
                       "of 1024 bytes, this party") != std::string::npos);
  CHECK(slices[0].find("store") == std::string::npos);  // only what differs is named
}


TEST_CASE("rss3 dcf: msb_arith is the sign as a ring 0/1 on edge and random values at every width, every dealer") {
  static_assert(ArithmeticSign<Rss3>);
  static_assert(ArithmeticSignCosts<Rss3DcfCosts>);
  static_assert(!ArithmeticSignCosts<Rss3Costs>);  // the circuit plans as before
  for (const int width : {2, 3, 8, 17, 27, 63, 64}) {
    const RingTensor x = signed_edges(width, 60 + static_cast<std::uint64_t>(width));
    const auto dcf = signs(x, width, 3, dcf_options(8), Rss3DcfOutput::arith),
               circuit = signs(x, width, 1, {.insecure_seed = 8}, Rss3DcfOutput::arith);
    for (int call = 0; call < 3; ++call)
      for (std::size_t i = 0; i < x.size(); ++i) {
        INFO("width " << width << ", call " << call << ", element " << i << ", value " << static_cast<std::int64_t>(x(i)));
        CHECK(dcf[call](i) == sign_of(x(i), width));
        CHECK(circuit[0](i) == sign_of(x(i), width));
      }
  }
}

TEST_CASE("rss3 dcf: msb_arith costs msb_bits' two rounds, 8 bytes a result and keys with 64-bit payloads") {
  constexpr std::size_t n = 1000;
  const RingTensor a = random_ring({n}, 31);
  for (const int width : {2, 27, 64}) {
    INFO("width " << width);
    const DealtCost c = measure_dealt(
        a, [width](Rss3& p, const Rss3Share& s) -> Task<Rss3Share> { co_return co_await p.msb_arith(s, width); },
        dcf_options(3));
    // Party 2 deals the first call: both keys (w - 1 levels of 16 bytes and
    // 8 bytes of payload, and a final 8 bytes), and B's 8-byte offsets.
    const std::uint64_t keys = dcf_correction_bytes(width - 1, 64, n);
    const std::uint64_t pair = static_cast<std::uint64_t>((width + 7) / 8) * n + 8 * n;
    CHECK(c.cost.rounds == 2);
    CHECK(c.cost.bytes == std::array<std::uint64_t, 3>{pair, pair, 2 * keys + 8 * n});
    CHECK(c.dealt == std::array<std::uint64_t, 3>{0, 0, 2 * keys + 8 * n});
    const OpCost model = Rss3DcfCosts::msb_arith(width, n, 0);
    CHECK(model.rounds == c.cost.rounds);
    CHECK(model.bytes == c.cost.bytes);
  }
  // Pinned: w = 27 is 12,000 bytes from each of the pair and 1,272,000
  // dealt (msb_bits: 4125 and 838,875); w = 64 16,000 and 3,048,000.
  testing::check_pinned("proto.rss3_dcf.msb_arith_w27.bytes", Rss3DcfCosts::msb_arith(27, n, 0).bytes);
  testing::check_pinned("proto.rss3_dcf.msb_arith_w64.bytes", Rss3DcfCosts::msb_arith(64, n, 0).bytes);
  CHECK(dcf_key_bytes(63, 64, 1) == 16 + 16 * 63 + 8 * 64);
  // The circuit has no such hook: msb_bits then B2A, priced as their sum
  // and running exactly as the two calls do.
  const OpCost circuit_model = msb_arith_cost<Rss3Costs>(27, n, 0);
  CHECK(circuit_model.rounds == Rss3Costs::msb_bits(27, n, 0).rounds + 2);
  const DealtCost circuit = measure_dealt(
      a, [](Rss3& p, const Rss3Share& s) -> Task<Rss3Share> { co_return co_await p.msb_arith(s, 27); },
      {.insecure_seed = 3});
  const DealtCost pair = measure_dealt(
      a, [](Rss3& p, const Rss3Share& s) -> Task<Rss3Share> { co_return co_await p.bit_to_arith(co_await p.msb_bits(s, 27)); },
      {.insecure_seed = 3});
  CHECK(circuit.cost.rounds == pair.cost.rounds);
  CHECK(circuit.cost.bytes == pair.cost.bytes);
  CHECK(circuit.cost.bytes == circuit_model.bytes);
}

TEST_CASE("rss3 dcf: msb_arith with a narrow result reshares ceil(k/8) bytes and is the sign mod 2^k") {
  constexpr std::size_t n = 1000;
  const RingTensor a = ring_concat_last(signed_edges(64, 41), random_ring({n - 159}, 42));
  for (const int bits : {1, 5, 8, 9, 64}) {
    INFO("result bits " << bits);
    const RingTensor low = run_rss3(
                               [&](Rss3& p) -> Task<RingTensor> {
                                 auto s = co_await share_of(p, 1, a);
                                 co_return co_await p.reveal(co_await p.msb_arith(s, 64, bits));
                               },
                               dcf_options(12))
                               .results[0];
    const Ring mask = bits == 64 ? ~Ring{0} : (Ring{1} << bits) - 1;
    for (std::size_t i = 0; i < n; ++i) {
      CHECK((low.data()[i] & mask) == sign_of(a.data()[i], 64));
    }
    const DealtCost c = measure_dealt(
        a, [bits](Rss3& p, const Rss3Share& s) -> Task<Rss3Share> { co_return co_await p.msb_arith(s, 64, bits); },
        dcf_options(3));
    const std::uint64_t pair = 8 * n + static_cast<std::uint64_t>((bits + 7) / 8) * n;
    CHECK(c.cost.rounds == 2);
    CHECK(c.cost.bytes[0] == pair);
    CHECK(c.cost.bytes[1] == pair);
    CHECK(Rss3DcfCosts::msb_arith(64, n, 0, bits).bytes == c.cost.bytes);
  }
  auto refused = run_rss3(
      [&](Rss3& p) -> Task<std::string> {
        auto s = co_await share_of(p, 1, a);
        try {
          (void)co_await p.msb_arith(s, 64, 0);
        } catch (const Error& e) {
          co_return std::string(e.what());
        }
        co_return std::string();
      },
      dcf_options(12));
  for (const auto& r : refused.results) CHECK(r.find("rss3 msb_arith: result bits 0 outside [1, 64]") != std::string::npos);
}

TEST_CASE("rss3 dcf: msb_arith deals in slices, a third to each dealer, from a dry store") {
  constexpr std::size_t n = 5000;
  const RingTensor x = random_ring({n}, 17);
  const int width = 40;
  Rss3Options options = dcf_options(5);
  options.dcf_slice_bytes = 64 * 1024;  // slices of 64 keys at 39 levels
  options.offline_budget = 1 << 20;     // on, but never filled: dry
  CHECK(rss3_dcf_slice_elements(width, options.dcf_slice_bytes, Rss3DcfOutput::arith) == 64);
  const auto signs_out = signs(x, width, 1, options, Rss3DcfOutput::arith);
  for (std::size_t i = 0; i < n; ++i) CHECK(signs_out[0](i) == sign_of(x(i), width));
  const DealtCost c = measure_dealt(
      x, [](Rss3& p, const Rss3Share& s) -> Task<Rss3Share> { co_return co_await p.msb_arith(s, width); },
      options);
  const Rss3DcfCost model =
      rss3_dcf_cost(width, n, options.dcf_slice_bytes, Rss3DcfStoreUse::dry, Rss3DcfOutput::arith);
  CHECK(c.cost.bytes == model.bytes);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(c.stats[i].from_store == 0);
    // The demand is filed under the arithmetic slot, for prepare_comparisons.
    REQUIRE(c.stats[i].demand.contains(rss3_dcf_slot(width, Rss3DcfOutput::arith)));
    const auto per_dealer = c.stats[i].demand.at(width + 64);
    CHECK(per_dealer[0] + per_dealer[1] + per_dealer[2] == n);
  }
  // 26 or 27 slices per dealer, two in flight: 2 + 2 * 13 rounds.
  CHECK(c.cost.rounds == model.rounds);
  testing::check_pinned("proto.rss3_dcf.sliced_rounds", model.rounds);
}

namespace {
template <CostModel C>
std::size_t planned_rounds(const std::vector<ops::TournamentLevel>& levels) {
  std::size_t rounds = 0;
  for (const auto& level : levels)
    rounds += level.by_counts       ? ops::tournament_count_level_rounds<C>(level.m)
              : !level.by_difference ? ops::tournament_level_rounds<C>(level.m)
              : level.arithmetic     ? ops::tournament_difference_arith_level_rounds<C>()
                                     : ops::tournament_difference_level_rounds<C>();
  return rounds;
}
}  // namespace

TEST_CASE("rss3 dcf: the vocabulary argmax of GPT-2 (50,257 logits) plans 24 rounds with a store, 44 without") {
  // With the keys dealt ahead, the plan weighs the online bytes only.
  const auto stored = ops::tournament_levels<Rss3DcfStoreCosts>(1, 50257);
  std::string sizes;
  for (const auto& level : stored) sizes += " " + std::to_string(level.m);
  MESSAGE("dcf with a store: " << stored.size() << " levels, " << planned_rounds<Rss3DcfStoreCosts>(stored)
                               << " rounds, groups of" << sizes);
  // 3 levels of pairs by the difference's arithmetic sign (3 rounds each:
  // the sign, a product), then 3 that count wins (5 each; groups of 6, 17,
  // 62): the pairs' signs reshare 1 byte each, not 8, so wider groups pay
  // on the LAN. (Counting alone took 4 levels, 20 rounds, more bytes.)
  testing::check_pinned("proto.rss3_dcf.tournament_store_rounds", planned_rounds<Rss3DcfStoreCosts>(stored));
  const ops::TournamentLevel pair{2, false, true, true};
  CHECK(stored == std::vector<ops::TournamentLevel>{pair, pair, pair, {6, true}, {17, true}, {62, true}});
  for (const auto& level : stored) CHECK((level.by_counts || level.arithmetic));
  // Inline, the keys are online bytes too (about 3 KB a comparison): the
  // LAN plan takes small groups and more rounds.
  const auto inline_keys = ops::tournament_levels<Rss3DcfCosts>(1, 50257);
  MESSAGE("dcf inline: " << inline_keys.size() << " levels, " << planned_rounds<Rss3DcfCosts>(inline_keys) << " rounds");
  testing::check_pinned("proto.rss3_dcf.tournament_inline_rounds", planned_rounds<Rss3DcfCosts>(inline_keys));
  // A party with a store plans on those costs.
  Rss3Options options = dcf_options(6);
  options.offline_budget = 1 << 20;
  auto planned = run_rss3([](Rss3& p) -> Task<std::vector<ops::TournamentLevel>> {
    co_return with_costs(p, [&]<CostModel C>() { return ops::tournament_levels<C>(1, 50257); });
  }, options);
  CHECK(planned.results[0] == stored);
  // The circuit's plan counts no wins; by bits alone it is tournament_plan's.
  // (It may take levels of pairs by the difference where the LAN model
  // finds them cheaper: for 50,257 logits 2d 2d 8 25 63, where bits alone
  // took 4 levels, 4 8 25 63: 6 rounds more, fewer bytes.)
  std::string circuit;
  for (const auto& level : ops::tournament_levels<Rss3Costs>(1, 50257)) {
    CHECK_FALSE(level.by_counts);
    circuit += " " + std::to_string(level.m) + (level.by_difference ? "d" : "");
  }
  MESSAGE("circuit plan for 50,257 logits:" << circuit);
  CHECK(ops::tournament_levels<Rss3Costs>(1, 50257, ring_bits, lan_link(), false, false).size() ==
        ops::tournament_plan<Rss3Costs>(1, 50257).size());
}

// The measured rounds of a token choice with a filled store: the plan's. A
// vocabulary of 4,096 plans counting levels after pairs by the difference
// as GPT-2's 50,257 does (planned above) at a fraction of its comparisons,
// so it runs in the dev preset.
TEST_CASE("rss3 dcf+store: a vocabulary argmax over 4,096 logits takes its planned rounds") {
  constexpr std::size_t vocab = 4096;
  const auto plan = ops::tournament_levels<Rss3DcfStoreCosts>(1, vocab);
  std::string sizes;
  for (const auto& level : plan) sizes += " " + std::to_string(level.m);
  MESSAGE("dcf with a store, " << vocab << " logits: " << plan.size() << " levels, "
                               << planned_rounds<Rss3DcfStoreCosts>(plan) << " rounds, groups of" << sizes);
  REQUIRE(plan.size() >= 2);
  // The model's plan (printed above): pairs by the difference's arithmetic
  // sign (3 rounds), then groups of 32 and 64 counting wins (5 each), 13
  // rounds (counting alone: groups of 5, 13 and 64, 15 rounds).
  CHECK(plan == std::vector<ops::TournamentLevel>{{2, false, true, true}, {32, true}, {64, true}});
  testing::check_pinned("proto.rss3_dcf.argmax_store_rounds", planned_rounds<Rss3DcfStoreCosts>(plan));
  RingTensor logits = random_ring({1, vocab}, 77);
  for (std::size_t i = 0; i < vocab; ++i) logits(0, i) = static_cast<Ring>(static_cast<std::int64_t>(logits(0, i)) >> 40);
  std::size_t best = 0;
  for (std::size_t i = 1; i < vocab; ++i)
    if (static_cast<std::int64_t>(logits(0, i)) > static_cast<std::int64_t>(logits(0, best))) best = i;
  Rss3Options options = dcf_options(9);
  options.offline_budget = std::uint64_t{2} << 30;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  std::array<RingTensor, 3> index;
  std::array<std::uint64_t, 3> ran_dry{};
  std::array<std::uint64_t, 3> offline{};
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), options);
    Rss3 p = party->session();
    auto s = co_await share_of(p, 0, logits);
    (void)co_await ops::argmax_last(p, s);  // a dry run: its demand says what to deal
    for (const auto& [slot, per_dealer] : party->dcf_stats().demand)
      (void)co_await party->prepare_comparisons(slot, *std::max_element(per_dealer.begin(), per_dealer.end()));
    co_await mpcache::testing::align_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    const std::uint64_t dry_before = party->dcf_stats().ran_dry;
    auto r = co_await ops::argmax_last(p, s);
    after[id] = network.endpoint(id).costs();
    ran_dry[id] = party->dcf_stats().ran_dry - dry_before;
    offline[id] = party->dcf_stats().offline_bytes;
    index[id] = co_await p.reveal(r.index);
  });
  const std::uint64_t rounds = mpcache::testing::critical_rounds(before, after);
  std::uint64_t busiest = 0;
  for (std::size_t i = 0; i < 3; ++i) busiest = std::max(busiest, (after[i] - before[i]).payload_bytes_sent());
  MESSAGE("argmax over " << vocab << ": " << rounds << " rounds, busiest party " << busiest
                         << " bytes online, offline bytes dealt per party " << offline[0] << ", " << offline[1] << ", "
                         << offline[2]);
  CHECK(ran_dry == std::array<std::uint64_t, 3>{});  // every key came from the store
  CHECK(index[0](0, 0) == best);
  CHECK(rounds == planned_rounds<Rss3DcfStoreCosts>(plan));
  testing::check_pinned("proto.rss3_dcf.argmax_store_rounds", rounds);
}

TEST_CASE("rss3 dcf: reciprocal, rsqrt and the norms select with a ring one-hot, a round less each") {
  // The plan: msb_arith (2) + one dot_trunc (1) against msb_bits (2) +
  // bit_dot (2) on the dcf costs, with or without a store; never on the
  // circuit's, which has no arithmetic sign.
  CHECK(ops::detail::arithmetic_one_hot_pays<Rss3DcfCosts>(41, 1));
  CHECK(ops::detail::arithmetic_one_hot_pays<Rss3DcfCosts>(41, 4096));
  CHECK(ops::detail::arithmetic_one_hot_pays<Rss3DcfStoreCosts>(41, 4096));
  CHECK_FALSE(ops::detail::arithmetic_one_hot_pays<Rss3Costs>(41, 1));
  static_assert(ops::detail::ArithmeticOneHot<Rss3>);
  static_assert(!ops::detail::ArithmeticOneHot<Plain>);
  FixedPoint fp;
  RealTensor values = RealTensor::from_shape({8});
  for (std::size_t i = 0; i < 8; ++i) values(i) = 0.5 + 0.5 * double(i);
  const RingTensor x = fp.encode(values);
  auto rounds_of = [&](auto op, bool exact) {
    Rss3Options options = dcf_options(9);
    options.exact_truncation = exact;
    return mpcache::testing::measure_op(x, op, options).rounds;
  };
  auto reciprocal = [](Rss3& p, const Rss3Share& a) { return ops::reciprocal(p, a); };
  auto rsqrt = [](Rss3& p, const Rss3Share& a) { return ops::rsqrt(p, a); };
  auto rms = [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::rms_norm(p, ops::reshape<Rss3>(a, {1, 8}), a);
  };
  auto layer = [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::layer_norm(p, ops::reshape<Rss3>(a, {1, 8}), a, a);
  };
  // reciprocal: msb_arith 2 + x' by dot_trunc 1 + 3 (circuit: 5 + 2 + 3).
  testing::check_pinned("ops.rounds.dcf.reciprocal", rounds_of(reciprocal, false));
  // rsqrt: msb_arith 2 + x' and -b x' by dot_trunc 1 + 4 (circuit 11).
  testing::check_pinned("ops.rounds.dcf.rsqrt", rounds_of(rsqrt, false));
  // The norms (circuit 12, 13): the mean square or variance, then
  // rsqrt_times; measured, RMSNorm takes a round more than the sum of its
  // steps (1 + 7) here.
  testing::check_pinned("ops.rounds.dcf.rms_norm", rounds_of(rms, false));
  testing::check_pinned("ops.rounds.dcf.layer_norm", rounds_of(layer, false));
  // Exact truncation: each truncating product one round more.
  MESSAGE("exact truncation: reciprocal " << rounds_of(reciprocal, true) << ", rsqrt " << rounds_of(rsqrt, true)
                                          << ", RMSNorm " << rounds_of(rms, true) << ", LayerNorm "
                                          << rounds_of(layer, true));
  // The values: within the documented bounds, as on the circuit path.
  auto got = run_rss3(
      [&](Rss3& p) -> Task<std::vector<RingTensor>> {
        auto a = co_await share_of(p, 0, x);
        std::vector<RingTensor> out;
        out.push_back(co_await p.reveal(co_await ops::reciprocal(p, a)));
        out.push_back(co_await p.reveal(co_await ops::rsqrt(p, a)));
        co_return out;
      },
      dcf_options(10));
  const RealTensor inv = fp.decode(got.results[0][0]), root = fp.decode(got.results[0][1]);
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(std::fabs(inv(i) * values(i) - 1) <= 2e-4 + 0x1p-18 * values(i));
    CHECK(std::fabs(root(i) * std::sqrt(values(i)) - 1) <= 1e-3 + 0x1p-17 * std::sqrt(values(i)));
  }
}

namespace {
// op's cost after every party's store was filled from a dry run's demand
// (as mpcache-decode-steps fills it before each step); every key of the
// measured run must come from the store.
template <class Op>
OpCost measure_stored(const RingTensor& x, Op op, Rss3Options options) {
  options.offline_budget = std::uint64_t{64} << 20;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  std::array<std::uint64_t, 3> ran_dry{};
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), options);
    Rss3 p = party->session();
    auto s = co_await share_of(p, 0, x);
    (void)co_await op(p, s);  // the dry run: its demand says what to deal
    for (const auto& [slot, per_dealer] : party->dcf_stats().demand)
      (void)co_await party->prepare_comparisons(slot, *std::max_element(per_dealer.begin(), per_dealer.end()));
    co_await mpcache::testing::align_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    const std::uint64_t dry_before = party->dcf_stats().ran_dry;
    (void)co_await op(p, s);
    after[id] = network.endpoint(id).costs();
    ran_dry[id] = party->dcf_stats().ran_dry - dry_before;
  });
  CHECK(ran_dry == std::array<std::uint64_t, 3>{});
  OpCost cost;
  for (std::size_t i = 0; i < 3; ++i) cost.bytes[i] = (after[i] - before[i]).payload_bytes_sent();
  cost.rounds = mpcache::testing::critical_rounds(before, after);
  return cost;
}
}  // namespace

TEST_CASE("rss3 dcf: SiLU, GeLU and silu_times select their pieces with a ring one-hot, a round less each") {
  // The plan for 16 values: 4 (SiLU) or 3 (GeLU) signs at 64 bits each by
  // msb_arith (2) and one dot_trunc over 4 or 3 pieces (1), against
  // msb_bits (2) and bit_dot (2) on the dcf costs, with or without a
  // store; never on the circuit's, which has no arithmetic sign.
  CHECK(ops::detail::arithmetic_select_pays<Rss3DcfCosts>(64, 4 * 16, 16, 4));
  CHECK(ops::detail::arithmetic_select_pays<Rss3DcfStoreCosts>(64, 4 * 16, 16, 4));
  CHECK(ops::detail::arithmetic_select_pays<Rss3DcfCosts>(64, 3 * 16, 16, 3));
  CHECK_FALSE(ops::detail::arithmetic_select_pays<Rss3Costs>(64, 4 * 16, 16, 4));
  FixedPoint fp;
  RealTensor values = RealTensor::from_shape({16});
  for (std::size_t i = 0; i < 16; ++i) values(i) = -12.0 + 1.6 * double(i);  // every piece of both
  const RingTensor x = fp.encode(values);
  auto silu = [](Rss3& p, const Rss3Share& a) { return ops::silu(p, a); };
  auto gelu = [](Rss3& p, const Rss3Share& a) { return ops::gelu(p, a); };
  auto silu_times = [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> { co_return co_await ops::silu_times(p, a, a, 4); };
  const auto inline_cost = [&](auto op) { return mpcache::testing::measure_op(x, op, dcf_options(11)); };
  const auto stored_cost = [&](auto op) { return measure_stored(x, op, dcf_options(11)); };
  const OpCost s = inline_cost(silu), g = inline_cost(gelu), st = inline_cost(silu_times);
  const OpCost s_stored = stored_cost(silu), g_stored = stored_cost(gelu), st_stored = stored_cost(silu_times);
  // Rounds: the polynomials' chains (SiLU's degree 8, GeLU's 10, silu_times
  // a product more) bound them, the comparisons (2) overlap, then the
  // select's 1 (circuit: 8 each, nonlinear_test.cpp).
  testing::check_pinned("proto.rss3_dcf.activation_rounds",
                        std::vector<std::uint64_t>{s.rounds, g.rounds, st.rounds, s_stored.rounds, g_stored.rounds,
                                                   st_stored.rounds});
  // Bytes per party: inline, this dealer (party 2 for 64 or 48 signs)
  // sends the keys; with a filled store the opening and reshares only.
  testing::check_pinned("proto.rss3_dcf.silu.bytes", s.bytes);
  testing::check_pinned("proto.rss3_dcf.gelu.bytes", g.bytes);
  testing::check_pinned("proto.rss3_dcf.silu_times.bytes", st.bytes);
  testing::check_pinned("proto.rss3_dcf.silu_stored.bytes", s_stored.bytes);
  testing::check_pinned("proto.rss3_dcf.gelu_stored.bytes", g_stored.bytes);
  testing::check_pinned("proto.rss3_dcf.silu_times_stored.bytes", st_stored.bytes);
}

TEST_CASE("rss3 dcf: SiLU, GeLU and silu_times by a ring one-hot stay within their bounds of float64") {
  const std::size_t n = 1201;
  RealTensor x = RealTensor::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) x(i) = -12.0 + 24.0 * double(i) / double(n - 1);
  x(0) = -4095.0, x(n - 1) = 4095.0;  // outliers, as a trained MLP has
  const RealTensor y = mpcache::testing::random_real({n}, -5, 5, 404);
  FixedPoint fp;
  const RingTensor xe = fp.encode(x), ye = fp.encode(y);
  auto got = run_rss3(
      [&](Rss3& p) -> Task<std::vector<RingTensor>> {
        auto a = co_await share_of(p, 0, xe);
        auto b = co_await share_of(p, 1, ye);
        std::vector<RingTensor> out;
        out.push_back(co_await p.reveal(co_await ops::silu(p, a)));
        out.push_back(co_await p.reveal(co_await ops::gelu(p, a)));
        out.push_back(co_await p.reveal(co_await ops::silu_times(p, a, b)));
        co_return out;
      },
      dcf_options(12));
  const RealTensor silu = fp.decode(got.results[0][0]), gelu = fp.decode(got.results[0][1]),
                   silu_y = fp.decode(got.results[0][2]);
  double worst_s = 0, worst_g = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x(i), want_s = v / (1 + std::exp(-v)), want_g = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    worst_s = std::max(worst_s, std::fabs(silu(i) - want_s));
    worst_g = std::max(worst_g, std::fabs(gelu(i) - want_g));
    CHECK(std::fabs(silu(i) - want_s) <= 1e-3);
    CHECK(std::fabs(gelu(i) - want_g) <= 1e-3);
    CHECK(std::fabs(silu_y(i) - want_s * y(i)) <= 1e-3 * std::fabs(y(i)) + 0x1p-17 + 1e-6 * std::fabs(want_s * y(i)));
  }
  MESSAGE("dcf: SiLU max error " << worst_s << ", GeLU max error " << worst_g);
}
