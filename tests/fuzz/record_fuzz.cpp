// libFuzzer target for the frame decoder of the TCP transport: the first 4
// bytes are a frame count, the rest a record body. The decoder must either
// return frames that tile the body exactly or throw Error(protocol); never
// crash, read out of bounds or allocate from a bogus length.
//   cmake --preset fuzz && cmake --build --preset fuzz
//   build/fuzz/tests/fuzz/fuzz_record -max_total_time=60 -rss_limit_mb=1024
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache.core;
import mpcache.net;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mpcache;
  if (size >= frame_header_bytes) {
    const FrameHeader h = FrameHeader::decode(reinterpret_cast<const std::byte*>(data));
    const auto again = h.encode();
    if (std::memcmp(again.data(), data, frame_header_bytes) != 0) __builtin_trap();
  }
  if (size < 4) return 0;
  const std::uint32_t count = std::uint32_t(data[0]) | std::uint32_t(data[1]) << 8 |
                              std::uint32_t(data[2]) << 16 | std::uint32_t(data[3]) << 24;
  const std::span<const std::byte> body(reinterpret_cast<const std::byte*>(data + 4), size - 4);
  try {
    const auto frames = decode_record_body(body, count);
    std::size_t total = 0;
    for (const auto& f : frames) total += frame_header_bytes + f.payload.size();
    if (frames.size() != count || total != body.size()) __builtin_trap();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::protocol) __builtin_trap();
  }
  return 0;
}
