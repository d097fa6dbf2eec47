#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"

using namespace mpcache;
using mpcache::testing::random_real;
using mpcache::testing::run_plain;
using mpcache::testing::run_rss3;

namespace {
// One piece of algorithm code, generic over the backend: y = (x*w + b) . x,
// with fixed-point truncation after each product.
template <Protocol P>
Task<RingTensor> affine_then_square(P& p, const RingTensor& x, const RingTensor& w,
                                    const RingTensor& b) {
  auto in = [&](PartyId owner, const RingTensor& v) {
    return p.input(owner, p.holds_input(owner) ? std::optional<RingTensor>(v) : std::nullopt,
                   shape_of(v));
  };
  auto xs = co_await in(0, x);
  auto ws = co_await in(1, w);
  auto h = co_await p.matmul_trunc(xs, ws);
  h = p.add_public(h, b);
  P sub = p.fork();
  auto y = co_await sub.mul_trunc(h, h);
  co_return co_await p.reveal(y);
}
}  // namespace

TEST_CASE("plain computes exact floor-truncated fixed-point results") {
  FixedPoint fp;
  const RingTensor x = fp.encode(random_real({1, 16}, -2, 2, 1));
  const RingTensor w = fp.encode(random_real({16, 4}, -2, 2, 2));
  const RingTensor b = fp.encode(random_real({1, 4}, -1, 1, 3));
  RingTensor got = run_plain([&](Plain& p) { return affine_then_square(p, x, w, b); });
  RingTensor h = ring_add(ring_shift_floor(ring_matmul(x, w), 18), b);
  CHECK(got == ring_shift_floor(ring_mul(h, h), 18));
}

TEST_CASE("rss3 and plain agree up to truncation's last-bit error, and match float64") {
  FixedPoint fp;
  const RealTensor xr = random_real({1, 32}, -2, 2, 4), wr = random_real({32, 8}, -1, 1, 5),
                           br = random_real({1, 8}, -1, 1, 6);
  const RingTensor x = fp.encode(xr), w = fp.encode(wr), b = fp.encode(br);
  RingTensor plain = run_plain([&](Plain& p) { return affine_then_square(p, x, w, b); });
  auto secure = run_rss3([&](Rss3& p) { return affine_then_square(p, x, w, b); });
  for (const auto& r : secure.results) CHECK(r == secure.results[0]);
  const RingTensor& s = secure.results[0];
  for (std::size_t j = 0; j < 8; ++j) {
    // h differs by at most 1 ulp, so h^2 by at most (2|h| + 3) ulp after both
    // truncations (carry of the cross term, rss3's own last bit).
    const double h = fp.decode(plain(0, j));
    const double diff = std::fabs(fp.decode(s(0, j)) - fp.decode(plain(0, j)));
    CHECK(diff <= (2 * std::fabs(h) + 3) * 0x1p-18);
    double want = br(0, j);
    for (std::size_t k = 0; k < 32; ++k) want += xr(0, k) * wr(k, j);
    CHECK(std::fabs(fp.decode(s(0, j)) - want * want) <= 1e-3);
  }
}

TEST_CASE("plain refuses a missing value or a wrong shape") {
  Scheduler s;
  Plain p;
  CHECK_THROWS_AS(sync_wait(s, p.input(0, std::nullopt, {2})), Error);
  CHECK_THROWS_AS(sync_wait(s, p.input(0, ring_zeros({3}), {2})), Error);
  CHECK_THROWS_AS(Plain(64), Error);
}

TEST_CASE("plain's truncation audit adds (|x|+1)/2^64 per element by call site, forks included") {
  Scheduler s;
  Plain p;
  auto audit = std::make_shared<TruncationAudit>();
  p.audit_truncations(audit);
  RingTensor a = ring_zeros({3}), b = ring_zeros({3});
  a(0) = Ring{1} << 40, a(1) = Ring{0} - (Ring{1} << 40), a(2) = 0;  // +2^40, -2^40, 0
  b(0) = b(1) = b(2) = Ring{1} << 10;
  const PlainShare x{a}, y{b};
  Plain child = p.fork();
  sync_wait(s, [&]() -> Task<void> {
    auto product = co_await p.mul_trunc(x, y, 18);  // |x y| = 2^50, 2^50, 0
    CHECK(product.value(1) == Ring{0} - (Ring{1} << 32));
    co_await child.truncate(x, 4);                  // 2^40, 2^40, 0
  }());
  REQUIRE(audit->sites.size() == 2);
  double total = 0;
  for (const auto& [where, site] : audit->sites) {
    CHECK(where.starts_with("plain_test.cpp:"));
    CHECK(site.calls == 1);
    CHECK(site.elements == 3);
    total += site.expected_failures;
  }
  CHECK(audit->expected_failures() == doctest::Approx(total));
  CHECK(total == doctest::Approx((2 * 0x1p50 + 3 + 2 * 0x1p40 + 3) * 0x1p-64));
  p.audit_truncations(nullptr);  // recording stops; the fork made before keeps its audit
  sync_wait(s, [&]() -> Task<void> { co_await p.truncate(x, 4); }());
  CHECK(audit->sites.size() == 2);
}
