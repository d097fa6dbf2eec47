// The TCP transport's receive side: one receive in flight per peer, into
// the space its RecordReader hands out (its buffer, or straight into a big
// payload); whole records go to the endpoint, and a malformed record or a
// connection that ends mid-record fails the peer.
module;
#include "prelude.hpp"
#include <cerrno>
#include "sys/aead.hpp"
#include "sys/io_driver.hpp"
#include "sys/send_queue.hpp"
module mpcache.net;
import mpcache.core;
import mpcache.async;
#include "tcp_impl.hpp"

namespace mpcache {

namespace {

// AES-256-GCM (sys::Aead) behind the reader's opener interface.
class AeadOpener final : public RecordOpener {
 public:
  explicit AeadOpener(const std::array<std::uint8_t, 32>& key) : aead_(key) {}
  std::size_t tag_bytes() const noexcept override { return sys::aead_tag_bytes; }
  void begin(std::uint64_t index, std::span<const std::byte> header) override {
    aead_.begin_open(index, header.data(), header.size());
  }
  void decrypt(std::span<std::byte> piece) override { aead_.open_piece(piece.data(), piece.size()); }
  bool finish(std::span<const std::byte> tag) override { return aead_.finish_open(tag.data()); }

 private:
  sys::Aead aead_;
};

}  // namespace

std::unique_ptr<RecordOpener> aead_opener(const std::array<std::uint8_t, 32>& key) {
  return std::make_unique<AeadOpener>(key);
}

void TcpTransport::Impl::start_recv(PartyId p) {
  Peer& peer = peers[p];
  if (!peer.open() || peer.recv_inflight) return;
  const std::span<std::byte> room = peer.reader.space();
  peer.recv_inflight = true;
  driver->recv(peer.fd, room.data(), room.size(), recv_tag(p));
}

void TcpTransport::Impl::received(PartyId p, long result) {
  Peer& peer = peers[p];
  peer.recv_inflight = false;
  if (result > 0) {
    peer.last_heard = SteadyClock::now();
    if (!peer.open()) return;
    peer.reader.commit(static_cast<std::size_t>(result));
    if (deliver(p)) start_recv(p);
  } else if (result == 0) {
    if (!peer.open()) return;
    const std::string cut = peer.reader.unfinished();
    if (!cut.empty()) {
      fail(p, who(p) + " closed the connection in the middle of a message (truncated: " + cut + ")");
    } else {
      // A clean close: fine if nothing more is needed from that peer.
      fail(p, who(p) + " closed the connection");
    }
  } else if (result != -ECANCELED || peer.open()) {
    fail(p, "connection to " + who(p) + " lost: " + errno_text(result));
  }
}

// Hands the endpoint every record the reader has whole; false after failing
// the peer for a malformed one.
bool TcpTransport::Impl::deliver(PartyId p) {
  for (;;) {
    std::optional<std::vector<Frame>> frames;
    try {
      frames = peers[p].reader.next();
    } catch (const Error& e) {
      fail(p, who(p) + " sent a malformed record (" + e.what() + ")");
      return false;
    }
    if (!frames) return true;
    if (!frames->empty()) self.endpoint_.deliver(p, std::move(*frames));
  }
}

}  // namespace mpcache
