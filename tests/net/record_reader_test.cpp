// RecordReader on its own, fed bytes however they are cut: whole, byte by
// byte, at random points. Small records (kept whole, then decoded) and large
// ones (frame by frame, payloads received in place) give the same frames,
// plain and sealed (a toy opener stands in for AES-GCM), and every malformed
// input is an Error(protocol) that says what is wrong.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <random>
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.net;
#include "../support/toy_record_cipher.hpp"

using namespace mpcache;
using mpcache::testing::ToyCipher;
using mpcache::testing::ToyOpener;

namespace {

void put_le(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xFF));
}

// One record on the wire: header, frames, and (sealed) the tag.
std::vector<std::byte> record(const std::vector<Frame>& frames, std::optional<std::uint64_t> sealed_as = {}) {
  std::vector<std::byte> body;
  for (const auto& f : frames) {
    const auto h = FrameHeader{f.stream, static_cast<std::uint32_t>(f.payload.size()), f.clock}.encode();
    body.insert(body.end(), h.begin(), h.end());
    body.insert(body.end(), f.payload.begin(), f.payload.end());
  }
  std::vector<std::byte> out;
  put_le(out, 0x5243504Du, 4);  // "MPCR"
  put_le(out, frames.size(), 4);
  put_le(out, body.size() + (sealed_as ? 16 : 0), 8);
  if (sealed_as) {
    std::uint64_t sum = 0;
    for (auto b : out) sum += std::to_integer<std::uint64_t>(b);
    for (std::size_t i = 0; i < body.size(); ++i) {
      body[i] ^= ToyCipher::key(*sealed_as, i);
      sum += std::to_integer<std::uint64_t>(body[i]);
    }
    for (std::size_t i = 0; i < 16; ++i) body.push_back(ToyCipher::tag_byte(sum, *sealed_as, i));
  }
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<std::byte> header(std::uint32_t count, std::uint64_t body, std::uint32_t magic = 0x5243504Du) {
  std::vector<std::byte> out;
  put_le(out, magic, 4);
  put_le(out, count, 4);
  put_le(out, body, 8);
  return out;
}

std::vector<std::byte> frame_header(std::uint32_t length, StreamId stream = 7) {
  const auto h = FrameHeader{stream, length, 0}.encode();
  return {h.begin(), h.end()};
}

std::vector<std::byte> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<std::uint8_t>(i * 131 + seed));
  return v;
}

std::vector<std::byte> operator+(std::vector<std::byte> a, const std::vector<std::byte>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Records of every shape: no frames, an empty payload, many small frames,
// payloads around the thresholds the tests use, one record over 1 MiB.
std::vector<std::vector<Frame>> sample_records() {
  std::vector<std::vector<Frame>> records;
  records.push_back({});
  records.push_back({Frame{3, 1, {}}});
  std::vector<Frame> many;
  for (std::uint32_t i = 0; i < 40; ++i) many.push_back(Frame{i % 5, i, pattern(i * 3, static_cast<std::uint8_t>(i))});
  records.push_back(many);
  records.push_back({Frame{1, 9, pattern(63, 1)}, Frame{2, 9, pattern(64, 2)}, Frame{1, 9, pattern(65, 3)}});
  records.push_back({Frame{5, 2, pattern(3000, 4)}, Frame{5, 2, {}}, Frame{6, 2, pattern(17, 5)}});
  records.push_back({Frame{8, 3, pattern((1u << 20) + 7, 6)}, Frame{9, 3, pattern(5, 7)}});
  records.push_back({Frame{4, 4, pattern(1, 8)}});
  return records;
}

std::vector<std::byte> stream_of(const std::vector<std::vector<Frame>>& records, bool sealed) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto r = record(records[i], sealed ? std::optional<std::uint64_t>(i) : std::nullopt);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

struct ReadResult {
  std::vector<std::vector<Frame>> records;
  std::string error;  // what() of the Error(protocol), "" if none
};

// Feeds `bytes` in pieces whose sizes come from `cut` (called with the bytes
// left), taking records out after every piece.
template <class Cut>
ReadResult read(RecordReader& reader, std::span<const std::byte> bytes, Cut cut) {
  ReadResult out;
  try {
    while (true) {
      while (auto r = reader.next()) out.records.push_back(std::move(*r));
      if (bytes.empty()) break;
      const std::size_t n = std::min(bytes.size(), static_cast<std::size_t>(cut(bytes.size())));
      reader.feed(bytes.first(n));
      bytes = bytes.subspan(n);
    }
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::protocol);
    out.error = e.what();
  }
  return out;
}

ReadResult read_whole(RecordReader& reader, std::span<const std::byte> bytes) {
  return read(reader, bytes, [](std::size_t left) { return left; });
}

RecordReader make_reader(std::uint64_t large, bool sealed, std::uint64_t max = std::uint64_t{1} << 33,
                         std::size_t read_chunk = 256 * 1024) {
  return RecordReader({.max_record_bytes = max, .large_record_bytes = large, .read_chunk = read_chunk},
                      sealed ? std::make_unique<ToyOpener>() : nullptr);
}

bool same(const std::vector<std::vector<Frame>>& a, const std::vector<std::vector<Frame>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    for (std::size_t k = 0; k < a[i].size(); ++k)
      if (a[i][k].stream != b[i][k].stream || a[i][k].clock != b[i][k].clock || a[i][k].payload != b[i][k].payload)
        return false;
  }
  return true;
}

// Checks the error `bytes` give. Whole, a record is decoded as a small one
// at any threshold; byte by byte it is large from the threshold on (here 0),
// where an empty `large_error` accepts any Error(protocol): a record opened
// with the wrong nonce decrypts to frame headers that are nonsense.
void check_refused(const std::vector<std::byte>& bytes, bool sealed, const std::string& small_error,
                   const std::string& large_error) {
  for (std::uint64_t large : {std::uint64_t{1} << 20, std::uint64_t{0}}) {
    CAPTURE(large);
    auto whole = make_reader(large, sealed);
    CHECK(read_whole(whole, bytes).error == "protocol error: " + small_error);
    auto bytewise = make_reader(large, sealed);
    const std::string error = read(bytewise, bytes, [](std::size_t) { return 1; }).error;
    if (large > 0) {
      CHECK(error == "protocol error: " + small_error);
    } else if (!large_error.empty()) {
      CHECK(error == "protocol error: " + large_error);
    } else {
      CHECK(error.starts_with("protocol error: "));
    }
  }
}

}  // namespace

TEST_CASE("record reader: every cut of a record stream gives the same records, plain and sealed") {
  const auto records = sample_records();
  for (bool sealed : {false, true}) {
    const auto bytes = stream_of(records, sealed);
    // 1 MiB: only the last big record is large (when it arrives in pieces);
    // 64 bytes and 0: most records are taken frame by frame.
    for (std::uint64_t large : {std::uint64_t{1} << 20, std::uint64_t{64}, std::uint64_t{0}}) {
      CAPTURE(sealed);
      CAPTURE(large);
      auto whole = make_reader(large, sealed);
      const auto got = read_whole(whole, bytes);
      CHECK(got.error == "");
      CHECK(same(got.records, records));
      CHECK(whole.unfinished() == "");

      auto bytewise = make_reader(large, sealed);
      const auto byte_by_byte = read(bytewise, bytes, [](std::size_t) { return 1; });
      CHECK(byte_by_byte.error == "");
      CHECK(same(byte_by_byte.records, records));

      // Random pieces, into reads of 256 KiB (the default) or of a few
      // bytes, which grow the buffer for a record and carry what is left of
      // one read over to the next.
      for (std::size_t read_chunk : {std::size_t{256} * 1024, std::size_t{100}, std::size_t{5}})
        for (std::uint32_t seed : {1u, 2u, 3u}) {
          CAPTURE(read_chunk);
          CAPTURE(seed);
          std::mt19937 rng(seed);
          const std::size_t most = seed == 1 ? 7 : seed == 2 ? 1000 : 300000;
          auto split = make_reader(large, sealed, std::uint64_t{1} << 33, read_chunk);
          const auto random = read(split, bytes, [&](std::size_t) {
            return std::uniform_int_distribution<std::size_t>(1, most)(rng);
          });
          CHECK(random.error == "");
          CHECK(same(random.records, records));
          CHECK(split.unfinished() == "");
        }
    }
  }
}

TEST_CASE("record reader: a large record's payload is received straight into the vector handed out") {
  for (bool sealed : {false, true}) {
    CAPTURE(sealed);
    const auto bytes = record({Frame{2, 5, pattern(1000, 9)}, Frame{3, 5, pattern(10, 1)}},
                              sealed ? std::optional<std::uint64_t>(0) : std::nullopt);
    auto reader = make_reader(64, sealed);
    reader.feed(std::span(bytes).first(32));  // record and frame header
    CHECK(!reader.next());
    const auto room = reader.space();
    REQUIRE(room.size() == 1000);  // exactly the payload, nothing beyond it
    std::memcpy(room.data(), bytes.data() + 32, 600);
    reader.commit(600);
    const auto rest = reader.space();
    REQUIRE(rest.size() == 400);
    CHECK(rest.data() == room.data() + 600);
    std::memcpy(rest.data(), bytes.data() + 632, 400);
    reader.commit(400);
    CHECK(!reader.next());  // the second frame and the tag are still to come
    CHECK(reader.unfinished() == "got 1032 of " + std::to_string(bytes.size()) + " bytes");
    reader.feed(std::span(bytes).subspan(1032));
    auto got = reader.next();
    REQUIRE(got);
    REQUIRE(got->size() == 2);
    CHECK((*got)[0].payload.data() == room.data());
    CHECK((*got)[0].payload == pattern(1000, 9));
    CHECK((*got)[1].payload == pattern(10, 1));
    CHECK(reader.unfinished() == "");
  }
}

TEST_CASE("record reader: how much of a record the stream ended in") {
  const auto bytes = record({Frame{1, 1, pattern(100, 1)}});  // a 16-byte header, a 116-byte body
  for (std::uint64_t large : {std::uint64_t{1} << 20, std::uint64_t{0}}) {
    CAPTURE(large);
    auto reader = make_reader(large, false);
    CHECK(reader.unfinished() == "");
    reader.feed(std::span(bytes).first(5));
    CHECK(reader.unfinished() == "got 5 bytes");
    reader.feed(std::span(bytes).subspan(5, 21));
    CHECK(reader.unfinished() == "got 26 of 132 bytes");
    CHECK(!reader.next());
    reader.feed(std::span(bytes).subspan(26));
    CHECK(reader.next());
    CHECK(reader.unfinished() == "");
  }
}

TEST_CASE("record reader: malformed records are refused naming what is wrong") {
  SUBCASE("not a record at all") {
    const auto get = header(0, 0, 0x20544547);  // "GET "
    check_refused(get, false, "bad record magic 0x20544547 (not an mpcache peer or a corrupted stream)",
                  "bad record magic 0x20544547 (not an mpcache peer or a corrupted stream)");
  }
  SUBCASE("a length over the limit, refused from the header alone") {
    for (std::uint64_t body : {std::uint64_t{101}, ~std::uint64_t{0}}) {
      auto reader = make_reader(0, false, 100);
      const auto got = read_whole(reader, header(1, body));
      CHECK(got.error == "protocol error: a record of " + std::to_string(body) + " bytes, over the limit of 100");
    }
  }
  SUBCASE("a sealed record too short for its tag") {
    check_refused(header(0, 15), true, "a sealed record of 15 bytes, shorter than its 16-byte tag",
                  "a sealed record of 15 bytes, shorter than its 16-byte tag");
  }
  SUBCASE("frames that do not fill the record") {
    // Two frames announced, room for one header and 4 bytes.
    const auto two = header(2, 20) + frame_header(4) + pattern(4, 0);
    check_refused(two, false, "2 frames do not fill its 20 bytes", "2 frames do not fill its 20 bytes");
    // One frame, ten bytes left over.
    const auto loose = header(1, 30) + frame_header(4) + pattern(14, 0);
    check_refused(loose, false, "1 frames do not fill its 30 bytes", "1 frames do not fill its 30 bytes");
    // No frame announced in a record with a body.
    check_refused(header(0, 16) + frame_header(0), false, "0 frames do not fill its 16 bytes",
                  "0 frames do not fill its 16 bytes");
  }
  SUBCASE("a frame longer than the record") {
    // Whole, the small path sees frames that do not tile the body; in
    // pieces, the large path refuses the frame header before its payload.
    const auto overrun = header(1, 40) + frame_header(100) + pattern(24, 0);
    check_refused(overrun, false, "1 frames do not fill its 40 bytes", "a frame of 100 bytes overruns its 40 bytes");
  }
  SUBCASE("sealed records altered, replayed or reordered") {
    const auto first = record({Frame{1, 1, pattern(40, 1)}}, 0);
    const auto second = record({Frame{1, 1, pattern(40, 2)}}, 1);
    auto altered = second;
    altered[40] ^= std::byte{1};
    const std::string refused = "record 1 failed authentication (altered, replayed or reordered data refused)";
    check_refused(first + altered, true, refused, refused);
    check_refused(first + first, true, refused, "");
    check_refused(second + first, true,
                  "record 0 failed authentication (altered, replayed or reordered data refused)", "");
  }
  SUBCASE("the records before a malformed one come out first, then the error, every time") {
    const auto good = record({Frame{1, 1, pattern(10, 1)}});
    const auto bytes = good + good + header(0, 0, 0x01020304);
    for (std::uint64_t large : {std::uint64_t{1} << 20, std::uint64_t{0}}) {
      auto reader = make_reader(large, false);
      reader.feed(bytes);
      CHECK(reader.next());
      CHECK(reader.next());
      for (int i = 0; i < 2; ++i) {
        try {
          (void)reader.next();
          FAIL("no error");
        } catch (const Error& e) {
          CHECK(e.code() == ErrorCode::protocol);
          CHECK(std::string(e.what()) ==
                "protocol error: bad record magic 0x01020304 (not an mpcache peer or a corrupted stream)");
        }
      }
    }
  }
  SUBCASE("a huge frame count is only a claim until the frames come") {
    // 2^32 - 1 frames in 2 MiB: nothing is reserved for them up front; the
    // record is refused once its bytes run out.
    auto reader = make_reader(std::uint64_t{1} << 20, false);
    const std::uint64_t body = 2u << 20;
    reader.feed(header(0xFFFFFFFFu, body));
    CHECK(!reader.next());
    CHECK(reader.unfinished() == "got 16 of " + std::to_string(16 + body) + " bytes");
    std::vector<std::byte> frames;
    const auto empty_frame = frame_header(0);
    for (std::uint64_t i = 0; i < body / 16; ++i) frames.insert(frames.end(), empty_frame.begin(), empty_frame.end());
    const auto got = read_whole(reader, frames);
    CHECK(got.error == "protocol error: 4294967295 frames do not fill its " + std::to_string(body) + " bytes");
    CHECK(got.records.empty());
  }
}
