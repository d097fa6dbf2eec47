// Record bodies (see modules/net/records.cppm).
module mpcache.net;
import mpcache.std;
import mpcache.core;

namespace mpcache {

std::vector<Frame> decode_record_body(std::span<const std::byte> body, std::uint32_t count) {
  std::vector<Frame> frames;
  frames.reserve(std::min<std::size_t>(count, body.size() / frame_header_bytes));
  std::size_t off = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (body.size() - off < frame_header_bytes) break;
    const FrameHeader fh = FrameHeader::decode(body.data() + off);
    off += frame_header_bytes;
    if (body.size() - off < fh.length) {
      off = body.size() + 1;
      break;
    }
    frames.push_back(Frame{fh.stream, fh.clock,
                           std::vector<std::byte>(body.data() + off, body.data() + off + fh.length)});
    off += fh.length;
  }
  if (frames.size() != count || off != body.size())
    throw Error(ErrorCode::protocol, std::to_string(count) + " frames do not fill its " +
                                         std::to_string(body.size()) + " bytes");
  return frames;
}

}  // namespace mpcache
