#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"

using namespace mpcache;

TEST_CASE("fixed-point encode/decode is within half a unit in the last place") {
  for (int f : {0, 8, 18, 30}) {
    FixedPoint fp(f);
    RealTensor x = mpcache::testing::random_real({1000}, -1000.0, 1000.0, 7);
    RealTensor back = fp.decode(fp.encode(x));
    const double ulp = std::ldexp(1.0, -f);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(back(i) - x(i)) <= ulp / 2);
  }
}

TEST_CASE("fixed-point negative values are two's complement") {
  FixedPoint fp;
  CHECK(fp.frac_bits() == 18);
  CHECK(fp.encode(-1.0) == Ring(0) - (Ring(1) << 18));
  CHECK(fp.decode(fp.encode(-3.25)) == -3.25);
  CHECK(fp.encode(0.5) == Ring(1) << 17);
}

TEST_CASE("fixed-point rejects values it cannot represent") {
  FixedPoint fp(18);
  CHECK_THROWS_AS(fp.encode(std::nan("")), Error);
  CHECK_THROWS_AS(fp.encode(std::numeric_limits<double>::infinity()), Error);
  CHECK_THROWS_AS(fp.encode(std::ldexp(1.0, 46)), Error);  // 2^46 * 2^18 = 2^64
  CHECK_NOTHROW(fp.encode(std::ldexp(1.0, 44)));
  CHECK_THROWS_AS(FixedPoint(-1), Error);
  CHECK_THROWS_AS(FixedPoint(41), Error);
}
