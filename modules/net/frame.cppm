// A frame is one logical message on one stream between two parties. On the
// wire it is a fixed 16-byte header followed by the payload:
//   u64 stream id | u32 payload length | u32 sender's round clock   (little endian)
// The clock lets the receiver count rounds along the critical path.
export module mpcache.net:frame;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

inline constexpr std::size_t frame_header_bytes = 16;
inline constexpr std::size_t max_frame_payload = 0xFFFFFFFFu;

struct Frame {
  StreamId stream = 0;
  std::uint32_t clock = 0;
  std::vector<std::byte> payload;
};

struct FrameHeader {
  StreamId stream = 0;
  std::uint32_t length = 0;
  std::uint32_t clock = 0;

  std::array<std::byte, frame_header_bytes> encode() const;
  static FrameHeader decode(const std::byte* bytes);  // exactly frame_header_bytes
};

}  // namespace mpcache
