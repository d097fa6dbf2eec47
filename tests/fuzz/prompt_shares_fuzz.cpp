// libFuzzer target for a client's prompt shares as a server takes them
// (client_shares::assemble: two components, each a 16-byte seed or the
// values). The input picks
//   byte 0     the server (0..3: 3 is not one, and must be refused)
//   byte 1     the rows of the secret, minus 1 (the prompt's tokens)
//   byte 2     its columns / 8, minus 1 (the vocabulary: 8..2048)
//   the rest   the part the client sent that server
// assemble must give a share of exactly that shape, whose value components
// are the bytes sent, or throw Error(protocol) (Error(bad_party) for server
// 3), never crash, read past the part or allocate from its bytes.
//   cmake --preset fuzz && cmake --build --preset fuzz
//   build/fuzz/tests/fuzz/fuzz_prompt_shares tests/fuzz/corpus/prompt_shares -max_total_time=60
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache.core;
import mpcache.proto;

using namespace mpcache;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const PartyId server = data[0] % 4;
  const Shape shape{std::size_t{data[1]} + 1, 8 * (std::size_t{data[2]} + 1)};
  const std::span<const std::byte> part(reinterpret_cast<const std::byte*>(data + 3), size - 3);
  try {
    const Rss3Share share = client_shares::assemble(server, part, shape);
    if (server > 2) __builtin_trap();
    if (shape_of(share.own) != shape || shape_of(share.next) != shape) __builtin_trap();
    // A values component is the bytes sent, in order.
    const std::size_t values = element_count(shape) * sizeof(Ring);
    std::size_t at = 0;
    for (const RingTensor* t : {&share.own, &share.next}) {
      const auto form = std::to_integer<unsigned>(part[at++]);
      if (form == 1) {
        if (std::memcmp(t->data(), part.data() + at, values) != 0) __builtin_trap();
        at += values;
      } else {
        if (form != 0) __builtin_trap();
        at += 16;
      }
    }
    if (at != part.size()) __builtin_trap();
  } catch (const Error& e) {
    if (e.code() != (server > 2 ? ErrorCode::bad_party : ErrorCode::protocol)) __builtin_trap();
  }
  return 0;
}
