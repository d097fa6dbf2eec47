#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"
#include "../support/add2_parties.hpp"
#include "../support/signed_edges.hpp"
#include "../support/comparison_paths.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using mpcache::testing::Add2OpCost;
using mpcache::testing::measure_add2;
using mpcache::testing::random_ring;
using mpcache::testing::run_add2;
using mpcache::testing::share_of;
using mpcache::testing::signed_edges;

static_assert(Protocol<Add2>);

namespace {
const Shape shapes[] = {Shape{1}, Shape{7}, Shape{3, 5}, Shape{2, 3, 4}};

std::optional<RingTensor> owned(const Add2& p, PartyId owner, const RingTensor& v) {
  return p.holds_input(owner) ? std::optional<RingTensor>(v) : std::nullopt;
}

// The same value without its input mask: an arithmetic result, as products
// see most operands.
Add2Share fresh(const Add2& p, const Add2Share& x) { return p.add(x, p.sub(x, x)); }

void check_within_one(const RingTensor& got, const RingTensor& floor_value) {
  REQUIRE(shape_of(got) == shape_of(floor_value));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Ring diff = got.data()[i] - floor_value.data()[i];
    CHECK((diff == 0 || diff == 1));
  }
}

RingTensor signed_values(std::initializer_list<std::int64_t> values) {
  RingTensor t = RingTensor::from_shape({values.size()});
  std::size_t i = 0;
  for (auto v : values) t.data()[i++] = static_cast<Ring>(v);
  return t;
}
}  // namespace

TEST_CASE("add2: input from either party, then reveal and reveal_to give the value; the dealer sees zeros") {
  for (const Shape& shape : shapes) {
    for (PartyId owner = 0; owner < 2; ++owner) {
      const RingTensor x = random_ring(shape, 11 + owner);
      auto run = run_add2([&](Add2& p) -> Task<std::array<RingTensor, 2>> {
        auto s = co_await p.input(owner, owned(p, owner, x), shape);
        auto all = co_await p.reveal(s);
        auto to_other = co_await p.reveal_to(1 - owner, s);
        co_return std::array<RingTensor, 2>{all, to_other ? *to_other : RingTensor{}};
      });
      CHECK(run.results[0][0] == x);
      CHECK(run.results[1][0] == x);
      CHECK(run.results[2][0] == ring_zeros(shape));
      CHECK(run.results[1 - owner][1] == x);
    }
  }
}

TEST_CASE("add2: neither party's share is the secret, the two add up to it") {
  const RingTensor x = random_ring({64}, 5);
  for (PartyId owner = 0; owner < 2; ++owner) {
    auto run = run_add2([&](Add2& p) -> Task<RingTensor> { co_return (co_await p.input(owner, owned(p, owner, x), {64})).value; });
    CHECK(run.results[0] != x);
    CHECK(run.results[1] != x);
    CHECK(ring_add(run.results[0], run.results[1]) == x);
  }
}

TEST_CASE("add2: the dealer holds no input and learns no output") {
  auto run = run_add2([&](Add2& p) -> Task<std::string> {
    std::string out;
    try {
      (void)co_await p.input(add2_dealer, std::nullopt, {2});
    } catch (const Error& e) {
      out = e.what();
    }
    try {
      (void)co_await p.reveal_to(add2_dealer, Add2Share{ring_zeros({2}), nullptr});
    } catch (const Error& e) {
      out += " | " + std::string(e.what());
    }
    co_return out;
  });
  for (const auto& message : run.results) {
    CHECK(message.find("dealer, which holds no input") != std::string::npos);
    CHECK(message.find("dealer, which learns no output") != std::string::npos);
  }
}

TEST_CASE("add2: products are exact modulo 2^64, with input (fixed-mask) and fresh operands, reused") {
  const RingTensor a = random_ring({6}, 1), b = random_ring({6}, 2);
  const RingTensor m = random_ring({3, 4}, 3), w = random_ring({4, 5}, 4);
  auto run = run_add2([&](Add2& p) -> Task<std::vector<RingTensor>> {
    auto sa = co_await share_of(p, 0, a);
    auto sb = co_await share_of(p, 1, b);
    auto sm = co_await share_of(p, 0, m);
    auto sw = co_await share_of(p, 1, w);
    std::vector<RingTensor> out;
    for (int reuse = 0; reuse < 2; ++reuse) {  // the fixed masks serve twice
      out.push_back(co_await p.reveal(co_await p.mul(sa, sb)));
      out.push_back(co_await p.reveal(co_await p.mul(fresh(p, sa), sb)));
      out.push_back(co_await p.reveal(co_await p.mul(sa, fresh(p, sb))));
      out.push_back(co_await p.reveal(co_await p.mul(fresh(p, sa), fresh(p, sb))));
      out.push_back(co_await p.reveal(co_await p.matmul(sm, sw)));
      out.push_back(co_await p.reveal(co_await p.matmul(fresh(p, sm), sw)));
      out.push_back(co_await p.reveal(co_await p.matmul(sm, fresh(p, sw))));
      out.push_back(co_await p.reveal(co_await p.matmul(fresh(p, sm), fresh(p, sw))));
    }
    // A structural transform keeps the input's mask: a slice of w.
    auto column = Add2::apply(sw, [](const RingTensor& t) { return ring_reshape(ring_slice_last(t, 1, 2), {4, 1}); });
    REQUIRE(column.fixed);
    out.push_back(co_await p.reveal(co_await p.matmul(sm, column)));
    co_return out;
  });
  const RingTensor ab = ring_mul(a, b), mw = ring_matmul(m, w);
  const auto& got = run.results[0];
  REQUIRE(got.size() == 17);
  for (int i = 0; i < 16; ++i) CHECK(got[static_cast<std::size_t>(i)] == (i % 8 < 4 ? ab : mw));
  CHECK(got[16] == ring_matmul(m, ring_reshape(ring_slice_last(w, 1, 2), {4, 1})));
  CHECK(run.results[1] == got);
}

TEST_CASE("add2: exact truncation is floor(x / 2^d) or one more for |x| < 2^62, edges included") {
  constexpr std::int64_t edge = std::int64_t{1} << 62;
  RingTensor x = signed_values({0, 1, -1, 2, -2, edge - 1, -edge, -edge + 1, 12345678, -12345678});
  x = ring_concat_last(x, ring_shift_floor(random_ring({200}, 9), 2));  // random values in [-2^61, 2^61)
  for (int bits : {1, 18, 40, 62}) {
    auto run = run_add2([&](Add2& p) -> Task<RingTensor> {
      auto s = co_await share_of(p, 0, x);
      co_return co_await p.reveal(co_await p.truncate(fresh(p, s), bits));
    }, {.exact_truncation = true, .insecure_seed = static_cast<std::uint64_t>(bits)});
    check_within_one(run.results[0], ring_shift_floor(x, bits));
  }
}

TEST_CASE("add2: probabilistic truncation and fixed-point products on small values") {
  const RingTensor x = ring_shift_floor(random_ring({500}, 4), 20);  // |x| < 2^43
  auto run = run_add2([&](Add2& p) -> Task<RingTensor> {
    auto s = co_await share_of(p, 1, x);
    co_return co_await p.reveal(co_await p.truncate(s, 18));
  });
  check_within_one(run.results[0], ring_shift_floor(x, 18));

  const FixedPoint fp(default_frac_bits);
  const RealTensor u = {1.5, -2.25, 3.0, -0.125}, v = {2.0, 4.0, -1.5, 8.0};
  for (bool exact : {false, true}) {
    auto product = run_add2([&](Add2& p) -> Task<RingTensor> {
      auto su = co_await share_of(p, 0, fp.encode(u));
      auto sv = co_await share_of(p, 1, fp.encode(v));
      co_return co_await p.reveal(co_await p.mul_trunc(su, sv));
    }, {.exact_truncation = exact, .insecure_seed = 5});
    const auto got = fp.decode(product.results[0]);
    for (std::size_t i = 0; i < 4; ++i) CHECK(got(i) == doctest::Approx(u(i) * v(i)).epsilon(1e-4));
  }
}

TEST_CASE("add2: boolean layer against clear text: to_bits, AND, B2A, bit_dot, reveal_bits") {
  const RingTensor x = random_ring({4, 16}, 21), y = random_ring({4, 16}, 22);
  const RingTensor small = ring_shift_floor(random_ring({4, 16}, 23), 30);
  for (int width : {1, 2, 17, 33, 64}) {
    auto run = run_add2([&](Add2& p) -> Task<RingTensor> {
      auto s = co_await share_of(p, 0, x);
      co_return co_await p.reveal_bits(co_await p.to_bits(fresh(p, s), width));
    });
    RingTensor want = x;
    if (width < 64)
      for (auto& v : want) v &= (Ring{1} << width) - 1;
    CHECK(run.results[0] == want);
  }
  auto run = run_add2([&](Add2& p) -> Task<std::vector<RingTensor>> {
    auto sx = co_await share_of(p, 0, x);
    auto sy = co_await share_of(p, 1, y);
    auto bx = co_await p.to_bits(sx), by = co_await p.to_bits(sy);
    std::vector<RingTensor> out;
    out.push_back(co_await p.reveal_bits(co_await p.bits_and(bx, by)));
    out.push_back(co_await p.reveal_bits(p.bits_xor_public(p.bits_xor(bx, by), y)));
    out.push_back(co_await p.reveal(co_await p.bit_to_arith(bx)));
    auto ssmall = co_await share_of(p, 1, small);
    out.push_back(co_await p.reveal(co_await p.bit_dot(by, ssmall)));
    co_return out;
  });
  const auto& got = run.results[1];
  CHECK(got[0] == ring_and(x, y));
  CHECK(got[1] == x);
  RingTensor bit = x;
  for (auto& v : bit) v &= 1;
  CHECK(got[2] == bit);
  RingTensor selected = small;
  for (std::size_t i = 0; i < selected.size(); ++i) selected.data()[i] *= y.data()[i] & 1;
  CHECK(got[3] == ring_reshape(ring_weighted_sum_last(selected, std::vector<Ring>(16, 1)), {4, 1}));
}

TEST_CASE("add2: msb_bits is the sign of a mod 2^w for every width, edges included") {
  for (int width : {2, 3, 27, 33, 64}) {
    const std::int64_t top = width == 64 ? std::numeric_limits<std::int64_t>::max() : (std::int64_t{1} << (width - 1)) - 1;
    RingTensor x = signed_values({0, 1, -1, top, -top - 1, top - 1, -top, std::min<std::int64_t>(2, top), -2});
    RingTensor r = random_ring({150}, 40 + static_cast<std::uint64_t>(width));  // 159 elements: not a multiple of 64
    for (auto& v : r) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> (64 - width));
    x = ring_concat_last(x, r);
    auto run = run_add2([&](Add2& p) -> Task<RingTensor> {
      auto s = co_await share_of(p, 1, x);
      co_return co_await p.reveal_bits(co_await p.msb_bits(fresh(p, s), width));
    });
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("width " << width << ", element " << i << ", value " << static_cast<std::int64_t>(x(i)));
      CHECK(run.results[0](i) == (static_cast<std::int64_t>(x(i)) < 0 ? 1u : 0u));
    }
  }
}

TEST_CASE("add2: online and offline costs are exact") {
  constexpr std::size_t n = 1000;
  const RingTensor a = random_ring({n}, 1), b = random_ring({n}, 2);
  auto cost = [&](auto op, Add2Options options = {.exact_truncation = false, .insecure_seed = 3}) {
    return measure_add2({a, b}, op, options);
  };
  auto check = [](const Add2OpCost& c, std::uint64_t rounds, std::uint64_t bytes, std::uint64_t dealer) {
    CHECK(c.rounds == rounds);
    CHECK(c.bytes[0] == bytes);
    CHECK(c.bytes[1] == bytes);
    CHECK(c.dealer_bytes == dealer);
  };
  // Two fresh operands: both masked shares go out; one correction word per output.
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.mul(fresh(p, s[0]), fresh(p, s[1])); }), 1, 16 * n, 8 * n);
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.mul(s[0], fresh(p, s[1])); }), 1, 8 * n, 8 * n);
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.mul(s[0], s[1]); }), 0, 0, 8 * n);
  // A (10, 100) activation times a (100, 10) shared input: only the activation is opened.
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> {
          auto left = Add2::apply(fresh(p, s[0]), [](const RingTensor& t) { return ring_reshape(t, {10, 100}); });
          auto right = Add2::apply(s[1], [](const RingTensor& t) { return ring_reshape(t, {100, 10}); });
          co_return co_await p.matmul(left, right);
        }),
        1, 8 * n, 8 * 100);
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.truncate(fresh(p, s[0]), 18); }), 0, 0, 0);
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.truncate(fresh(p, s[0]), 18); }, {.exact_truncation = true, .insecure_seed = 3}),
        1, 8 * n, 16 * n);
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.mul_trunc(fresh(p, s[0]), fresh(p, s[1])); },
             {.exact_truncation = true, .insecure_seed = 3}),
        2, 24 * n, 24 * n);
  // A2B: the generate gate, then Kogge-Stone levels of two gates (one in the last).
  check(cost([](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.to_bits(s[0], 64); }), 7, (2 + 5 * 4 + 2) * 8 * n, (1 + 5 * 2 + 1) * 8 * n);
  check(cost([](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.to_bits(s[0], 16); }), 5, (2 + 3 * 4 + 2) * 8 * n, (1 + 3 * 2 + 1) * 8 * n);
  check(cost([](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.bits_and(Add2Bits{s[0].value}, Add2Bits{s[1].value}); }),
        1, 16 * n, 8 * n);
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.bit_to_arith(Add2Bits{s[0].value}); }), 1, n, 8 * n);
  // msb_bits on packed planes, n = 1000 -> 16 words per plane: m planes
  // (the private AND), then 2 words per gate of the tree; the dealer sends
  // one word per plane and per gate. w = 64: m = 63, 118 gates; w = 27: m =
  // 26, 45 gates.
  const std::uint64_t words = (n + 63) / 64;
  check(cost([](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.msb_bits(s[0], 64); }), 7,
        (63 + 2 * 118) * words * 8, (63 + 118) * words * 8);
  check(cost([](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.msb_bits(s[0], 27); }), 6,
        (26 + 2 * 45) * words * 8, (26 + 45) * words * 8);
  check(cost([](Add2& p, auto& s) -> Task<Add2Share> {
          auto shape = [](const RingTensor& t) { return ring_reshape(t, {100, 10}); };
          co_return co_await p.bit_dot(Add2Bits{shape(s[0].value)}, Add2::apply(s[1], shape));
        }),
        1, 9 * n, 16 * n);
}

// Add2Costs is what ops plan top-k and the argmax tournament with: each
// building block as measured (online: parties 0 and 1; the dealer sends
// nothing online).
TEST_CASE("add2: the cost model's building blocks cost what they measure") {
  constexpr std::size_t n = 1000;
  const RingTensor a = random_ring({n}, 1), b = random_ring({n}, 2);
  auto same = [](const Add2OpCost& measured, const OpCost& model) {
    CHECK(measured.rounds == model.rounds);
    CHECK(measured.bytes[0] == model.bytes[0]);
    CHECK(measured.bytes[1] == model.bytes[1]);
    CHECK(model.bytes[2] == 0);
  };
  auto cost = [&](auto op) { return measure_add2({a, b}, op); };
  same(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.mul(fresh(p, s[0]), fresh(p, s[1])); }),
       Add2Costs::mul(n));
  same(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.truncate(fresh(p, s[0]), 18); }),
       Add2Costs::truncate(n));
  same(cost([](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.bits_and(Add2Bits{s[0].value}, Add2Bits{s[1].value}); }),
       Add2Costs::bits_and(n));
  for (int width : {2, 5, 16, 64}) {
    INFO("to_bits width " << width);
    same(cost([width](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.to_bits(s[0], width); }),
         Add2Costs::to_bits(width, n));
  }
  same(cost([](Add2& p, auto& s) -> Task<Add2Share> { co_return co_await p.bit_to_arith(Add2Bits{s[0].value}); }),
       Add2Costs::bit_to_arith(n));
  same(cost([](Add2& p, auto& s) -> Task<Add2Share> {
         auto shape = [](const RingTensor& t) { return ring_reshape(t, {100, 10}); };
         co_return co_await p.bit_dot(Add2Bits{shape(s[0].value)}, Add2::apply(s[1], shape));
       }),
       Add2Costs::bit_dot(n, 10));
  for (int width : {3, 27, 40, 64}) {
    INFO("msb_bits width " << width);
    same(cost([width](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.msb_bits(s[0], width); }),
         Add2Costs::msb_bits(width, n, 0));
  }
}

TEST_CASE("add2: a dealer that deals for another program is refused by name") {
  auto run = run_add2([&](Add2& p) -> Task<std::string> {
    // The dealer multiplies 3 elements where the parties multiply 4.
    const std::size_t size = p.is_dealer() ? 3 : 4;
    const RingTensor v = random_ring({size}, 1);
    try {
      auto s = co_await p.input(0, owned(p, 0, v), {size});
      (void)co_await p.mul(fresh(p, s), fresh(p, s));
    } catch (const Error& e) {
      co_return e.what();
    }
    co_return "";
  });
  CHECK(run.results[1].find("the dealer (party 2) sent 24 bytes, expected 32") != std::string::npos);
}

TEST_CASE("add2: parties whose truncation differs from the dealer's are refused at setup") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
    try {
      (void)co_await Add2Party::setup(network.endpoint(id), {.exact_truncation = id == 1});
    } catch (const Error& e) {
      co_return e.what();
    }
    co_return "";
  });
  CHECK(results[0].empty());
  CHECK(results[1].find("the dealer (party 2) uses 18 fraction bits, probabilistic truncation, circuit comparisons, "
                        "this party 18 fraction bits, exact truncation, circuit comparisons") != std::string::npos);
}

namespace {

// comparisons = dcf: msb_bits from the dealer's DCF keys (one online round).
constexpr Add2Options dcf_options(std::uint64_t seed = 7) {
  return {.comparisons = Add2Comparisons::dcf, .insecure_seed = seed};
}

}  // namespace

TEST_CASE("add2 dcf: msb_bits is the sign on edge and random values at every width tested") {
  for (const int width : {2, 3, 8, 17, 27, 33, 63, 64}) {
    const RingTensor x = signed_edges(width, 40 + static_cast<std::uint64_t>(width));
    auto sign = [&](Add2Options options) {
      return run_add2(
          [&](Add2& p) -> Task<RingTensor> {
            auto s = co_await share_of(p, 1, x);
            co_return co_await p.reveal_bits(co_await p.msb_bits(fresh(p, s), width));
          },
          options);
    };
    const auto dcf = sign(dcf_options()), circuit = sign({.insecure_seed = 7});
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("width " << width << ", element " << i << ", value " << static_cast<std::int64_t>(x(i)));
      CHECK(dcf.results[0](i) == (static_cast<std::int64_t>(x(i)) < 0 ? 1u : 0u));
      CHECK(dcf.results[0](i) == circuit.results[0](i));
    }
  }
}

TEST_CASE("add2 dcf: less_than agrees with the clear comparison") {
  for (const int width : {5, 27, 64}) {
    // a - b = d at the edges of the w-bit range (a = d + b, b anything:
    // the comparison reads a - b mod 2^w).
    const RingTensor d = signed_edges(width, 7 + static_cast<std::uint64_t>(width));
    const RingTensor b = random_ring(shape_of(d), 9);
    const RingTensor a = ring_add(d, b);
    auto run = run_add2(
        [&](Add2& p) -> Task<RingTensor> {
          auto sa = co_await share_of(p, 0, a);
          auto sb = co_await share_of(p, 1, b);
          co_return co_await p.reveal(co_await ops::less_than(p, sa, sb, width));
        },
        dcf_options(11));
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("width " << width << ", a - b " << static_cast<std::int64_t>(d(i)));
      CHECK(run.results[0](i) == (static_cast<std::int64_t>(d(i)) < 0 ? 1u : 0u));
    }
  }
}

TEST_CASE("add2 dcf: msb_bits costs one round, ceil(w/8) bytes per element, and the dealer's keys") {
  constexpr std::size_t n = 1000;
  const RingTensor a = random_ring({n}, 1);
  for (const int width : {2, 27, 40, 64}) {
    INFO("width " << width);
    const Add2OpCost c = measure_add2(
        {a}, [width](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.msb_bits(fresh(p, s[0]), width); },
        dcf_options(3));
    const std::uint64_t online = static_cast<std::uint64_t>((width + 7) / 8) * n;
    CHECK(c.rounds == 1);
    CHECK(c.bytes[0] == online);
    CHECK(c.bytes[1] == online);
    // Both parties get the DCF corrections; party 1 also its shares of msb(r), a bit each.
    CHECK(c.dealer_bytes == 2 * dcf_correction_bytes(width - 1, 1, n) + n / 8);
    const OpCost model = Add2DcfCosts::msb_bits(width, n, 0);
    CHECK(model.rounds == c.rounds);
    CHECK(model.bytes[0] == c.bytes[0]);
    CHECK(model.bytes[1] == c.bytes[1]);
    CHECK(model.bytes[2] == 0);
  }
  // Pinned: w = 64 is 8 bytes each way per element and 2032 dealt bytes
  // (1016 to each party) plus a bit; w = 27: 4 bytes and 838.75 dealt.
  testing::check_pinned("proto.add2_dcf.msb_w64.bytes", Add2DcfCosts::msb_bits(64, n, 0).bytes[0]);
  const std::uint64_t dealt64 = 2 * dcf_correction_bytes(63, 1, n) + n / 8;
  const std::uint64_t dealt27 = 2 * dcf_correction_bytes(26, 1, n) + n / 8;
  testing::check_pinned("proto.add2_dcf.dealt_w64_w27", std::vector<std::uint64_t>{dealt64, dealt27});
  // Everything else costs what the circuit model says.
  CHECK(Add2DcfCosts::mul(n).bytes[0] == Add2Costs::mul(n).bytes[0]);
  static_assert(CostModel<Add2DcfCosts>);
}

TEST_CASE("add2 dcf: argmax, ReLU and GeLU give the circuit path's results") {
  const RingTensor logits = mpcache::testing::tied_logits();
  auto run = [&](Add2Comparisons comparisons) {
    return run_add2([&](Add2& p) { return mpcache::testing::comparison_results(p, logits, fresh); },
                    {.exact_truncation = true, .comparisons = comparisons, .insecure_seed = 21});
  };
  mpcache::testing::check_comparison_results(logits, run(Add2Comparisons::dcf).results[0],
                                             run(Add2Comparisons::circuit).results[0]);
}

TEST_CASE("add2: parties whose comparisons differ from the dealer's are refused at setup") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
    try {
      (void)co_await Add2Party::setup(network.endpoint(id),
                                      {.comparisons = id == 0 ? Add2Comparisons::dcf : Add2Comparisons::circuit});
    } catch (const Error& e) {
      co_return e.what();
    }
    co_return "";
  });
  CHECK(results[0].find("the dealer (party 2) uses 18 fraction bits, exact truncation, circuit comparisons, "
                        "this party 18 fraction bits, exact truncation, dcf comparisons") != std::string::npos);
  CHECK(results[1].empty());
}
