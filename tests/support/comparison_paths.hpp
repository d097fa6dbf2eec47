// Test support: ops whose results rest on comparisons (argmax, ReLU, GeLU),
// run on logits with a tie for a row's maximum, so that a backend's two
// ways of comparing (circuit, dcf) can be checked against each other and
// the clear answers. Include after the `import` lines and parties.hpp.
#pragma once

namespace mpcache::testing {

// 3 x 37 fixed-point logits in [-8, 8); row 1's maximum 9.0 at indices 3 and 20.
inline RingTensor tied_logits() {
  const auto x = random_real({3, 37}, -8.0, 8.0, 5);
  RingTensor t = FixedPoint(default_frac_bits).encode(x);
  t(1, 20) = t(1, 3) = FixedPoint(default_frac_bits).encode(9.0);
  return t;
}

// {argmax value, argmax index, ReLU, GeLU}, revealed; fresh(p, x) gives x as
// an arithmetic result (add2: without its input mask).
template <Protocol P, class Fresh>
Task<std::vector<RingTensor>> comparison_results(P& p, const RingTensor& logits, Fresh fresh) {
  auto x = co_await share_of(p, 0, logits);
  auto best = co_await ops::argmax_last(p, fresh(p, x));
  auto negative = co_await ops::msb(p, fresh(p, x));
  auto relu = p.sub(x, co_await p.mul(negative, x));  // x - [x < 0] x, exact (no truncation)
  auto gelu = co_await ops::gelu(p, fresh(p, x));
  co_return std::vector<RingTensor>{co_await p.reveal(best.value), co_await p.reveal(best.index),
                                    co_await p.reveal(relu), co_await p.reveal(gelu)};
}

// d (dcf) against c (circuit) and the clear answers.
inline void check_comparison_results(const RingTensor& logits, const std::vector<RingTensor>& d,
                                     const std::vector<RingTensor>& c, std::int64_t gelu_apart = 64) {
  CHECK(d[0] == c[0]);
  CHECK(d[1] == c[1]);
  CHECK(d[2] == c[2]);
  for (std::size_t row = 0; row < 3; ++row) {  // the clear argmax, the lowest index on ties
    std::size_t best = 0;
    for (std::size_t j = 1; j < 37; ++j)
      if (static_cast<std::int64_t>(logits(row, j)) > static_cast<std::int64_t>(logits(row, best))) best = j;
    CHECK(d[1](row, 0) == best);
    CHECK(d[0](row, 0) == logits(row, best));
  }
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const auto v = static_cast<std::int64_t>(logits.data()[i]);
    CHECK(static_cast<std::int64_t>(d[2].data()[i]) == std::max<std::int64_t>(v, 0));
  }
  // GeLU's pieces are chosen by comparisons (identical in both runs); its
  // polynomials truncate, and exact truncation's result (floor or one more)
  // depends on the masks, which the dcf path draws differently: within
  // gelu_apart units (more where the paths take different pieces).
  for (std::size_t i = 0; i < logits.size(); ++i)
    CHECK(std::abs(static_cast<std::int64_t>(d[3].data()[i] - c[3].data()[i])) <= gelu_apart);
}

}  // namespace mpcache::testing
