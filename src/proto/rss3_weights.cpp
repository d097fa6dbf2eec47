// rss3 weights (Rss3Weight): with Rss3Options::compact_weights at 8 bytes
// per element, one component kept and the other drawn again from its
// pairwise key stream at every use; by default both kept (16 bytes).
//
// Why drawn and not mmapped from a share file: AES-128-CTR (OpenSSL, AES-NI
// and VAES) makes 12.5 GB/s on one core of this machine (`openssl speed
// -evp aes-128-ctr`), so GPT-2-124M's 1 GB of second components takes
// about 0.08 s of AES per party, in blocks that stay in cache for the
// product (a decode step draws some weights twice: docs/protocols.md). A mapped file keeps those pages resident after
// their first use (they count in RSS) unless they are dropped after each
// layer, and then every token faults the whole file back in from the page
// cache, or reads it from disk when the cache was evicted: memory the host
// still needs, or disk reads at a fraction of the AES rate.
module;
#include "prelude.hpp"
module mpcache.proto;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

namespace {
// Elements [first, first + size of shape) of the key stream that starts at
// AES block `block` of `stream` (two elements per block).
RingTensor draw_range(const Prg& prg, StreamId stream, std::uint64_t block, std::size_t first, const Shape& shape) {
  std::uint64_t at = block + first / 2;
  if (first % 2 == 0) return prg.draw(stream, at, shape);
  RingTensor out = RingTensor::from_shape(shape);
  std::vector<Ring> buffer(out.size() + 1);
  prg.fill(stream, at, buffer);
  std::copy(buffer.begin() + 1, buffer.end(), out.data());
  return out;
}

std::size_t row_size(const Shape& shape) {
  std::size_t n = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

// Rows per block of a product: about 2^17 elements (1 MB per component),
// drawn and multiplied while in cache; even, so that every block starts on
// an AES block boundary.
std::size_t block_rows(std::size_t row) { return std::max<std::size_t>(2, ((std::size_t{1} << 17) / std::max<std::size_t>(row, 1)) & ~std::size_t{1}); }
}  // namespace

// A big weight is input in pieces of this many elements (even, so that
// the pieces' key streams follow each other): the owner then holds one
// piece's components, not the whole tensor's three, and its messages
// leave piece by piece. The payload bytes and rounds are input's.
constexpr std::size_t input_piece = std::size_t{1} << 20;

Task<Rss3Weight> Rss3::input_weight(PartyId owner, std::optional<RingTensor> value, Shape shape) {
  if (value && shape_of(*value) != shape)
    throw Error(ErrorCode::invalid_argument, "rss3 input_weight: value has shape " + shape_string(shape_of(*value)) +
                                                 ", declared shape is " + shape_string(shape));
  Rss3Weight w;
  w.shape = shape;
  w.stream = stream_;
  // input draws s_o (owner: own, o-1: next) and s_{o+1} (owner: next, o+1:
  // own); party o-1 keeps its received own, the others their next.
  w.kept_is_own = party_->id_ == (owner + 2) % 3;
  w.block = w.kept_is_own ? block_next_ : block_prev_;
  const std::size_t total = element_count(shape);
  if (total <= input_piece) {
    Share s = co_await input(owner, std::move(value), std::move(shape));
    w.kept = std::move(w.kept_is_own ? s.own : s.next);
    if (!party_->options_.compact_weights) w.drawn = std::move(w.kept_is_own ? s.next : s.own);
    co_return w;
  }
  w.kept = RingTensor::from_shape(shape);
  if (!party_->options_.compact_weights) w.drawn = RingTensor::from_shape(shape);
  for (std::size_t first = 0; first < total; first += input_piece) {
    const std::size_t count = std::min(input_piece, total - first);
    std::optional<RingTensor> piece;
    if (value) {
      piece = RingTensor::from_shape({count});
      std::copy(value->data() + first, value->data() + first + count, piece->data());
    }
    const Share s = co_await input(owner, std::move(piece), {count});
    const RingTensor& kept = w.kept_is_own ? s.own : s.next;
    std::copy(kept.data(), kept.data() + count, w.kept.data() + first);
    if (w.drawn) {
      const RingTensor& drawn = w.kept_is_own ? s.next : s.own;
      std::copy(drawn.data(), drawn.data() + count, w.drawn->data() + first);
    }
  }
  co_return w;
}

namespace {
// Rows [begin, end) of w into `out` (shaped for them): the kept component
// copied, the other drawn in place (`begin` * row even: an AES block boundary).
// Rows [begin, end) of a compact weight's drawn component into `drawn`
// (shaped for them; `begin` * row even: an AES block boundary).
void draw_rows(const Rss3Weight& w, const Prg& key, std::size_t begin, RingTensor& drawn) {
  std::uint64_t at = w.block + begin * row_size(w.shape) / 2;
  key.fill(w.stream, at, std::span<Ring>(drawn.data(), drawn.size()));
}

void fill_rows(const Rss3Weight& w, const Prg& key, std::size_t begin, std::size_t end, Rss3Share& out) {
  const std::size_t row = row_size(w.shape);
  RingTensor& kept = w.kept_is_own ? out.own : out.next;
  RingTensor& drawn = w.kept_is_own ? out.next : out.own;
  std::copy(w.kept.data() + begin * row, w.kept.data() + end * row, kept.data());
  if (w.drawn) {
    std::copy(w.drawn->data() + begin * row, w.drawn->data() + end * row, drawn.data());
    return;
  }
  draw_rows(w, key, begin, drawn);
}

void check_rows(const Rss3Weight& w, std::size_t begin, std::size_t end) {
  if (w.shape.empty() || begin > end || end > w.shape[0])
    throw Error(ErrorCode::invalid_argument, "rss3 expand_rows: rows [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") of a weight of shape " + shape_string(w.shape));
}

Shape rows_shape(const Rss3Weight& w, std::size_t rows) {
  Shape shape = w.shape;
  shape[0] = rows;
  return shape;
}
}  // namespace

Rss3Share Rss3::expand_rows(const Weight& w, std::size_t begin, std::size_t end) const {
  check_rows(w, begin, end);
  const std::size_t row = row_size(w.shape);
  const Shape shape = rows_shape(w, end - begin);
  const Prg& key = w.kept_is_own ? party_->prg_next_ : party_->prg_prev_;
  Share out{RingTensor::from_shape(shape), RingTensor::from_shape(shape)};
  if (begin * row % 2 == 0 || w.drawn) {
    fill_rows(w, key, begin, end, out);
    return out;
  }
  RingTensor& kept = w.kept_is_own ? out.own : out.next;
  std::copy(w.kept.data() + begin * row, w.kept.data() + end * row, kept.data());
  (w.kept_is_own ? out.next : out.own) = draw_range(key, w.stream, w.block, begin * row, shape);
  return out;
}

Rss3Share Rss3::expand(const Weight& w) const {
  if (!w.shape.empty()) return expand_rows(w, 0, w.shape[0]);
  const Prg& key = w.kept_is_own ? party_->prg_next_ : party_->prg_prev_;
  RingTensor drawn = w.drawn ? *w.drawn : draw_range(key, w.stream, w.block, 0, w.shape);
  if (w.kept_is_own) return {w.kept, std::move(drawn)};
  return {std::move(drawn), w.kept};
}

RingTensor Rss3::local_matmul_weight(const Share& a, const Weight& w) const {
  if (w.shape.size() != 2 || a.own.dimension() != 2 || a.own.shape()[1] != w.shape[0])
    throw Error(ErrorCode::invalid_argument, "rss3 matmul with a weight: needs (m,k) x (k,n), got " +
                                                 shape_string(shape_of(a.own)) + " x " + shape_string(w.shape));
  const std::size_t k = w.shape[0], step = block_rows(w.shape[1]);
  RingTensor z = ring_zeros({a.own.shape()[0], w.shape[1]});
  ComputePool* pool = party_->options_.pool;
  if (w.drawn) {  // the full share: one product, nothing drawn
    ring_matmul_rss3_accumulate(z, a.own, a.next, w.kept_is_own ? w.kept : *w.drawn, w.kept_is_own ? *w.drawn : w.kept,
                                pool);
    return z;
  }
  const Prg& key = w.kept_is_own ? party_->prg_next_ : party_->prg_prev_;
  // A block of rows of the kept component, and the matching columns of a,
  // are read in place. Only the drawn component needs a buffer: one block's
  // for all blocks (but a shorter last one), as fresh megabyte allocations
  // per block cost page faults.
  RingTensor drawn;
  for (std::size_t begin = 0; begin < k; begin += step) {
    const std::size_t end = std::min(k, begin + step);
    if (drawn.dimension() != 2 || drawn.shape()[0] != end - begin) drawn = RingTensor::from_shape(rows_shape(w, end - begin));
    draw_rows(w, key, begin, drawn);
    const RingMatrixView kept = ring_matrix_rows(w.kept, begin, end), fresh = ring_matrix(drawn);
    ring_matmul_rss3_accumulate(z, ring_matrix_columns(a.own, begin, end), ring_matrix_columns(a.next, begin, end),
                                w.kept_is_own ? kept : fresh, w.kept_is_own ? fresh : kept, pool);
  }
  return z;
}

Task<Rss3Share> Rss3::matmul(const Share& a, const Weight& b) {
  RingTensor z = local_matmul_weight(a, b);
  ring_add_inplace(z, zero_share(shape_of(z)), party_->options_.pool);
  return reshare(std::move(z));
}

Task<Rss3Share> Rss3::matmul_trunc(const Share& a, const Weight& b) {
  RingTensor z = local_matmul_weight(a, b);
  ring_add_inplace(z, zero_share(shape_of(z)), party_->options_.pool);
  return reshare_truncated(std::move(z), frac_bits());
}

void Rss3::confirm_weights(PartyId owner) {
  if (owner != party_->id_) party_->endpoint_->send(owner, confirmations_stream(), std::vector<std::byte>{}, tag_);
}

Task<void> Rss3::weights_confirmed(PartyId owner) {
  if (owner != party_->id_) co_return;
  const StreamId stream = confirmations_stream();
  (void)co_await party_->endpoint_->recv(next_id(), stream, tag_);
  (void)co_await party_->endpoint_->recv(prev_id(), stream, tag_);
}

}  // namespace mpcache
