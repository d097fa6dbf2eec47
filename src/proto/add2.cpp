// add2 set-up, plumbing, input/output, products and truncation (see add2.cppm).
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
#include "wire.hpp"

namespace mpcache {

namespace {
std::string who(PartyId self, StreamId stream) {
  return (self == add2_dealer ? std::string("add2 dealer") : "add2 party " + std::to_string(self)) +
         " (stream " + std::to_string(stream) + ")";
}
}  // namespace

// ---- set-up -----------------------------------------------------------------

Add2Party::Add2Party(Endpoint& endpoint, Add2Options options, std::optional<PrgKey> k0, std::optional<PrgKey> k1)
    : endpoint_(&endpoint), id_(endpoint.id()), options_(options) {
  if (k0) prg_[0].emplace(*k0);
  if (k1) prg_[1].emplace(*k1);
}

Task<std::unique_ptr<Add2Party>> Add2Party::setup(Endpoint& endpoint, Add2Options options) {
  if (endpoint.parties() != 3)
    throw Error(ErrorCode::bad_party, "add2 needs 3 parties (two online and the dealer, party 2), the endpoint has " +
                                          std::to_string(endpoint.parties()));
  FixedPoint check(options.frac_bits);
  (void)check;
  const PartyId id = endpoint.id();
  const wire::Settings settings{options.frac_bits, options.exact_truncation,
                                options.comparisons == Add2Comparisons::dcf};
  std::array<std::optional<PrgKey>, 2> keys;
  if (options.insecure_seed) {
    for (PartyId k = 0; k < 2; ++k)
      if (id == k || id == add2_dealer) keys[k] = insecure_prg_key(*options.insecure_seed, 0xADD2'0000ull + k);
  } else if (id == add2_dealer) {
    // Each party's key and the settings all must share: a party that
    // truncates differently would read every later correction wrongly.
    for (PartyId k = 0; k < 2; ++k) {
      keys[k] = random_prg_key();
      std::vector<std::byte> message(keys[k]->size() + wire::Settings::bytes);
      std::memcpy(message.data(), keys[k]->data(), keys[k]->size());
      wire::put_settings(settings, message.data() + keys[k]->size());
      endpoint.send(k, protocol_setup_stream, std::move(message));
    }
  } else {
    const auto bytes = co_await endpoint.recv(add2_dealer, protocol_setup_stream);
    const std::string from = "add2 party " + std::to_string(id) + ": the dealer (party 2)";
    PrgKey key{};
    if (bytes.size() != key.size() + wire::Settings::bytes)
      throw Error(ErrorCode::protocol, from + " sent a key message of " + std::to_string(bytes.size()) +
                                           " bytes, expected " + std::to_string(key.size() + wire::Settings::bytes));
    std::memcpy(key.data(), bytes.data(), key.size());
    keys[id] = key;
    wire::check_settings(bytes.data() + key.size(), settings, from);
  }
  co_return std::make_unique<Add2Party>(endpoint, options, keys[0], keys[1]);
}

Add2 Add2Party::session() { return Add2(*this, derive_stream(0xADD25E55ull, ++sessions_)); }

// ---- plumbing ---------------------------------------------------------------

Add2 Add2::fork() {
  Add2 child(*party_, derive_stream(stream_, ++forks_));
  child.tag_ = tag_;
  return child;
}

RingTensor Add2::draw(int key, const Shape& s) {
  return party_->prg_[static_cast<std::size_t>(key)]->draw(stream_, block_[static_cast<std::size_t>(key)], s);
}

RingTensor Add2::draw_mask(const Shape& s) {
  if (!dealer()) return draw(static_cast<int>(party_->id_), s);
  RingTensor m = draw(0, s);
  ring_add_inplace(m, draw(1, s));
  return m;
}

RingTensor Add2::draw_first_share(const Shape& s) {
  return party_->id_ == 1 ? RingTensor{} : draw(0, s);
}

void Add2::send(PartyId to, const RingTensor& t, int low_bits) {
  if (low_bits >= ring_bits) {
    party_->endpoint_->send(to, stream_, ring_bytes(t), tag_);
    return;
  }
  party_->endpoint_->send(to, stream_, wire::pack_low(t, low_bits), tag_);
}

Task<RingTensor> Add2::recv(PartyId from, Shape shape, int low_bits) {
  auto bytes = co_await party_->endpoint_->recv(from, stream_, tag_);
  co_return wire::unpack(std::move(bytes), shape, low_bits, [&] {
    return who(party_->id_, stream_) + ": " +
           (from == add2_dealer ? std::string("the dealer (party 2)") : "party " + std::to_string(from));
  });
}

// Both parties' tensors of one shape: this party's goes out, the other's comes back.
Task<RingTensor> Add2::exchange(const RingTensor& mine) {
  send(other(), mine);
  co_return co_await recv(other(), shape_of(mine));
}

void Add2::deal(const RingTensor& total, const RingTensor& first) { send(1, ring_sub(total, first)); }

Task<RingTensor> Add2::dealt(const Shape& s) { return recv(add2_dealer, s); }

// ---- input and output -------------------------------------------------------

// The owner draws V from its key (the dealer draws the same) and sends the
// other party x - V, which both then know: shares (V, x - V), and the mask
// is fixed for every product this value takes part in.
Task<Add2Share> Add2::input(PartyId owner, std::optional<RingTensor> value, Shape shape) {
  const PartyId id = party_->id_;
  if (owner > 1)
    throw Error(ErrorCode::bad_party, "add2 input: owner " + std::to_string(owner) +
                                          (owner == add2_dealer ? " is the dealer, which holds no input"
                                                                : " is not a party (0 or 1)"));
  if (id == owner && !value)
    throw Error(ErrorCode::invalid_argument, who(id, stream_) + " owns this input but passed no value");
  if (id != owner && value)
    throw Error(ErrorCode::invalid_argument,
                who(id, stream_) + " passed a value for party " + std::to_string(owner) + "'s input");
  if (value && shape_of(*value) != shape)
    throw Error(ErrorCode::invalid_argument, "add2 input: value has shape " + shape_string(shape_of(*value)) +
                                                 ", declared shape is " + shape_string(shape));
  auto fixed = make_shared<Add2Mask>();
  if (dealer()) {
    fixed->mask = draw(static_cast<int>(owner), shape);
    co_return Share{ring_zeros(shape), std::move(fixed)};
  }
  if (id == owner) {
    RingTensor v = draw(static_cast<int>(owner), shape);
    fixed->opened = ring_sub(*value, v);
    send(other(), *fixed->opened);
    fixed->mask = v;
    co_return Share{std::move(v), std::move(fixed)};
  }
  fixed->opened = co_await recv(owner, shape);
  co_return Share{*fixed->opened, std::move(fixed)};
}

Task<RingTensor> Add2::reveal(const Share& a) {
  if (dealer()) co_return ring_zeros(shape(a));
  co_return ring_add(co_await exchange(a.value), a.value);
}

Task<std::optional<RingTensor>> Add2::reveal_to(PartyId receiver, const Share& a) {
  if (receiver > 1)
    throw Error(ErrorCode::bad_party, "add2 reveal_to: receiver " + std::to_string(receiver) +
                                          (receiver == add2_dealer ? " is the dealer, which learns no output"
                                                                   : " is not a party (0 or 1)"));
  if (dealer()) co_return std::nullopt;
  if (party_->id_ != receiver) {
    send(receiver, a.value);
    co_return std::nullopt;
  }
  RingTensor theirs = co_await recv(other(), shape(a));
  ring_add_inplace(theirs, a.value);
  co_return std::optional<RingTensor>(std::move(theirs));
}

// ---- products -----------------------------------------------------------------

Add2::Operand Add2::operand(const Share& x) {
  Operand o;
  if (x.fixed) {
    o.fixed = x.fixed;
    return o;
  }
  o.mask_now = draw_mask(shape(x));
  if (!dealer()) o.outgoing = ring_sub(x.value, *o.mask_now);
  return o;
}

// Beaver: with a = A + Ra, b = B + Rb (A, B public, Ra, Rb masks whose
// product C = Ra x Rb the dealer shares), a x b = A x B + A x Rb + Ra x B
// + C; party i takes its shares of Rb, Ra and C (A x B at party 0 only).
Task<Add2Share> Add2::product(const Share& a, const Share& b, Product kind) {
  const bool matrix = kind == Product::matrix;
  if (!matrix) require_same_shape(a.value, b.value, "add2 mul");
  if (matrix && (shape(a).size() != 2 || shape(b).size() != 2 || shape(a)[1] != shape(b)[0]))
    throw Error(ErrorCode::invalid_argument,
                "add2 matmul: shapes " + shape_string(shape(a)) + " and " + shape_string(shape(b)) + " do not chain");
  const Shape out_shape = matrix ? Shape{shape(a)[0], shape(b)[1]} : shape(a);
  ComputePool* pool = party_->options_.pool;
  Operand x = operand(a), y = operand(b);
  RingTensor first = draw_first_share(out_shape);
  if (dealer()) {
    // The dealer knows every mask whole.
    deal(matrix ? ring_matmul(*x.mask(), *y.mask(), pool) : ring_mul(*x.mask(), *y.mask(), pool), first);
    co_return Share{ring_zeros(out_shape), nullptr};
  }
  // Open the fresh operands: one message each way.
  if (x.fresh()) send(other(), x.outgoing);
  if (y.fresh()) send(other(), y.outgoing);
  RingTensor z = party_->id_ == 1 ? co_await dealt(out_shape) : std::move(first);
  if (x.fresh()) {
    x.opened_now = co_await recv(other(), shape(a));
    ring_add_inplace(x.opened_now, x.outgoing);
  }
  if (y.fresh()) {
    y.opened_now = co_await recv(other(), shape(b));
    ring_add_inplace(y.opened_now, y.outgoing);
  }
  auto accumulate = [&](const RingTensor& l, const RingTensor& r) {
    if (matrix) ring_matmul_accumulate(z, l, r, pool);
    else ring_add_inplace(z, ring_mul(l, r, pool), pool);
  };
  // A x B (party 0 only) and A x Rb share their left factor: one product
  // of A by (B + Rb) instead of two.
  const RingTensor* rb = y.mask();
  if (party_->id_ == 0) accumulate(x.opened(), rb ? ring_add(y.opened(), *rb) : y.opened());
  else if (rb) accumulate(x.opened(), *rb);
  if (const RingTensor* m = x.mask()) accumulate(*m, y.opened());
  co_return Share{std::move(z), nullptr};
}

Task<Add2Share> Add2::mul(const Share& a, const Share& b) { return product(a, b, Product::elementwise); }
Task<Add2Share> Add2::matmul(const Share& a, const Share& b) { return product(a, b, Product::matrix); }

// ---- truncation ---------------------------------------------------------------

void Add2::check_bits(int bits) {
  if (bits < 0 || bits > 62)
    throw Error(ErrorCode::invalid_argument, "add2 truncation by " + std::to_string(bits) + " bits is outside [0, 62]");
}

Add2Share Add2::truncate_local(const RingTensor& x, int bits) const {
  if (dealer()) return {ring_zeros(shape_of(x)), nullptr};
  return {party_->id_ == 0 ? ring_shift_floor(x, bits) : ring_shift_ceil(x, bits), nullptr};
}

// The dealer deals r (party i's share from k_i) with shares of r >> d and
// of msb(r) (party 0's from k0, party 1's in one correction of 2n words).
Task<Add2Share> Add2::truncate_exact(RingTensor x, int bits) {
  const Shape s = shape_of(x);
  const std::size_t n = x.size();
  RingTensor r = draw_mask(s);
  RingTensor high = draw_first_share(s), top = draw_first_share(s);
  if (dealer()) {
    RingTensor both = RingTensor::from_shape({2 * n});
    for (std::size_t i = 0; i < n; ++i) {
      both.data()[i] = (r.data()[i] >> bits) - high.data()[i];
      both.data()[n + i] = (r.data()[i] >> 63) - top.data()[i];
    }
    send(1, both);
    co_return Share{ring_zeros(s), nullptr};
  }
  constexpr Ring offset = Ring{1} << 62;  // x + 2^62 lies in [0, 2^63) for |x| < 2^62
  RingTensor c = std::move(x);
  ring_add_inplace(c, r);
  if (party_->id_ == 0)
    for (auto& v : c) v += offset;
  send(other(), c);
  if (party_->id_ == 1) {
    const RingTensor both = co_await dealt({2 * n});
    high = RingTensor::from_shape(s);
    top = RingTensor::from_shape(s);
    std::copy(both.begin(), both.begin() + static_cast<std::ptrdiff_t>(n), high.begin());
    std::copy(both.begin() + static_cast<std::ptrdiff_t>(n), both.end(), top.begin());
  }
  ring_add_inplace(c, co_await recv(other(), s));
  RingTensor y = RingTensor::from_shape(s);
  const int up = ring_bits - bits;
  for (std::size_t i = 0; i < n; ++i) {
    const Ring opened = c.data()[i];
    Ring v = Ring{0} - high.data()[i];
    if (bits > 0 && (opened >> 63) == 0) v += top.data()[i] << up;
    if (party_->id_ == 0) v += (opened >> bits) - (offset >> bits);
    y.data()[i] = v;
  }
  co_return Share{std::move(y), nullptr};
}

Task<Add2Share> Add2::truncate(const Share& a, int bits) {
  check_bits(bits);
  if (bits == 0) co_return Share{a.value, nullptr};
  if (!party_->options_.exact_truncation) co_return truncate_local(a.value, bits);
  co_return co_await truncate_exact(a.value, bits);
}

Task<Add2Share> Add2::mul_trunc(const Share& a, const Share& b, int bits) {
  if (bits < 0) bits = frac_bits();
  check_bits(bits);
  const Share z = co_await mul(a, b);
  co_return co_await truncate(z, bits);
}

Task<Add2Share> Add2::matmul_trunc(const Share& a, const Share& b) {
  const Share z = co_await matmul(a, b);
  co_return co_await truncate(z, frac_bits());
}

}  // namespace mpcache
