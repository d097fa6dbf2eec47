// Bytes waiting to go to one peer, as a list of pieces sent with one
// gathered write: record and frame headers and small payloads are copied
// into one growing buffer; big payloads stay in their own vectors (moved in,
// never copied) and are sent from there.
#pragma once
#include <cstddef>
#include <span>
#include <vector>
#include "byte_buffer.hpp"
#include "io_driver.hpp"

namespace mpcache::sys {

class SendQueue {
 public:
  bool empty() const noexcept { return pieces_.empty(); }
  std::size_t bytes() const noexcept { return total_; }
  void clear() {
    copied_.clear();
    owned_.clear();
    pieces_.clear();
    total_ = 0;
    merge_ = false;
  }
  void swap(SendQueue& o) noexcept {
    copied_.swap(o.copied_);
    owned_.swap(o.owned_);
    pieces_.swap(o.pieces_);
    std::swap(total_, o.total_);
    std::swap(merge_, o.merge_);
  }

  // `n` bytes to fill now (the pointer is valid until the next append);
  // returns the offset of the piece it starts, for `at()` later.
  std::byte* append_copied(std::size_t n) {
    const std::size_t offset = copied_.size();
    copied_.resize(offset + n);
    if (merge_ && !pieces_.empty() && pieces_.back().owned < 0) {
      pieces_.back().size += n;
    } else {
      pieces_.push_back(Piece{offset, n, -1});
    }
    merge_ = true;
    total_ += n;
    return copied_.data() + offset;
  }
  void append_owned(std::vector<std::byte>&& payload) {
    total_ += payload.size();
    pieces_.push_back(Piece{0, payload.size(), static_cast<int>(owned_.size())});
    owned_.push_back(std::move(payload));
    merge_ = false;
  }
  // The next copied bytes start a piece of their own (a record boundary, so
  // that a record's pieces can be found again for sealing).
  std::size_t start_record() {
    merge_ = false;
    return pieces_.size();
  }

  std::size_t piece_count() const noexcept { return pieces_.size(); }
  std::span<std::byte> piece(std::size_t i) {
    const Piece& p = pieces_[i];
    std::byte* base = p.owned < 0 ? copied_.data() + p.offset : owned_[static_cast<std::size_t>(p.owned)].data();
    return {base, p.size};
  }

  // The pieces from byte `sent` on, as buffers for one gathered write.
  void unsent(std::size_t sent, std::vector<ConstBuffer>& out) {
    out.clear();
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      auto s = piece(i);
      if (sent >= s.size()) {
        sent -= s.size();
        continue;
      }
      out.push_back(ConstBuffer{s.data() + sent, s.size() - sent});
      sent = 0;
    }
  }

  // For buffers the kernel may still read: never freed.
  void leak() {
    copied_.leak();
    (void)new std::vector<std::vector<std::byte>>(std::move(owned_));  // deliberately never deleted
    clear();
  }

 private:
  struct Piece {
    std::size_t offset;  // into copied_, or unused for owned pieces
    std::size_t size;
    int owned;           // index into owned_, or -1
  };
  ByteBuffer copied_;
  std::vector<std::vector<std::byte>> owned_;
  std::vector<Piece> pieces_;
  std::size_t total_ = 0;
  bool merge_ = false;
};

}  // namespace mpcache::sys
