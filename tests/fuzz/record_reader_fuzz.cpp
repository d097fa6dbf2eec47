// libFuzzer target for RecordReader, the TCP transport's parser. The input
// picks how to read and what:
//   byte 0     bit 0: sealed records (a toy opener stands in for AES-GCM);
//              bit 1: its keystream is zero, so frames the fuzzer writes in
//              the clear reach the tag check
//   byte 1     the large-record threshold: 2 x byte (255: never large)
//   byte 2     the longest piece fed at once, minus 1
//   bytes 3-4  the record limit: 64 x (u16 + 1) bytes
//   bytes 5-8  the seed of the piece sizes
//   byte 9     the reader's read chunk, minus 1
//   the rest   the byte stream
// The stream is read three ways: whole in one read with small records only,
// whole (fed through reads of the chunk) at the threshold, and in pieces
// through space()/commit() as the transport does. All three must give the same records; a malformed stream must fail
// each with Error(protocol) (a way that takes a record frame by frame may
// refuse it before it is whole, so a stream that ends inside a record may
// fail there and not in the small-only reading), and never crash, read out
// of bounds or allocate beyond the record limit.
//   cmake --preset fuzz && cmake --build --preset fuzz
//   build/fuzz/tests/fuzz/fuzz_record_reader -max_total_time=60 -rss_limit_mb=1024
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache.core;
import mpcache.net;
#include "../support/toy_record_cipher.hpp"

using namespace mpcache;
using mpcache::testing::ToyOpener;

namespace {

struct Reading {
  std::vector<std::vector<Frame>> records;
  bool failed = false;
  std::string unfinished;
};

struct Setup {
  bool sealed = false;
  bool keystream = true;
  RecordLimits limits;
  std::size_t max_piece = 1;
  std::uint32_t seed = 0;
};

RecordReader reader_for(const Setup& setup, std::uint64_t large, std::size_t read_chunk) {
  RecordLimits limits = setup.limits;
  limits.large_record_bytes = large;
  limits.read_chunk = read_chunk;
  return RecordReader(limits, setup.sealed ? std::make_unique<ToyOpener>(setup.keystream) : nullptr);
}

void take_records(RecordReader& reader, Reading& out) {
  while (auto r = reader.next()) out.records.push_back(std::move(*r));
}

// The whole stream through feed().
Reading read_whole(const Setup& setup, std::uint64_t large, std::size_t read_chunk,
                   std::span<const std::byte> bytes) {
  Reading out;
  RecordReader reader = reader_for(setup, large, read_chunk);
  try {
    reader.feed(bytes);
    take_records(reader, out);
    out.unfinished = reader.unfinished();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::protocol) __builtin_trap();
    out.failed = true;
  }
  return out;
}

// Pieces of pseudo-random sizes, each written into space() as a socket
// would, records taken out after every piece.
Reading read_in_pieces(const Setup& setup, std::span<const std::byte> bytes) {
  Reading out;
  RecordReader reader = reader_for(setup, setup.limits.large_record_bytes, setup.limits.read_chunk);
  std::uint32_t state = setup.seed | 1;
  try {
    for (;;) {
      take_records(reader, out);
      if (bytes.empty()) break;
      const std::span<std::byte> room = reader.space();
      if (room.empty()) __builtin_trap();
      state ^= state << 13, state ^= state >> 17, state ^= state << 5;  // xorshift32
      const std::size_t piece = state % setup.max_piece + 1;
      const std::size_t n = std::min({room.size(), bytes.size(), piece});
      std::memcpy(room.data(), bytes.data(), n);
      reader.commit(n);
      bytes = bytes.subspan(n);
    }
    out.unfinished = reader.unfinished();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::protocol) __builtin_trap();
    out.failed = true;
  }
  return out;
}

bool same_records(const Reading& a, const Reading& b) {
  if (a.records.size() != b.records.size()) return false;
  for (std::size_t i = 0; i < a.records.size(); ++i) {
    const auto& x = a.records[i];
    const auto& y = b.records[i];
    if (x.size() != y.size()) return false;
    for (std::size_t k = 0; k < x.size(); ++k)
      if (x[k].stream != y[k].stream || x[k].clock != y[k].clock || x[k].payload != y[k].payload) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t setup_bytes = 10;
  if (size < setup_bytes) return 0;
  Setup setup;
  setup.sealed = (data[0] & 1) != 0;
  setup.keystream = (data[0] & 2) == 0;
  setup.limits.large_record_bytes = data[1] == 255 ? ~std::uint64_t{0} : std::uint64_t{data[1]} * 2;
  setup.max_piece = std::size_t{data[2]} + 1;
  setup.limits.max_record_bytes = 64 * ((std::uint64_t{data[3]} | std::uint64_t{data[4]} << 8) + 1);
  setup.seed = std::uint32_t(data[5]) | std::uint32_t(data[6]) << 8 | std::uint32_t(data[7]) << 16 |
               std::uint32_t(data[8]) << 24;
  setup.limits.read_chunk = std::size_t{data[9]} + 1;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + setup_bytes), size - setup_bytes);

  const Reading small_only = read_whole(setup, ~std::uint64_t{0}, std::max<std::size_t>(bytes.size(), 1), bytes);
  const Reading whole = read_whole(setup, setup.limits.large_record_bytes, setup.limits.read_chunk, bytes);
  const Reading pieces = read_in_pieces(setup, bytes);

  // The same records, however the stream was cut and parsed.
  if (!same_records(small_only, whole) || !same_records(whole, pieces)) __builtin_trap();
  // Whole or in pieces at one threshold, a record is refused or not alike;
  // the frame-by-frame path may only refuse earlier what small-only reading
  // still waits for.
  if (whole.failed != pieces.failed) __builtin_trap();
  if (small_only.failed && !whole.failed) __builtin_trap();
  if (!small_only.failed && small_only.unfinished.empty() && whole.failed) __builtin_trap();
  if (!whole.failed && whole.unfinished != pieces.unfinished) __builtin_trap();
  if (!small_only.failed && !whole.failed && small_only.unfinished != whole.unfinished) __builtin_trap();
  return 0;
}
