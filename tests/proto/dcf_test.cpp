#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.proto;

using namespace mpcache;

namespace {

Ring mask_of(int bits) { return bits >= 64 ? ~Ring{0} : (Ring{1} << bits) - 1; }

std::vector<DcfSeed> random_roots(std::size_t n, std::uint64_t seed) {
  const RingTensor words = ring_sample({2 * n}, seed);
  std::vector<DcfSeed> roots(n);
  for (std::size_t k = 0; k < n; ++k) roots[k] = {words.data()[2 * k], words.data()[2 * k + 1]};
  return roots;
}

// Keys for every (alpha_k, x_k), evaluated by both parties: the outputs must
// add up to beta [x_k < alpha_k] mod 2^out_bits, and each serialised key
// batch must read back to the same outputs.
void check_pairs(int in_bits, int out_bits, Ring beta, const std::vector<Ring>& alpha, const std::vector<Ring>& x) {
  const std::size_t n = alpha.size();
  const auto root0 = random_roots(n, 100 + static_cast<std::uint64_t>(in_bits)),
             root1 = random_roots(n, 200 + static_cast<std::uint64_t>(out_bits));
  const DcfCorrections keys = dcf_generate(in_bits, out_bits, alpha, beta, root0, root1);
  const auto bytes = dcf_serialize(keys);
  REQUIRE(bytes.size() == dcf_correction_bytes(in_bits, out_bits, n));
  const DcfCorrections read = dcf_deserialize(bytes, in_bits, out_bits, n, "test");
  const auto y0 = dcf_evaluate(0, read, root0, x), y1 = dcf_evaluate(1, keys, root1, x);
  const Ring mask = mask_of(out_bits);
  for (std::size_t k = 0; k < n; ++k) {
    INFO("w " << in_bits << ", out " << out_bits << ", alpha " << alpha[k] << ", x " << x[k]);
    CHECK(y0[k] <= mask);
    CHECK(y1[k] <= mask);
    CHECK(((y0[k] + y1[k]) & mask) == (x[k] < alpha[k] ? beta & mask : 0));
  }
}

}  // namespace

TEST_CASE("dcf: shares add up to beta [x < alpha] for every pair at small widths") {
  for (int w = 1; w <= 5; ++w)
    for (const int out_bits : {1, 3, 64}) {
      std::vector<Ring> alpha, x;
      for (Ring a = 0; a <= mask_of(w); ++a)
        for (Ring v = 0; v <= mask_of(w); ++v) {
          alpha.push_back(a);
          x.push_back(v);
        }
      check_pairs(w, out_bits, out_bits == 1 ? 1 : 0xDEADBEEFCAFEF00Dull, alpha, x);
    }
}

TEST_CASE("dcf: edge and random thresholds and inputs at wide widths") {
  for (const int w : {7, 8, 16, 26, 31, 32, 63, 64})
    for (const int out_bits : {1, 16, 64}) {
      const Ring top = mask_of(w), half = Ring{1} << (w - 1);
      const RingTensor random = ring_sample({24}, 300 + static_cast<std::uint64_t>(w));
      std::vector<Ring> edges{0, top, half, half - 1, 1, top - 1};
      for (std::size_t i = 0; i < 4; ++i) edges.push_back(random.data()[i] & top);
      std::vector<Ring> alpha, x;
      for (const Ring a : edges) {
        std::vector<Ring> inputs = edges;
        // Next to the threshold, where the comparison flips.
        inputs.push_back(a);
        inputs.push_back((a - 1) & top);
        inputs.push_back((a + 1) & top);
        for (std::size_t i = 4; i < 24; ++i) inputs.push_back(random.data()[i] & top);
        for (const Ring v : inputs) {
          alpha.push_back(a);
          x.push_back(v);
        }
      }
      check_pairs(w, out_bits, out_bits == 1 ? 1 : 0x0123456789ABCDEFull, alpha, x);
    }
}

TEST_CASE("dcf: key sizes are exact") {
  // 16 bytes per level (seed correction, control bits in its low two bits)
  // and out_bits per level and once more at the leaf, packed across keys.
  CHECK(dcf_correction_bytes(63, 1, 1) == 63 * 16 + 8);     // 1016: add2's msb at w = 64
  CHECK(dcf_correction_bytes(26, 1, 1000) == 26 * 16 * 1000 + 27 * 1000 / 8);  // 419,375: w = 27
  CHECK(dcf_correction_bytes(64, 64, 1) == 64 * 16 + 65 * 8);
  CHECK(dcf_correction_bytes(5, 3, 3) == 5 * 16 * 3 + (3 * 6 * 3 + 7) / 8);
  CHECK(dcf_key_bytes(63, 1, 1) == 16 + 1016);  // a party's key: its root too
  // Narrower inputs, smaller keys.
  for (int w = 2; w <= 64; ++w) CHECK(dcf_correction_bytes(w - 1, 1, 64) < dcf_correction_bytes(w, 1, 64));
  const auto roots = random_roots(3, 1);
  const std::vector<Ring> alpha{1, 2, 3};
  CHECK(dcf_serialize(dcf_generate(5, 3, alpha, 1, roots, roots)).size() == dcf_correction_bytes(5, 3, 3));
}

TEST_CASE("dcf: bad input is refused with a clear error") {
  const auto roots = random_roots(2, 2);
  const std::vector<Ring> alpha{3, 16};
  CHECK_THROWS_WITH_AS(dcf_generate(4, 1, alpha, 1, roots, roots), doctest::Contains("dcf_generate: alpha[1] = 16 does not fit in 4 bits"),
                       Error);
  CHECK_THROWS_WITH_AS(dcf_generate(0, 1, alpha, 1, roots, roots), doctest::Contains("dcf_generate: input width 0 is outside [1, 64]"),
                       Error);
  CHECK_THROWS_WITH_AS(dcf_generate(8, 65, alpha, 1, roots, roots), doctest::Contains("dcf_generate: output width 65 is outside [1, 64]"),
                       Error);
  const DcfCorrections keys = dcf_generate(8, 1, alpha, 1, roots, roots);
  const std::vector<Ring> x{1, 256};
  CHECK_THROWS_WITH_AS(dcf_evaluate(0, keys, roots, x), doctest::Contains("dcf_evaluate: x[1] = 256 does not fit in 8 bits"), Error);
  CHECK_THROWS_WITH_AS(dcf_evaluate(2, keys, roots, alpha), doctest::Contains("dcf_evaluate: party 2 holds no key (0 or 1)"), Error);
  auto bytes = dcf_serialize(keys);
  bytes.pop_back();
  CHECK_THROWS_WITH_AS(dcf_deserialize(bytes, 8, 1, 2, "the dealer"),
                       doctest::Contains("the dealer sent 258 bytes of DCF keys, expected 259 for 2 keys of 8 input and 1 output bits"),
                       Error);
}

TEST_CASE("dcf: a payload per key (+1 or -1 in Z_2^64, as rss3's arithmetic comparisons deal)") {
  for (const int w : {1, 3, 26, 63}) {
    const Ring top = mask_of(w);
    const RingTensor random = ring_sample({64}, 400 + static_cast<std::uint64_t>(w));
    std::vector<Ring> alpha, x, beta;
    for (std::size_t k = 0; k < 64; ++k) {
      alpha.push_back(k < 4 ? (k % 2 ? top : 0) : random.data()[k] & top);
      x.push_back(k < 8 ? alpha.back() - (k % 2) * (alpha.back() > 0) : (random.data()[k] >> 7) & top);
      beta.push_back((random.data()[k] >> 3) & 1 ? Ring{1} : ~Ring{0});
    }
    const auto root0 = random_roots(64, 11), root1 = random_roots(64, 12);
    const DcfCorrections keys = dcf_generate(w, 64, alpha, beta, root0, root1);
    CHECK(dcf_serialize(keys).size() == dcf_correction_bytes(w, 64, 64));
    const auto y0 = dcf_evaluate(0, keys, root0, x), y1 = dcf_evaluate(1, keys, root1, x);
    for (std::size_t k = 0; k < 64; ++k) {
      INFO("w " << w << ", alpha " << alpha[k] << ", x " << x[k] << ", beta " << static_cast<std::int64_t>(beta[k]));
      CHECK(y0[k] + y1[k] == (x[k] < alpha[k] ? beta[k] : 0));
    }
  }
  const auto roots = random_roots(3, 2);
  const std::vector<Ring> alpha{1, 2, 3}, two{1, 1};
  CHECK_THROWS_WITH_AS(dcf_generate(4, 64, alpha, two, roots, roots),
                       doctest::Contains("dcf_generate: 2 payloads for 3 thresholds (give 1 or one per threshold)"), Error);
}

TEST_CASE("dcf: serialised values are a little-endian bit stream, whole or by range, at every width") {
  // The reference: bit j of value i at stream bit i * out_bits + j, after
  // the seeds; byte b holds stream bits 8b..8b+7, low bit first.
  for (int out_bits : {1, 3, 7, 8, 27, 63, 64}) {
    const int in_bits = 5;
    const std::size_t n = 37;
    DcfCorrections keys{in_bits, out_bits, n, std::vector<DcfSeed>(in_bits * n), std::vector<Ring>((in_bits + 1) * n)};
    const RingTensor words = ring_sample({keys.values.size() + 2 * keys.seeds.size()}, 77 + out_bits);
    for (std::size_t i = 0; i < keys.values.size(); ++i) keys.values[i] = words.data()[i] & mask_of(out_bits);
    for (std::size_t i = 0; i < keys.seeds.size(); ++i)
      keys.seeds[i] = {words.data()[keys.values.size() + 2 * i], words.data()[keys.values.size() + 2 * i + 1]};
    const auto bytes = dcf_serialize(keys);
    INFO("out_bits " << out_bits);
    REQUIRE(bytes.size() == dcf_correction_bytes(in_bits, out_bits, n));
    std::vector<std::byte> expected(bytes.size());
    std::memcpy(expected.data(), keys.seeds.data(), keys.seeds.size() * sizeof(DcfSeed));
    std::size_t bit = 8 * keys.seeds.size() * sizeof(DcfSeed);
    for (const Ring v : keys.values)
      for (int j = 0; j < out_bits; ++j, ++bit)
        if ((v >> j) & 1) expected[bit / 8] |= std::byte{1} << (bit % 8);
    CHECK(bytes == expected);
    const DcfCorrections whole = dcf_deserialize(bytes, in_bits, out_bits, n, "test");
    CHECK(whole.values == keys.values);
    // Keys [5, 30): each level's values of those keys.
    const DcfCorrections part = dcf_deserialize_range(bytes, in_bits, out_bits, n, 5, 30);
    for (std::size_t level = 0; level <= std::size_t(in_bits); ++level)
      for (std::size_t k = 0; k < 25; ++k) CHECK(part.values[level * 25 + k] == keys.values[level * n + 5 + k]);
    // The batch's last key alone: its values end the stream.
    const DcfCorrections last = dcf_deserialize_range(bytes, in_bits, out_bits, n, n - 1, n);
    CHECK(last.values.back() == keys.values.back());
  }
}
