// The TCP transport's send side: a batch of frames becomes one record in
// the peer's queue (sealed in place on encrypted channels; big payloads are
// moved in and sent from their own memory), and one gathered send per peer
// is in flight at a time.
module;
#include "prelude.hpp"
#include <cerrno>
#include "sys/aead.hpp"
#include "sys/io_driver.hpp"
#include "sys/send_queue.hpp"
module mpcache.net;
import mpcache.core;
import mpcache.async;
import :records;
#include "tcp_impl.hpp"

namespace mpcache {

namespace {

// Payloads from this size on are sent from their own memory (gathered),
// never copied into the record.
constexpr std::size_t direct_send_min = 64 * 1024;

}  // namespace

// Queues one record; payloads of direct_send_min bytes or more are moved
// into the queue and sent from their own memory.
void TcpTransport::Impl::append_record(PartyId p, std::vector<Frame>& batch) {
  Peer& peer = peers[p];
  std::uint64_t body = encrypted ? sys::aead_tag_bytes : 0;
  for (const auto& f : batch) body += frame_header_bytes + f.payload.size();
  auto& out = peer.queued;
  const std::size_t first_piece = out.start_record();
  std::byte* h = out.append_copied(record_header_bytes);
  put_u32(h, record_magic);
  put_u32(h + 4, static_cast<std::uint32_t>(batch.size()));
  put_u64(h + 8, body);
  for (auto& f : batch) {
    const auto fh = FrameHeader{f.stream, static_cast<std::uint32_t>(f.payload.size()), f.clock}.encode();
    if (f.payload.size() >= direct_send_min) {
      std::memcpy(out.append_copied(fh.size()), fh.data(), fh.size());
      out.append_owned(std::move(f.payload));
    } else {
      std::byte* w = out.append_copied(fh.size() + f.payload.size());
      std::memcpy(w, fh.data(), fh.size());
      if (!f.payload.empty()) std::memcpy(w + fh.size(), f.payload.data(), f.payload.size());
    }
  }
  if (encrypted) {
    // Seal in place, piece by piece: everything after the record header
    // up to the tag, which goes last.
    out.append_copied(sys::aead_tag_bytes);  // the tag's room, filled below
    auto header = out.piece(first_piece);
    peer.seal->begin_seal(peer.send_counter++, header.data(), record_header_bytes);
    std::uint64_t plain = body - sys::aead_tag_bytes;
    std::size_t skip = record_header_bytes;
    for (std::size_t i = first_piece; i < out.piece_count() && plain > 0; ++i) {
      auto s = out.piece(i).subspan(skip);
      skip = 0;
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(plain, s.size()));
      peer.seal->seal_piece(s.data(), n);
      plain -= n;
    }
    auto last = out.piece(out.piece_count() - 1);
    peer.seal->finish_seal(last.data() + last.size() - sys::aead_tag_bytes);
  }
  self.wire_sent_ += record_header_bytes + body;
}

void TcpTransport::Impl::start_send(PartyId p) {
  Peer& peer = peers[p];
  if (!peer.open() || peer.send_inflight) return;
  if (peer.sent == peer.sending.bytes()) {
    if (peer.queued.empty()) return;
    peer.sending.swap(peer.queued);
    peer.queued.clear();
    peer.sent = 0;
  }
  peer.send_inflight = true;
  peer.send_progress = SteadyClock::now();
  peer.sending.unsent(peer.sent, gather);
  driver->send(peer.fd, gather, send_tag(p));
}

void TcpTransport::Impl::sent(PartyId p, long result) {
  Peer& peer = peers[p];
  peer.send_inflight = false;
  if (result >= 0) {
    peer.sent += static_cast<std::size_t>(result);
    peer.send_progress = SteadyClock::now();
    if (peer.sent == peer.sending.bytes()) {
      peer.sending.clear();
      peer.sent = 0;
    }
    start_send(p);
  } else if (result != -ECANCELED || peer.open()) {
    fail(p, "sending to " + who(p) + " failed: " + errno_text(result));
  }
}

}  // namespace mpcache
