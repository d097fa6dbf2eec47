#include "prelude.hpp"
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"

#include "../support/run_task.hpp"

using namespace mpcache;

static_assert(Protocol<Ref>);
static_assert(ExactReals<Ref>);
static_assert(!ExactReals<Plain>);
static_assert(CostModel<Rss3Costs> && CostModel<Add2Costs>);

namespace {
RealTensor reals(std::initializer_list<double> v) {
  RealTensor out = RealTensor::from_shape({v.size()});
  std::copy(v.begin(), v.end(), out.begin());
  return out;
}
using testing::run;
}  // namespace

TEST_SUITE("ref") {
  TEST_CASE("arithmetic is exact float64 at the fixed-point scale") {
    Ref p;
    const auto a = p.from_real(RealTensor{{0.1, -2.5}, {3.0, 1e-7}});
    const auto b = p.from_real(RealTensor{{7.0, 0.3}, {-1.25, 2.0}});
    const auto prod = p.to_real(run(p.mul_trunc(a, b)));
    CHECK(prod(0, 0) == doctest::Approx(0.7).epsilon(1e-15));
    CHECK(prod(1, 1) == doctest::Approx(2e-7).epsilon(1e-12));
    const auto mm = p.to_real(run(p.matmul_trunc(a, b)));
    CHECK(mm(0, 0) == doctest::Approx(0.1 * 7.0 + -2.5 * -1.25).epsilon(1e-15));
    // A public fixed-point constant is read as a signed code.
    const FixedPoint fp(p.frac_bits());
    const auto shifted = p.to_real(p.add_public(a, fp.encode(RealTensor{{-1.0, 1.0}, {0, 0}})));
    CHECK(shifted(0, 0) == doctest::Approx(-0.9).epsilon(1e-12));
  }

  TEST_CASE("layout transforms keep about 46 significant bits") {
    Ref p;
    const auto a = p.from_real(RealTensor{{1.0 / 3, 1234.5678901, -1e-6}});
    const auto sliced = p.to_real(ops::slice_last<Ref>(a, 1, 3));
    REQUIRE(sliced.size() == 2);
    CHECK(std::abs(sliced(0, 0) - 1234.5678901) < 1e-9);
    CHECK(std::abs(sliced(0, 1) + 1e-6) < 1e-9);
    const auto total = p.to_real(ops::sum_last<Ref>(a));
    CHECK(std::abs(total(0, 0) - (1.0 / 3 + 1234.5678901 - 1e-6)) < 1e-9);
  }

  TEST_CASE("native non-linear ops are libm") {
    Ref p;
    const auto x = p.from_real(RealTensor{-13.0, -1.0, -0.001, 0.0});
    const auto e = p.to_real(run(ops::exp_neg(p, x)));
    for (std::size_t i = 0; i < 4; ++i) CHECK(e(i) == doctest::Approx(std::exp(p.to_real(x)(i))).epsilon(1e-14));
    const auto y = p.from_real(RealTensor{0.01, 1.0, 3000.0});
    CHECK(p.to_real(run(ops::reciprocal(p, y)))(2) == doctest::Approx(1 / 3000.0).epsilon(1e-14));
    CHECK(p.to_real(run(ops::rsqrt(p, y)))(0) == doctest::Approx(10.0).epsilon(1e-14));
    const auto s = p.to_real(run(ops::silu(p, x)));
    CHECK(s(1) == doctest::Approx(-1.0 / (1 + std::exp(1.0))).epsilon(1e-14));
  }

  TEST_CASE("softmax on ref matches float64, plain agrees within fixed-point error") {
    const auto xs = testing::random_real({3, 50}, -6.0, 6.0, 17);
    Ref r;
    const auto ref = r.to_real(run(ops::softmax_last(r, r.from_real(xs))));
    for (std::size_t i = 0; i < 3; ++i) {
      double m = -1e300, sum = 0;
      for (std::size_t j = 0; j < 50; ++j) m = std::max(m, xs(i, j));
      for (std::size_t j = 0; j < 50; ++j) sum += std::exp(xs(i, j) - m);
      for (std::size_t j = 0; j < 50; ++j)
        CHECK(ref(i, j) == doctest::Approx(std::exp(xs(i, j) - m) / sum).epsilon(1e-12));
    }
    Plain p;
    const FixedPoint fp(p.frac_bits());
    const auto plain = fp.decode(run(ops::softmax_last(p, PlainShare{fp.encode(xs)})).value);
    CHECK(testing::max_abs_diff(plain, ref) < 4e-3);
  }

  TEST_CASE("top-k, argmax and one-hot agree with plain, ties by index") {
    const RealTensor v = reals({3, 9, 9, -1, 4, 9});
    Ref r;
    Plain p;
    const FixedPoint fp(p.frac_bits());
    const auto tr = run(ops::topk(r, r.from_real(v), 4));
    const auto tp = run(ops::topk(p, PlainShare{fp.encode(v)}, 4));
    CHECK(ring_to_real(tp.indices.value) == tr.indices.value);
    CHECK(tr.indices.value == reals({1, 2, 5, 4}));
    const auto am = run(ops::argmax_last(r, r.from_real(v)));
    CHECK(am.index.value(0) == 1.0);
    const auto oh_r = run(ops::one_hot(r, tr.indices, 6));
    const auto oh_p = run(ops::one_hot(p, tp.indices, 6));
    CHECK(ring_to_real(oh_p.value) == oh_r.value);
    // less_than through msb, natively.
    const auto lt = run(ops::less_than(r, r.from_real(reals({1, 2})), r.from_real(reals({2, 1}))));
    CHECK(lt.value == reals({1, 0}));
  }

  TEST_CASE("shape errors name the operation") {
    Ref p;
    CHECK_THROWS_WITH_AS(p.add(p.from_real(reals({1, 2})), p.from_real(reals({1}))),
                         doctest::Contains("ref add"), Error);
    CHECK_THROWS_WITH_AS(run(p.matmul(p.from_real(RealTensor::zeros({2, 3})),
                                            p.from_real(RealTensor::zeros({2, 3})))),
                         doctest::Contains("do not chain"), Error);
  }
}
