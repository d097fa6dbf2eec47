module;
#include "prelude.hpp"
module mpcache.proto;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

namespace {
constexpr StreamId setup_stream = ~StreamId{0};

StreamId derive_stream(StreamId parent, std::uint64_t child) {
  std::uint64_t x = parent ^ (child * 0x9E3779B97F4A7C15ull) ^ 0x6A09E667F3BCC909ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x == setup_stream ? x - 1 : x;
}

std::string who(PartyId self, StreamId stream) {
  return "party " + std::to_string(self) + " (stream " + std::to_string(stream) + ")";
}
}  // namespace

// ---- party set-up -----------------------------------------------------------

Rss3Party::Rss3Party(Endpoint& endpoint, Rss3Options options, const PrgKey& next,
                     const PrgKey& prev)
    : endpoint_(&endpoint), id_(endpoint.id()), options_(options), prg_next_(next),
      prg_prev_(prev) {}

Task<std::unique_ptr<Rss3Party>> Rss3Party::setup(Endpoint& endpoint, Rss3Options options) {
  if (endpoint.parties() != 3)
    throw Error(ErrorCode::bad_party, "rss3 needs exactly 3 parties, the endpoint has " +
                                          std::to_string(endpoint.parties()));
  FixedPoint check(options.frac_bits);  // validates the fraction bits
  (void)check;
  const PartyId id = endpoint.id();
  const PartyId next = (id + 1) % 3, prev = (id + 2) % 3;
  PrgKey k_next{}, k_prev{};
  if (options.insecure_seed) {
    k_next = insecure_prg_key(*options.insecure_seed, id);
    k_prev = insecure_prg_key(*options.insecure_seed, prev);
  } else {
    k_next = random_prg_key();
    endpoint.send(next, setup_stream,
                  std::span<const std::byte>(reinterpret_cast<const std::byte*>(k_next.data()),
                                             k_next.size()));
    auto bytes = co_await endpoint.recv(prev, setup_stream);
    if (bytes.size() != k_prev.size())
      throw Error(ErrorCode::protocol, "party " + std::to_string(id) + ": key from party " +
                                           std::to_string(prev) + " has " +
                                           std::to_string(bytes.size()) + " bytes, expected 16");
    std::memcpy(k_prev.data(), bytes.data(), k_prev.size());
  }
  co_return std::make_unique<Rss3Party>(endpoint, options, k_next, k_prev);
}

Rss3 Rss3Party::session() { return Rss3(*this, derive_stream(0x5E5510E5ull, ++sessions_)); }

// ---- plumbing ---------------------------------------------------------------

Rss3 Rss3::fork() {
  Rss3 child(*party_, derive_stream(stream_, ++forks_));
  child.tag_ = tag_;
  return child;
}

RingTensor Rss3::draw_next(const Shape& s) { return party_->prg_next_.draw(stream_, block_next_, s); }
RingTensor Rss3::draw_prev(const Shape& s) { return party_->prg_prev_.draw(stream_, block_prev_, s); }

RingTensor Rss3::zero_share(const Shape& s) {
  RingTensor a = draw_next(s);
  ring_sub_inplace(a, draw_prev(s));
  return a;
}

void Rss3::send(PartyId to, const RingTensor& t) {
  party_->endpoint_->send(to, stream_, ring_bytes(t), tag_);
}

Task<RingTensor> Rss3::recv(PartyId from, Shape shape) {
  auto bytes = co_await party_->endpoint_->recv(from, stream_, tag_);
  if (bytes.size() != element_count(shape) * sizeof(Ring))
    throw Error(ErrorCode::protocol,
                who(party_->id_, stream_) + ": party " + std::to_string(from) + " sent " +
                    std::to_string(bytes.size()) + " bytes, expected " +
                    std::to_string(element_count(shape) * sizeof(Ring)) + " for shape " +
                    shape_string(shape));
  co_return ring_from_bytes(bytes, shape);
}

// ---- input and output -------------------------------------------------------

Task<Rss3Share> Rss3::input(PartyId owner, std::optional<RingTensor> value, Shape shape) {
  const PartyId id = party_->id_;
  if (owner > 2)
    throw Error(ErrorCode::bad_party,
                "rss3 input: owner " + std::to_string(owner) + " is not a party (0..2)");
  if (id == owner && !value)
    throw Error(ErrorCode::invalid_argument,
                who(id, stream_) + " owns this input but passed no value");
  if (id != owner && value)
    throw Error(ErrorCode::invalid_argument, who(id, stream_) + " passed a value for party " +
                                                 std::to_string(owner) + "'s input");
  if (value && shape_of(*value) != shape)
    throw Error(ErrorCode::invalid_argument,
                "rss3 input: value has shape " + shape_string(shape_of(*value)) +
                    ", declared shape is " + shape_string(shape));

  // s_o from k_{o-1} (owner and o-1), s_{o+1} from k_o (owner and o+1),
  // s_{o-1} = x - s_o - s_{o+1} sent by the owner to both others.
  if (id == owner) {
    RingTensor s_own = draw_prev(shape);
    RingTensor s_next = draw_next(shape);
    RingTensor s_last = ring_sub(ring_sub(*value, s_own), s_next);
    send(next_id(), s_last);
    send(prev_id(), s_last);
    co_return Rss3Share{std::move(s_own), std::move(s_next)};
  }
  if (id == (owner + 1) % 3) {
    RingTensor s_own = draw_prev(shape);
    RingTensor s_next = co_await recv(owner, shape);
    co_return Rss3Share{std::move(s_own), std::move(s_next)};
  }
  RingTensor s_next = draw_next(shape);
  RingTensor s_own = co_await recv(owner, shape);
  co_return Rss3Share{std::move(s_own), std::move(s_next)};
}

Task<RingTensor> Rss3::reveal(const Rss3Share& a) {
  send(next_id(), a.own);
  RingTensor missing = co_await recv(prev_id(), shape(a));
  ring_add_inplace(missing, a.own);
  ring_add_inplace(missing, a.next);
  co_return missing;
}

Task<std::optional<RingTensor>> Rss3::reveal_to(PartyId receiver, const Rss3Share& a) {
  if (receiver > 2)
    throw Error(ErrorCode::bad_party,
                "rss3 reveal_to: receiver " + std::to_string(receiver) + " is not a party (0..2)");
  const PartyId id = party_->id_;
  if (id == (receiver + 2) % 3) send(receiver, a.own);
  if (id != receiver) co_return std::nullopt;
  RingTensor missing = co_await recv(prev_id(), shape(a));
  ring_add_inplace(missing, a.own);
  ring_add_inplace(missing, a.next);
  co_return std::optional<RingTensor>(std::move(missing));
}

// ---- local linear operations ------------------------------------------------

Rss3Share Rss3::add(const Share& a, const Share& b) const {
  return {ring_add(a.own, b.own), ring_add(a.next, b.next)};
}
Rss3Share Rss3::sub(const Share& a, const Share& b) const {
  return {ring_sub(a.own, b.own), ring_sub(a.next, b.next)};
}
Rss3Share Rss3::neg(const Share& a) const { return {ring_neg(a.own), ring_neg(a.next)}; }

Rss3Share Rss3::add_public(const Share& a, const RingTensor& c) const {
  require_same_shape(a.own, c, "rss3 add_public");
  Share out = a;
  if (party_->id_ == 0) ring_add_inplace(out.own, c);   // party 0 holds s_0 first
  if (party_->id_ == 2) ring_add_inplace(out.next, c);  // party 2 holds s_0 second
  return out;
}

Rss3Share Rss3::mul_public(const Share& a, const RingTensor& c) const {
  return {ring_mul(a.own, c), ring_mul(a.next, c)};
}

Rss3Share Rss3::matmul_public(const Share& a, const RingTensor& c) const {
  return {ring_matmul(a.own, c), ring_matmul(a.next, c)};
}

// ---- multiplication ---------------------------------------------------------

// z is this party's term of a 3-out-of-3 sharing (zero-share included); each
// party sends z_i to party i-1, which then holds (z_{i-1}, z_i).
Task<Rss3Share> Rss3::reshare(RingTensor z) {
  send(prev_id(), z);
  RingTensor z_next = co_await recv(next_id(), shape_of(z));
  co_return Rss3Share{std::move(z), std::move(z_next)};
}

// Same input, truncated on the way: party 0 keeps a = z_0, parties 1 and 2
// swap z_1, z_2 to learn b = z_1 + z_2 (each masked by a key the receiver
// lacks). y = floor(a/2^d) + ceil(b/2^d) is reshared with y_1 from k_0.
Task<Rss3Share> Rss3::reshare_truncated(RingTensor z, int bits) {
  const Shape s = shape_of(z);
  switch (party_->id_) {
    case 0: {
      RingTensor y1 = draw_next(s);
      RingTensor y0 = ring_sub(ring_shift_floor(z, bits), y1);
      send(2, y0);
      co_return Rss3Share{std::move(y0), std::move(y1)};
    }
    case 1: {
      send(2, z);
      RingTensor y1 = draw_prev(s);
      RingTensor b = co_await recv(2, s);
      ring_add_inplace(b, z);
      co_return Rss3Share{std::move(y1), ring_shift_ceil(b, bits)};
    }
    default: {
      send(1, z);
      RingTensor b = co_await recv(1, s);
      ring_add_inplace(b, z);
      RingTensor y0 = co_await recv(0, s);
      co_return Rss3Share{ring_shift_ceil(b, bits), std::move(y0)};
    }
  }
}

void Rss3::check_bits(int bits) {
  if (bits < 0 || bits >= ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "truncation by " + std::to_string(bits) + " bits is outside [0, 63]");
}

namespace {
RingTensor local_matmul(const Rss3Share& a, const Rss3Share& b) {
  RingTensor z = ring_matmul(a.own, ring_add(b.own, b.next));
  ring_matmul_accumulate(z, a.next, b.own);
  return z;
}
}  // namespace

// z_i = a_i b_i + a_i b_{i+1} + a_{i+1} b_i, as a_i (b_i + b_{i+1}) + a_{i+1} b_i.
RingTensor Rss3::local_product(const Share& a, const Share& b) {
  require_same_shape(a.own, b.own, "rss3 mul");
  RingTensor z = RingTensor::from_shape(a.own.shape());
  const Ring *a0 = a.own.data(), *a1 = a.next.data(), *b0 = b.own.data(), *b1 = b.next.data();
  Ring* out = z.data();
  for (std::size_t i = 0; i < z.size(); ++i) out[i] = a0[i] * (b0[i] + b1[i]) + a1[i] * b0[i];
  return z;
}

Task<Rss3Share> Rss3::mul(const Share& a, const Share& b) {
  RingTensor z = local_product(a, b);
  ring_add_inplace(z, zero_share(shape_of(z)));
  return reshare(std::move(z));
}

Task<Rss3Share> Rss3::matmul(const Share& a, const Share& b) {
  RingTensor z = local_matmul(a, b);
  ring_add_inplace(z, zero_share(shape_of(z)));
  return reshare(std::move(z));
}

Task<Rss3Share> Rss3::mul_trunc(const Share& a, const Share& b, int bits) {
  if (bits < 0) bits = frac_bits();
  check_bits(bits);
  RingTensor z = local_product(a, b);
  ring_add_inplace(z, zero_share(shape_of(z)));
  return reshare_truncated(std::move(z), bits);
}

Task<Rss3Share> Rss3::matmul_trunc(const Share& a, const Share& b) {
  RingTensor z = local_matmul(a, b);
  ring_add_inplace(z, zero_share(shape_of(z)));
  return reshare_truncated(std::move(z), frac_bits());
}

// Party 0 holds a = s_0 + s_1, parties 1 and 2 hold b = s_2.
Task<Rss3Share> Rss3::truncate(const Share& a, int bits) {
  check_bits(bits);
  const Shape s = shape(a);
  switch (party_->id_) {
    case 0: {
      RingTensor y1 = draw_next(s);
      RingTensor y0 = ring_sub(ring_shift_floor(ring_add(a.own, a.next), bits), y1);
      send(2, y0);
      co_return Rss3Share{std::move(y0), std::move(y1)};
    }
    case 1: {
      RingTensor y1 = draw_prev(s);
      co_return Rss3Share{std::move(y1), ring_shift_ceil(a.next, bits)};
    }
    default: {
      RingTensor y0 = co_await recv(0, s);
      co_return Rss3Share{ring_shift_ceil(a.own, bits), std::move(y0)};
    }
  }
}

}  // namespace mpcache
