#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.net;
import mpcache.proto;

using namespace mpcache;

TEST_CASE("the PRG is a function of key, stream and block") {
  const PrgKey key = insecure_prg_key(1, 2);
  Prg a(key), b(key);
  std::uint64_t block_a = 0, block_b = 0;
  RingTensor x = a.draw(7, block_a, {10});
  RingTensor y = b.draw(7, block_b, {10});
  CHECK(x == y);
  CHECK(block_a == 5);  // two ring elements per AES block
  // Drawing 4 then 6 continues the same key stream as drawing 10 at once.
  std::uint64_t block_c = 0;
  RingTensor first = a.draw(7, block_c, {4}), second = a.draw(7, block_c, {6});
  for (std::size_t i = 0; i < 4; ++i) CHECK(first(i) == x(i));
  for (std::size_t i = 0; i < 6; ++i) CHECK(second(i) == x(i + 4));
  // Another stream or key gives another stream of values.
  std::uint64_t block_d = 0, block_e = 0;
  CHECK(a.draw(8, block_d, {10}) != x);
  CHECK(Prg(insecure_prg_key(1, 3)).draw(7, block_e, {10}) != x);
}

TEST_CASE("odd draws consume whole blocks and the output looks uniform") {
  Prg prg(random_prg_key());
  std::uint64_t block = 0;
  RingTensor t = prg.draw(0, block, {100001});
  CHECK(block == 50001);
  // Each bit position is set in about half of the values (6 sigma bounds).
  for (int bit = 0; bit < 64; bit += 9) {
    std::size_t ones = 0;
    for (auto v : t) ones += (v >> bit) & 1;
    CHECK(ones > 50000 - 950);
    CHECK(ones < 50000 + 950);
  }
  CHECK(random_prg_key() != random_prg_key());
}

// A fill that continues the last one's keystream skips re-keying the
// cipher: values must be exactly those of a fresh PRG at the same position,
// after odd draws and with other streams in between.
TEST_CASE("continued, interleaved and odd draws equal fresh draws at their positions") {
  const PrgKey key = insecure_prg_key(5, 6);
  Prg reused(key);
  std::uint64_t at7 = 0, at9 = 0;
  std::vector<std::tuple<StreamId, std::uint64_t, std::size_t, RingTensor>> drawn;
  const std::pair<StreamId, std::size_t> plan[] = {{7, 3}, {7, 4}, {9, 5}, {7, 1}, {7, 2}, {9, 2}, {9, 7}, {7, 8}};
  for (const auto& [stream, n] : plan) {
    std::uint64_t& at = stream == 7 ? at7 : at9;
    const std::uint64_t start = at;
    drawn.emplace_back(stream, start, n, reused.draw(stream, at, {n}));
    CHECK(at == start + (n + 1) / 2);
  }
  for (const auto& [stream, start, n, values] : drawn) {
    std::uint64_t at = start;
    CHECK(Prg(key).draw(stream, at, {n}) == values);
  }
  // Going back to an earlier block re-keys: the same values again.
  std::uint64_t again = 0;
  CHECK(reused.draw(7, again, {3}) == std::get<3>(drawn.front()));
}

// Our AES-NI/VAES keystream replaces OpenSSL's on the hot path: every draw,
// odd, continued, interleaved or large, must give OpenSSL's values.
TEST_CASE("the PRG's own AES engine draws exactly what OpenSSL's AES-128-CTR draws") {
  const PrgKey key = insecure_prg_key(8, 9);
  Prg best(key), openssl(key, PrgEngine::openssl);
  CHECK(std::string(openssl.engine_name()) == "openssl");
  MESSAGE("PRG engine here: " << std::string(best.engine_name()));
  std::uint64_t at_best[2] = {0, 0}, at_openssl[2] = {0, 0};
  const StreamId streams[2] = {3, derive_stream(3, 1)};
  const std::size_t sizes[] = {1, 2, 3, 31, 32, 33, 64, 65, 1, 4099, 100001, 7};
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    const int s = static_cast<int>(i % 2);
    const RingTensor x = best.draw(streams[s], at_best[s], {sizes[i]});
    const RingTensor y = openssl.draw(streams[s], at_openssl[s], {sizes[i]});
    CHECK(x == y);
    CHECK(at_best[s] == at_openssl[s]);
  }
  // A block index whose low half wraps within the draw (the counter carries into the stream).
  std::uint64_t near_end_best = ~std::uint64_t{0} - 5, near_end_openssl = near_end_best;
  CHECK(best.draw(11, near_end_best, {40}) == openssl.draw(11, near_end_openssl, {40}));
}
