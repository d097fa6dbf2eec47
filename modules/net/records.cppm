// Records: what the TCP transport puts on the wire for one tick's batch of
// frames to one peer.
//
//   record = u32 magic "MPCR" | u32 frame count | u64 body length | body
//   body   = frames (16-byte frame header + payload, see :frame)
//            [AEAD-sealed, with a 16-byte tag, when the channel is encrypted]
export module mpcache.net:records;
import mpcache.std;
import mpcache.core;
import :frame;

export namespace mpcache {

// Decodes the `count` frames of one plain record body; throws
// Error(protocol) unless they fill it exactly (used by the transport and by
// the fuzz target).
std::vector<Frame> decode_record_body(std::span<const std::byte> body, std::uint32_t count);

}  // namespace mpcache

// The header's layout, for the transport (not exported).
namespace mpcache {

inline constexpr std::uint32_t record_magic = 0x5243504Du;  // "MPCR"
inline constexpr std::size_t record_header_bytes = 16;

// Little-endian fields: put_u32/put_u64/get_u32/get_u64 of mpcache.core:wire.

}  // namespace mpcache
