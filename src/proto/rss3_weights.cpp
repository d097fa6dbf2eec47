// rss3 weights (Rss3Weight): with Rss3Options::compact_weights at 8 bytes
// per element at two parties (the received component kept, the other drawn
// again from its pairwise key stream at every use) and none at the owner
// (both drawn); by default both kept (16 bytes).
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

Shape rows_shape(const Shape& stored, std::size_t rows) {
  Shape shape = stored;
  shape[0] = rows;
  return shape;
}
}  // namespace

// A big weight is input in pieces of this many elements (even, so that
// the pieces' key streams follow each other): the owner then holds one
// piece's components, not the whole tensor's three, and its messages
// leave piece by piece. The payload bytes and rounds are input's.
constexpr std::size_t input_piece = std::size_t{1} << 20;
constexpr std::size_t pieces_in_flight = 4;

Task<Rss3Weight> Rss3::input_weight(PartyId owner, std::optional<RingTensor> value, Shape shape) {
  if (value && shape_of(*value) != shape)
    throw Error(ErrorCode::invalid_argument, "rss3 input_weight: value has shape " + shape_string(shape_of(*value)) +
                                                 ", declared shape is " + shape_string(shape));
  Rss3WeightPieces pieces;
  if (value)
    pieces = [v = std::make_shared<const RingTensor>(std::move(*value))](std::size_t first, std::size_t count) {
      RingTensor piece = RingTensor::from_shape({count});
      std::copy(v->data() + first, v->data() + first + count, piece.data());
      return piece;
    };
  return input_weight(owner, std::move(pieces), std::move(shape));
}

Task<Rss3Weight> Rss3::input_weight(PartyId owner, Rss3WeightPieces pieces, Shape shape) {
  const PartyId id = party_->id_;
  if (owner > 2) throw Error(ErrorCode::bad_party, "rss3 input_weight: owner " + std::to_string(owner) + " is not a party (0..2)");
  if ((id == owner) != bool(pieces))
    throw Error(ErrorCode::invalid_argument, id == owner ? "rss3 input_weight: the owner passed no values"
                                                         : "rss3 input_weight: values passed for party " +
                                                               std::to_string(owner) + "'s weight");
  const bool compact = party_->options_.compact_weights;
  Rss3Weight w;
  w.shape = shape;
  w.stream = stream_;
  // input draws s_o (owner: own, o-1: next) and s_{o+1} (owner: next, o+1:
  // own); party o-1 keeps its received own, the others their next.
  w.kept_is_own = id == (owner + 2) % 3;
  w.block = w.kept_is_own ? block_next_ : block_prev_;
  w.kept_block = w.kept_is_own ? block_prev_ : block_next_;
  // The owner's both components came from keys: with compact weights it keeps neither.
  const bool keep = !(compact && id == owner);
  const std::size_t total = element_count(shape);
  auto piece_of = [&](std::size_t first, std::size_t count) -> std::optional<RingTensor> {
    if (!pieces) return std::nullopt;
    RingTensor piece = pieces(first, count);
    if (piece.size() != count)
      throw Error(ErrorCode::invalid_argument, "rss3 input_weight: a piece of " + std::to_string(piece.size()) +
                                                   " elements where " + std::to_string(count) + " were asked for");
    return piece;
  };
  if (total <= input_piece) {
    std::optional<RingTensor> value = piece_of(0, total);
    if (value) *value = ring_reshape(*value, shape);
    Share s = co_await input(owner, std::move(value), std::move(shape));
    if (keep) w.kept = std::make_shared<const RingTensor>(std::move(w.kept_is_own ? s.own : s.next));
    if (!compact) w.drawn = std::make_shared<const RingTensor>(std::move(w.kept_is_own ? s.next : s.own));
    co_return w;
  }
  std::optional<RingTensor> kept, drawn;
  if (keep) kept = RingTensor::from_shape(shape);
  if (!compact) drawn = RingTensor::from_shape(shape);
  // Paced: the others confirm each piece but the last few (an empty
  // message), and the owner sends piece k once piece k - pieces_in_flight
  // is confirmed, so that at most that many pieces wait in its outboxes
  // (an embedding of 136M weights is 2.2 GB of messages). The owner's last
  // act stays a send, so every party's round clock ends the input where it
  // would end without pacing (but later by two rounds per window).
  const std::size_t piece_count = (total + input_piece - 1) / input_piece;
  const StreamId paced = pieces_stream();
  for (std::size_t k = 0, first = 0; first < total; ++k, first += input_piece) {
    const std::size_t count = std::min(input_piece, total - first);
    if (id == owner && k >= pieces_in_flight) {
      (void)co_await party_->endpoint_->recv(next_id(), paced, tag_);
      (void)co_await party_->endpoint_->recv(prev_id(), paced, tag_);
    }
    const Share s = co_await input(owner, piece_of(first, count), {count});
    if (id != owner && k + pieces_in_flight < piece_count)
      party_->endpoint_->send(owner, paced, std::vector<std::byte>{}, tag_);
    if (kept) {
      const RingTensor& got = w.kept_is_own ? s.own : s.next;
      std::copy(got.data(), got.data() + count, kept->data() + first);
    }
    if (drawn) {
      const RingTensor& d = w.kept_is_own ? s.next : s.own;
      std::copy(d.data(), d.data() + count, drawn->data() + first);
    }
  }
  if (kept) w.kept = std::make_shared<const RingTensor>(std::move(*kept));
  if (drawn) w.drawn = std::make_shared<const RingTensor>(std::move(*drawn));
  co_return w;
}

Rss3Weight Rss3::transposed(const Weight& w, bool borrowed) {
  if (w.shape.size() != 2)
    throw Error(ErrorCode::invalid_argument, "rss3 transposed: a weight of shape " + shape_string(w.shape) + " is not a matrix");
  Rss3Weight t = w;
  t.shape = {w.shape[1], w.shape[0]};
  t.transposed = !w.transposed;
  t.borrowed = borrowed;
  return t;
}

namespace {
// Rows [begin, end) of the stored matrix's component into `out` (shaped
// for them), from memory or drawn (`begin` * row even: an AES block boundary).
void component_rows(const std::shared_ptr<const RingTensor>& held, const Prg& key, StreamId stream,
                    std::uint64_t block, std::size_t row, std::size_t begin, RingTensor& out) {
  if (held) {
    std::copy(held->data() + begin * row, held->data() + begin * row + out.size(), out.data());
    return;
  }
  std::uint64_t at = block + begin * row / 2;
  key.fill(stream, at, std::span<Ring>(out.data(), out.size()));
}

// Rows [begin, end) of the stored matrix's component (any `begin`).
RingTensor component_range(const std::shared_ptr<const RingTensor>& held, const Prg& key, StreamId stream,
                           std::uint64_t block, const Shape& stored, std::size_t begin, std::size_t end) {
  const std::size_t row = row_size(stored);
  const Shape shape = rows_shape(stored, end - begin);
  if (held || begin * row % 2 == 0) {
    RingTensor out = RingTensor::from_shape(shape);
    component_rows(held, key, stream, block, row, begin, out);
    return out;
  }
  return draw_range(key, stream, block, begin * row, shape);
}

void check_rows(const Rss3Weight& w, std::size_t begin, std::size_t end) {
  if (w.shape.empty() || begin > end || end > w.shape[0])
    throw Error(ErrorCode::invalid_argument, "rss3 expand_rows: rows [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") of a weight of shape " + shape_string(w.shape));
}

// z (m, rows; row stride ldz) += a0 b0^T + a0 b1^T + a1 b0^T for a0, a1 (m,
// k) and b0, b1 (rows, k) read in place: a weight stored transposed, for a
// few rows of a (a decode step's LM head), as dot products along the stored
// rows. More rows of a transpose the block and use the matmul kernel.
constexpr std::size_t dot_rows_max = 8;
void dot_rows(Ring* z, std::size_t ldz, const RingTensor& a0, const RingTensor& a1, const RingMatrixView& b0,
              const RingMatrixView& b1) {
  const std::size_t m = a0.shape()[0], k = a0.shape()[1];
  for (std::size_t i = 0; i < m; ++i) {
    const Ring *x = a0.data() + i * k, *y = a1.data() + i * k;
    for (std::size_t j = 0; j < b0.rows; ++j) {
      const Ring *p = b0.data + j * b0.stride, *q = b1.data + j * b1.stride;
      Ring sum = 0;
      for (std::size_t t = 0; t < k; ++t) sum += x[t] * (p[t] + q[t]) + y[t] * p[t];
      z[i * ldz + j] += sum;
    }
  }
}

// A (rows, cols) block written transposed into `out` (cols, rows).
void transpose_into(const Ring* in, std::size_t rows, std::size_t cols, RingTensor& out) {
  if (out.dimension() != 2 || out.shape()[0] != cols || out.shape()[1] != rows) out = RingTensor::from_shape({cols, rows});
  Ring* o = out.data();
  constexpr std::size_t tile = 8;
  for (std::size_t r0 = 0; r0 < rows; r0 += tile)
    for (std::size_t c0 = 0; c0 < cols; c0 += tile)
      for (std::size_t r = r0; r < std::min(rows, r0 + tile); ++r)
        for (std::size_t c = c0; c < std::min(cols, c0 + tile); ++c) o[c * rows + r] = in[r * cols + c];
}
}  // namespace

Rss3Share Rss3::expand_rows(const Weight& w, std::size_t begin, std::size_t end) const {
  check_rows(w, begin, end);
  if (w.transposed) {  // rows of the read matrix are columns of the stored one: expand it all
    Share all = expand(w);
    return {ring_reshape(ring_slice_last(ring_reshape(all.own, {all.own.size()}), begin * w.shape[1], end * w.shape[1]),
                         rows_shape(w.shape, end - begin)),
            ring_reshape(ring_slice_last(ring_reshape(all.next, {all.next.size()}), begin * w.shape[1], end * w.shape[1]),
                         rows_shape(w.shape, end - begin))};
  }
  const Prg& drawn_key = w.kept_is_own ? party_->prg_next_ : party_->prg_prev_;
  const Prg& kept_key = w.kept_is_own ? party_->prg_prev_ : party_->prg_next_;
  RingTensor kept = component_range(w.kept, kept_key, w.stream, w.kept_block, w.shape, begin, end);
  RingTensor drawn = component_range(w.drawn, drawn_key, w.stream, w.block, w.shape, begin, end);
  if (w.kept_is_own) return {std::move(kept), std::move(drawn)};
  return {std::move(drawn), std::move(kept)};
}

Rss3Share Rss3::expand(const Weight& w) const {
  if (w.transposed) {
    Rss3Weight stored = w;
    stored.shape = w.stored_shape();
    stored.transposed = false;
    Share s = expand(stored);
    return {transpose(s.own), transpose(s.next)};
  }
  if (!w.shape.empty()) return expand_rows(w, 0, w.shape[0]);
  const Prg& drawn_key = w.kept_is_own ? party_->prg_next_ : party_->prg_prev_;
  const Prg& kept_key = w.kept_is_own ? party_->prg_prev_ : party_->prg_next_;
  RingTensor drawn = w.drawn ? *w.drawn : draw_range(drawn_key, w.stream, w.block, 0, w.shape);
  RingTensor kept = w.kept ? *w.kept : draw_range(kept_key, w.stream, w.kept_block, 0, w.shape);
  if (w.kept_is_own) return {std::move(kept), std::move(drawn)};
  return {std::move(drawn), std::move(kept)};
}

RingTensor Rss3::local_matmul_weight(const Share& a, const Weight& w) const {
  if (w.shape.size() != 2 || a.own.dimension() != 2 || a.own.shape()[1] != w.shape[0])
    throw Error(ErrorCode::invalid_argument, "rss3 matmul with a weight: needs (m,k) x (k,n), got " +
                                                 shape_string(shape_of(a.own)) + " x " + shape_string(w.shape));
  const Shape stored = w.stored_shape();
  const std::size_t rows = stored[0], row = stored[1], step = block_rows(row), m = a.own.shape()[0];
  RingTensor z = ring_zeros({m, w.shape[1]});
  ComputePool* pool = party_->options_.pool;
  if (w.kept && w.drawn && !w.transposed) {  // the full share: one product, nothing drawn
    ring_matmul_rss3_accumulate(z, a.own, a.next, w.kept_is_own ? *w.kept : *w.drawn, w.kept_is_own ? *w.drawn : *w.kept,
                                pool);
    return z;
  }
  const Prg& drawn_key = w.kept_is_own ? party_->prg_next_ : party_->prg_prev_;
  const Prg& kept_key = w.kept_is_own ? party_->prg_prev_ : party_->prg_next_;
  // A block of rows of a held component, and the matching columns of a, are
  // read in place; a drawn component needs a buffer: one block's for all
  // blocks (but a shorter last one), as fresh megabyte allocations per
  // block cost page faults. A transposed weight's block gives columns of
  // the product: its components are transposed into buffers first.
  RingTensor kept_buffer, drawn_buffer, own_t, next_t, part;
  auto block_of = [&](const std::shared_ptr<const RingTensor>& held, const Prg& key, std::uint64_t block,
                      RingTensor& buffer, std::size_t begin, std::size_t end) -> RingMatrixView {
    if (held) return ring_matrix_rows(*held, begin, end);
    if (buffer.dimension() != 2 || buffer.shape()[0] != end - begin) buffer = RingTensor::from_shape(rows_shape(stored, end - begin));
    component_rows(nullptr, key, w.stream, block, row, begin, buffer);
    return ring_matrix(buffer);
  };
  for (std::size_t begin = 0; begin < rows; begin += step) {
    const std::size_t end = std::min(rows, begin + step);
    const RingMatrixView kept = block_of(w.kept, kept_key, w.kept_block, kept_buffer, begin, end);
    const RingMatrixView drawn = block_of(w.drawn, drawn_key, w.block, drawn_buffer, begin, end);
    const RingMatrixView own = w.kept_is_own ? kept : drawn, next = w.kept_is_own ? drawn : kept;
    if (!w.transposed) {
      ring_matmul_rss3_accumulate(z, ring_matrix_columns(a.own, begin, end), ring_matrix_columns(a.next, begin, end), own,
                                  next, pool);
      continue;
    }
    if (m <= dot_rows_max) {
      dot_rows(z.data() + begin, w.shape[1], a.own, a.next, own, next);
      continue;
    }
    transpose_into(own.data, end - begin, row, own_t);
    transpose_into(next.data, end - begin, row, next_t);
    part = ring_zeros({m, end - begin});
    ring_matmul_rss3_accumulate(part, a.own, a.next, own_t, next_t, pool);
    for (std::size_t i = 0; i < m; ++i)
      std::copy(part.data() + i * (end - begin), part.data() + (i + 1) * (end - begin), z.data() + i * w.shape[1] + begin);
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
