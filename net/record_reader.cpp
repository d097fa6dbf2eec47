// RecordReader (see modules/net/record_reader.cppm): whole small records
// from the buffer, large ones frame by frame with their payloads received in
// place.
module;
#include "prelude.hpp"
#include <cstdio>
#include "sys/byte_buffer.hpp"
#include "sys/fresh_payload.hpp"
module mpcache.net;
import mpcache.core;
import :records;

namespace mpcache {

namespace {

// The buffer grows towards a record's announced end by at most this much
// beyond the data it holds, so a bogus length cannot make it allocate much.
constexpr std::size_t max_recv_ahead = 64u << 20;
// The buffer keeps its size between records (fresh memory costs page faults
// on every big message), unless one huge record took it past this.
constexpr std::size_t keep_recv_buffer = std::size_t{1} << 30;
// Frames reserved up front for a large record: its count is the peer's word.
constexpr std::size_t max_reserved_frames = 1024;

[[noreturn]] void refuse(const std::string& what) { throw Error(ErrorCode::protocol, what); }

}  // namespace

struct RecordReader::State {
  RecordLimits limits;
  std::unique_ptr<RecordOpener> opener;
  std::size_t tag = 0;  // bytes of the tag that ends each sealed body

  sys::ByteBuffer rx;  // received bytes not taken yet: [0, have)
  std::size_t have = 0;

  // The large record being taken frame by frame.
  bool large = false;
  std::array<std::byte, record_header_bytes> header{};
  std::uint32_t count = 0;
  std::uint64_t body = 0;
  std::uint64_t left = 0;  // body bytes not taken yet (frames, then the tag)
  std::vector<Frame> frames;
  bool in_payload = false;  // frames.back().payload is being filled
  std::size_t filled = 0;
  bool direct = false;  // space() handed out frames.back().payload

  std::uint64_t records = 0;  // records read: the next one's index
  std::vector<std::vector<Frame>> ready;
  std::size_t next_ready = 0;
  std::optional<Error> failure;

  enum class Step { progress, need_bytes };

  std::uint64_t plain_left() const { return left >= tag ? left - tag : 0; }
  std::uint64_t plain_body() const { return body - tag; }

  // Large-record body bytes that arrived, in order, each exactly once.
  void take_body(std::byte* data, std::size_t n) {
    if (opener) opener->decrypt({data, n});
    left -= n;
  }

  [[noreturn]] void unfilled() const {
    refuse(std::to_string(count) + " frames do not fill its " + std::to_string(plain_body()) + " bytes");
  }
  [[noreturn]] void not_authentic() const {
    refuse("record " + std::to_string(records) +
           " failed authentication (altered, replayed or reordered data refused)");
  }

  // Checks a record header; returns its body length.
  std::uint64_t check_header(const std::byte* h) const {
    if (get_u32(h) != record_magic) {
      char magic[16];
      std::snprintf(magic, sizeof magic, "0x%08x", get_u32(h));
      refuse(std::string("bad record magic ") + magic + " (not an mpcache peer or a corrupted stream)");
    }
    const std::uint64_t n = get_u64(h + 8);
    if (n > limits.max_record_bytes)
      refuse("a record of " + std::to_string(n) + " bytes, over the limit of " +
             std::to_string(limits.max_record_bytes));
    if (n < tag)
      refuse("a sealed record of " + std::to_string(n) + " bytes, shorter than its " + std::to_string(tag) +
             "-byte tag");
    return n;
  }

  // Parses what the buffer holds: whole small records, or the next pieces
  // of a large one. Throws Error(protocol).
  void parse() {
    std::size_t at = 0;
    for (;;) {
      if (large) {
        const bool all_frames = !in_payload && frames.size() == count;
        if ((all_frames ? finish_large(at) : large_step(at)) == Step::need_bytes) break;
        continue;
      }
      if (have - at < record_header_bytes) break;
      std::byte* h = rx.data() + at;
      const std::uint64_t n = check_header(h);
      const std::uint32_t frame_count = get_u32(h + 4);
      if (have - at - record_header_bytes < n) {
        if (n < limits.large_record_bytes) break;  // wait for the rest
        start_large(h, frame_count, n);
        at += record_header_bytes;
        continue;
      }
      read_small(h, frame_count, static_cast<std::size_t>(n));
      at += record_header_bytes + static_cast<std::size_t>(n);
    }
    if (at == 0) return;
    std::memmove(rx.data(), rx.data() + at, have - at);
    have -= at;
    if (rx.size() > keep_recv_buffer && have < limits.read_chunk) {
      rx.resize(have);
      rx.shrink(limits.read_chunk);
    }
  }

  // A whole record in the buffer: open it in place, decode its frames.
  void read_small(std::byte* h, std::uint32_t frame_count, std::size_t n) {
    std::byte* b = h + record_header_bytes;
    const std::size_t plain = n - tag;
    if (opener) {
      opener->begin(records, {h, record_header_bytes});
      opener->decrypt({b, plain});
      if (!opener->finish({b + plain, tag})) not_authentic();
    }
    ready.push_back(decode_record_body({b, plain}, frame_count));
    ++records;
  }

  void start_large(const std::byte* h, std::uint32_t frame_count, std::uint64_t n) {
    large = true;
    std::memcpy(header.data(), h, record_header_bytes);
    count = frame_count;
    body = left = n;
    frames.clear();
    frames.reserve(static_cast<std::size_t>(
        std::min<std::uint64_t>({count, (n - tag) / frame_header_bytes, max_reserved_frames})));
    in_payload = false;
    filled = 0;
    if (opener) opener->begin(records, header);
  }

  // Moves a large record on by what the buffer holds from `at`: the rest of
  // the current payload, or the next frame header.
  Step large_step(std::size_t& at) {
    if (in_payload) {
      auto& payload = frames.back().payload;
      const std::size_t n = std::min(payload.size() - filled, have - at);
      if (n == 0) return Step::need_bytes;
      std::memcpy(payload.data() + filled, rx.data() + at, n);
      take_body(payload.data() + filled, n);
      filled += n;
      at += n;
      in_payload = filled < payload.size();
      return Step::progress;
    }
    if (plain_left() < frame_header_bytes) unfilled();
    if (have - at < frame_header_bytes) return Step::need_bytes;
    std::byte* fh_bytes = rx.data() + at;
    take_body(fh_bytes, frame_header_bytes);
    at += frame_header_bytes;
    const FrameHeader fh = FrameHeader::decode(fh_bytes);
    if (fh.length > plain_left())
      refuse("a frame of " + std::to_string(fh.length) + " bytes overruns its " + std::to_string(plain_body()) +
             " bytes");
    // Zero-filled here; the socket then writes it once more.
    frames.push_back(Frame{fh.stream, fh.clock, sys::fresh_payload(fh.length)});
    in_payload = fh.length > 0;
    filled = 0;
    return Step::progress;
  }

  // Every frame is in: check that they fill the body, authenticate, queue.
  Step finish_large(std::size_t& at) {
    if (plain_left() != 0) unfilled();
    if (opener) {
      if (have - at < tag) return Step::need_bytes;  // the tag is still coming
      const bool authentic = opener->finish({rx.data() + at, tag});
      at += tag;
      left = 0;
      if (!authentic) not_authentic();
    }
    ready.push_back(std::move(frames));
    frames = {};
    large = false;
    ++records;
    return Step::progress;
  }
};

RecordReader::RecordReader(RecordLimits limits, std::unique_ptr<RecordOpener> opener)
    : s_(std::make_unique<State>()) {
  s_->limits = limits;
  s_->tag = opener ? opener->tag_bytes() : 0;
  s_->opener = std::move(opener);
}

RecordReader::~RecordReader() = default;
RecordReader::RecordReader(RecordReader&&) noexcept = default;
RecordReader& RecordReader::operator=(RecordReader&&) noexcept = default;

std::span<std::byte> RecordReader::space() {
  State& s = *s_;
  s.direct = s.large && s.in_payload && s.have == 0 && !s.failure;
  if (s.direct) {
    auto& payload = s.frames.back().payload;
    return {payload.data() + s.filled, payload.size() - s.filled};
  }
  // Room for the rest of the current small record, at most max_recv_ahead
  // beyond the data, or the next chunk.
  const std::size_t chunk = std::max<std::size_t>(s.limits.read_chunk, 1);
  std::size_t want = s.have + chunk;
  if (!s.large && !s.failure && s.have >= record_header_bytes) {
    const std::uint64_t need = record_header_bytes + get_u64(s.rx.data() + 8);  // checked by parse()
    if (need > s.have)
      want = static_cast<std::size_t>(
          std::min<std::uint64_t>(need, std::max<std::uint64_t>(s.have * 2, s.have + max_recv_ahead)));
  }
  if (s.rx.size() < want) s.rx.resize(want);
  // Inside a large record, a chunk at a time: its big payloads should go
  // straight to their vectors.
  const std::size_t room = s.large ? chunk : s.rx.size() - s.have;
  return {s.rx.data() + s.have, room};
}

void RecordReader::commit(std::size_t n) {
  State& s = *s_;
  if (s.direct) {
    s.direct = false;
    auto& payload = s.frames.back().payload;
    s.take_body(payload.data() + s.filled, n);
    s.filled += n;
    s.in_payload = s.filled < payload.size();
  } else {
    s.have += n;
  }
  if (s.failure) return;
  try {
    s.parse();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::protocol) throw;
    s.failure = e;
  }
}

void RecordReader::feed(std::span<const std::byte> bytes) {
  while (!bytes.empty() && !s_->failure) {
    const auto room = space();
    const std::size_t n = std::min(room.size(), bytes.size());
    std::memcpy(room.data(), bytes.data(), n);
    commit(n);
    bytes = bytes.subspan(n);
  }
}

std::optional<std::vector<Frame>> RecordReader::next() {
  State& s = *s_;
  if (s.next_ready < s.ready.size()) {
    std::vector<Frame> frames = std::move(s.ready[s.next_ready++]);
    if (s.next_ready == s.ready.size()) {
      s.ready.clear();
      s.next_ready = 0;
    }
    return frames;
  }
  if (s.failure) throw *s.failure;
  return std::nullopt;
}

std::string RecordReader::unfinished() const {
  const State& s = *s_;
  if (s.large)
    return "got " + std::to_string(record_header_bytes + s.body - s.left + s.have) + " of " +
           std::to_string(record_header_bytes + s.body) + " bytes";
  if (s.have == 0) return "";
  std::string of;
  if (s.have >= record_header_bytes) of = " of " + std::to_string(record_header_bytes + get_u64(s.rx.data() + 8));
  return "got " + std::to_string(s.have) + of + " bytes";
}

void RecordReader::leak() noexcept {
  State& s = *s_;
  s.rx.leak();
  if (s.direct) (void)new std::vector<Frame>(std::move(s.frames));  // deliberately never deleted
}

}  // namespace mpcache
