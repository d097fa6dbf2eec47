module;
#include "prelude.hpp"
module mpcache.proto;
import mpcache.core;
import mpcache.async;
import mpcache.net;
#include "wire.hpp"

namespace mpcache {
// The optional hooks (protocol.cppm) this backend offers, and those it
// deliberately lacks: a drifted signature is a compile error here, not a
// feature that silently switches off.
static_assert(Protocol<Rss3> && ApplyN<Rss3> && SummingMatmul<Rss3> && !ExactReals<Rss3>);
static_assert(SignBits<Rss3> && ArithmeticSign<Rss3> && NarrowArithmeticSign<Rss3>);
static_assert(DcfCostsOption<Rss3> && DcfStoreCostsOption<Rss3> && TruncationModeOption<Rss3>);
static_assert(CircuitComparisonsOption<Rss3> && TruncationPairsRefill<Rss3> && ComparisonStoreRefill<Rss3>);
static_assert(WeightPacing<Rss3> && CostTagging<Rss3>);
static_assert(!ArithmeticSignCosts<Rss3Costs> && NarrowArithmeticSignCosts<Rss3DcfCosts> &&
              NarrowArithmeticSignCosts<Rss3DcfStoreCosts>);



namespace {
std::string who(PartyId self, StreamId stream) {
  return "party " + std::to_string(self) + " (stream " + std::to_string(stream) + ")";
}
}  // namespace

// ---- party set-up -----------------------------------------------------------

Rss3Party::Rss3Party(Endpoint& endpoint, Rss3Options options, const PrgKey& next,
                     const PrgKey& prev)
    : endpoint_(&endpoint), id_(endpoint.id()), options_(options), prg_next_(next),
      prg_prev_(prev), store_(std::make_unique<Rss3DcfStore>(id_)) {}

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
    // The key, then the settings every party must share: a party that
    // truncates differently would desynchronise every later message.
    k_next = random_prg_key();
    const wire::Settings settings{options.frac_bits, options.exact_truncation,
                                  options.comparisons == Rss3Comparisons::dcf, options.offline_budget,
                                  options.dcf_slice_bytes, options.truncation_pairs_budget};
    std::vector<std::byte> message(k_next.size() + wire::Settings::bytes);
    std::memcpy(message.data(), k_next.data(), k_next.size());
    wire::put_settings(settings, message.data() + k_next.size());
    endpoint.send(next, protocol_setup_stream, message);
    auto bytes = co_await endpoint.recv(prev, protocol_setup_stream);
    const std::string from = "party " + std::to_string(id) + ": party " + std::to_string(prev);
    if (bytes.size() != message.size())
      throw Error(ErrorCode::protocol, from + "'s key message has " + std::to_string(bytes.size()) +
                                           " bytes, expected " + std::to_string(message.size()));
    std::memcpy(k_prev.data(), bytes.data(), k_prev.size());
    wire::check_settings(bytes.data() + k_prev.size(), settings, from);
  }
  co_return std::make_unique<Rss3Party>(endpoint, options, k_next, k_prev);
}

Rss3 Rss3Party::session() { return Rss3(*this, derive_stream(0x5E5510E5ull, ++sessions_)); }

namespace {
constexpr StreamId low_stream_bits = (StreamId{1} << scope_shift) - 1;
StreamId in_scope(StreamId stream, ScopeId scope) { return (stream & low_stream_bits) | (StreamId{scope} << scope_shift); }
}  // namespace

Rss3 Rss3Party::scoped_session(std::uint64_t number) {
  const auto scope = static_cast<ScopeId>(1 + number % max_scope);
  return Rss3(*this, in_scope(derive_stream(0x5E55C09Eull, number), scope), /*scoped=*/true);
}

// ---- plumbing ---------------------------------------------------------------

Rss3 Rss3::fork() {
  const StreamId derived = derive_stream(stream_, ++forks_);
  Rss3 child(*party_, scoped_ ? in_scope(derived, stream_scope(stream_)) : derived, scoped_);
  child.tag_ = tag_;
  child.on_circuit_ = on_circuit_;
  child.pairs_off_ = pairs_off_;
  if (plan_key_ != 0) child.plan_key_ = Rss3TruncationPlan::mix(plan_key_, ++plan_forks_);
  // A share of this stream's truncation pairs at each shift, back to it when the fork ends.
  for (const auto& [bits, mine] : pairs_) {
    const auto store = party_->pairs_.find(bits);
    if (!mine || store == party_->pairs_.end() || mine->epoch() != store->second.epoch() || mine->held() == 0) continue;
    auto share = make_shared<Rss3TruncationGrants>(mine->epoch(), mine);
    for (const auto& r : mine->take_back(mine->fork_share())) share->add(r);
    child.pairs_.emplace(bits, std::move(share));
  }
  return child;
}

// input_weight's confirmations (rss3_weights.cpp) travel on a stream of
// their own (no fork number reaches ~0), so that one left unreceived never
// meets the session's messages.
StreamId Rss3::confirmations_stream() const {
  const StreamId derived = derive_stream(stream_, ~std::uint64_t{0});
  return scoped_ ? in_scope(derived, stream_scope(stream_)) : derived;
}

StreamId Rss3::pieces_stream() const {
  const StreamId derived = derive_stream(stream_, ~std::uint64_t{1});
  return scoped_ ? in_scope(derived, stream_scope(stream_)) : derived;
}

RingTensor Rss3::draw_next(const Shape& s) { return party_->prg_next_.draw(stream_, block_next_, s); }
RingTensor Rss3::draw_prev(const Shape& s) { return party_->prg_prev_.draw(stream_, block_prev_, s); }

RingTensor Rss3::zero_share(const Shape& s) {
  RingTensor a = draw_next(s);
  ring_sub_inplace(a, draw_prev(s), party_->options_.pool);
  return a;
}

void Rss3::send(PartyId to, const RingTensor& t, int low_bits) {
  if (low_bits >= ring_bits) {
    party_->endpoint_->send(to, stream_, ring_bytes(t), tag_);
    return;
  }
  party_->endpoint_->send(to, stream_, wire::pack_low(t, low_bits), tag_);
}

Task<RingTensor> Rss3::recv(PartyId from, Shape shape, int low_bits) {
  auto bytes = co_await party_->endpoint_->recv(from, stream_, tag_);
  co_return wire::unpack(std::move(bytes), shape, low_bits,
                         [&] { return who(party_->id_, stream_) + ": party " + std::to_string(from); });
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
  if (truncation_pairs_on(bits)) return truncate_with_pairs(std::move(z), bits);
  return reshare_truncated_in_two_rounds(std::move(z), bits);
}

Task<Rss3Share> Rss3::reshare_truncated_in_two_rounds(RingTensor z, int bits) {
  if (party_->id_ == 0) co_return co_await truncate_view(std::move(z), bits);
  // Parties 1 and 2 exchange their terms: both then hold b = z_1 + z_2.
  const PartyId other = party_->id_ == 1 ? 2 : 1;
  send(other, z);
  RingTensor b = co_await recv(other, shape_of(z));
  ring_add_inplace(b, z);
  co_return co_await truncate_view(std::move(b), bits);
}

namespace {
// The wrap of a + b when |a + b mod 2^64| < 2^62, from one bit of each side.
// Both halves must lie in the top quarter (>= 2^62, signed) for a + b to
// wrap upwards, or both in the bottom one (< -2^62) for it to wrap down.
// When b is in the top quarter, a cannot lie in [0, 2^62) (the sum would
// be out of range), so a wraps it exactly when a >= 0; when b is in the
// bottom quarter, a wraps it down exactly when a < 0. So with M = msb(a):
//   w = 1 - M (b top), -M (b bottom), 0 (b in the middle half),
// affine in the single bit M, with coefficients that b alone fixes.
enum class Quarter { middle, top, bottom };
Quarter quarter_of(Ring b) {
  const auto v = static_cast<std::int64_t>(b);
  return v >= (std::int64_t{1} << 62) ? Quarter::top : v < -(std::int64_t{1} << 62) ? Quarter::bottom : Quarter::middle;
}
Ring sign_bit(Ring a) { return a >> (ring_bits - 1); }
// w = [top] - [not middle] M, as the parties holding b apply it to a masked M.
Ring wrap_from(Quarter q, Ring m) { return (q == Quarter::top ? Ring{1} : 0) - (q == Quarter::middle ? 0 : m); }

// t += m 2^shift and t -= m 2^shift, elementwise.
void add_shifted(RingTensor& t, const RingTensor& m, int shift) {
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] += m.data()[i] << shift;
}
void sub_shifted(RingTensor& t, const RingTensor& m, int shift) {
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] -= m.data()[i] << shift;
}
}  // namespace

// Party 0 holds a, parties 1 and 2 hold b. The result's components: y1
// (parties 0, 1) from their shared key, y0 = floor(a/2^d) - y1 (party 0
// sends it to 2), y2 = ceil(b/2^d). Exact truncation subtracts w 2^(64-d)
// for the wrap w = [b top] - [b not middle] M (quarter_of above): party 0
// offers party 1 M + rho (rho from its key with party 2); party 1 applies
// b's coefficients to it, party 2 to -rho, so their parts add up to w;
// each sends its part masked (mu from the key of parties 0 and 1, nu from
// that of parties 0 and 2), y2 takes the total and y1, y0 the masks back.
// Used after a product, where parties 1 and 2 learn b only in the
// product's round: 2 rounds in all.
Task<Rss3Share> Rss3::truncate_view(RingTensor part, int bits) {
  const Shape s = shape_of(part);
  const std::size_t n = part.size();
  const bool exact = party_->options_.exact_truncation && bits > 0;
  const int up = ring_bits - bits;  // the wrap's weight in the result: 2^(64-d)
  switch (party_->id_) {
    case 0: {
      RingTensor y1 = draw_next(s);
      RingTensor y0 = ring_sub(ring_shift_floor(part, bits), y1);
      if (exact) {
        const RingTensor mu = draw_next(s);
        const RingTensor rho = draw_prev(s), nu = draw_prev(s);
        RingTensor offer = RingTensor::from_shape(s);
        for (std::size_t i = 0; i < n; ++i) offer.data()[i] = sign_bit(part.data()[i]) + rho.data()[i];
        send(1, offer, bits);
        add_shifted(y0, nu, up);
        add_shifted(y1, mu, up);
      }
      send(2, y0);
      co_return Rss3Share{std::move(y0), std::move(y1)};
    }
    case 1: {
      RingTensor y1 = draw_prev(s);
      RingTensor y2 = ring_shift_ceil(part, bits);
      if (exact) {
        const RingTensor mu = draw_prev(s);
        const RingTensor offer = co_await recv(0, s, bits);
        RingTensor mine = RingTensor::from_shape(s);
        for (std::size_t i = 0; i < n; ++i)
          mine.data()[i] = wrap_from(quarter_of(part.data()[i]), offer.data()[i]) + mu.data()[i];
        send(2, mine, bits);
        const RingTensor theirs = co_await recv(2, s, bits);
        ring_add_inplace(mine, theirs);
        sub_shifted(y2, mine, up);
        add_shifted(y1, mu, up);
      }
      co_return Rss3Share{std::move(y1), std::move(y2)};
    }
    default: {
      RingTensor y2 = ring_shift_ceil(part, bits);
      if (exact) {
        const RingTensor rho = draw_next(s), nu = draw_next(s);
        RingTensor mine = RingTensor::from_shape(s);
        // wrap_from(q, M + rho) + (this) = w: the [top] term is party 1's.
        for (std::size_t i = 0; i < n; ++i)
          mine.data()[i] = nu.data()[i] + (quarter_of(part.data()[i]) == Quarter::middle ? 0 : rho.data()[i]);
        send(1, mine, bits);
        const RingTensor theirs = co_await recv(1, s, bits);
        ring_add_inplace(mine, theirs);
        sub_shifted(y2, mine, up);
      }
      RingTensor y0 = co_await recv(0, s);
      co_return Rss3Share{std::move(y2), std::move(y0)};
    }
  }
}

void Rss3::check_bits(int bits) {
  if (bits < 0 || bits >= ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "truncation by " + std::to_string(bits) + " bits is outside [0, 63]");
}

namespace {
RingTensor local_matmul(const Rss3Share& a, const Rss3Share& b, ComputePool* pool) {
  RingTensor z = ring_zeros({a.own.dimension() == 2 ? a.own.shape()[0] : 0,
                             b.own.dimension() == 2 ? b.own.shape()[1] : 0});
  ring_matmul_rss3_accumulate(z, a.own, a.next, b.own, b.next, pool);  // checks the shapes
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
  RingTensor z = local_matmul(a, b, party_->options_.pool);
  ring_add_inplace(z, zero_share(shape_of(z)), party_->options_.pool);
  return reshare(std::move(z));
}

Task<Rss3Share> Rss3::matmul_sum(std::size_t terms, std::function<std::pair<Share, Share>(std::size_t)> term) {
  if (terms == 0) throw Error(ErrorCode::invalid_argument, "rss3 matmul_sum of zero terms");
  std::optional<RingTensor> z;
  for (std::size_t i = 0; i < terms; ++i) {
    const auto [a, b] = term(i);
    if (!z) {
      z = local_matmul(a, b, party_->options_.pool);
      continue;
    }
    // The accumulate names a term whose shape does not fit the first's.
    ring_matmul_rss3_accumulate(*z, a.own, a.next, b.own, b.next, party_->options_.pool);
  }
  ring_add_inplace(*z, zero_share(shape_of(*z)), party_->options_.pool);
  co_return co_await reshare(std::move(*z));
}

Task<Rss3Share> Rss3::mul_trunc(const Share& a, const Share& b, int bits) {
  if (bits < 0) bits = frac_bits();
  check_bits(bits);
  RingTensor z = local_product(a, b);
  ring_add_inplace(z, zero_share(shape_of(z)));
  return reshare_truncated(std::move(z), bits);
}

Task<Rss3Share> Rss3::matmul_trunc(const Share& a, const Share& b) {
  RingTensor z = local_matmul(a, b, party_->options_.pool);
  ring_add_inplace(z, zero_share(shape_of(z)), party_->options_.pool);
  return reshare_truncated(std::move(z), frac_bits());
}

// Party 0 holds a = s_0 + s_1, parties 1 and 2 hold b = s_2. Both halves
// are known before any message, so exact truncation takes one round.
Task<Rss3Share> Rss3::truncate(const Share& a, int bits) {
  check_bits(bits);
  RingTensor view = party_->id_ == 0 ? ring_add(a.own, a.next) : party_->id_ == 1 ? a.next : a.own;
  if (party_->options_.exact_truncation && bits > 0)
    co_return co_await truncate_view_exact_at_once(std::move(view), bits);
  co_return co_await truncate_view(std::move(view), bits);
}

// Exact truncation in one round when b is known from the start. As in
// truncate_view, y = floor(a/2^d) + ceil(b/2^d) - w 2^(64-d) with
// w = [b top] - [b not middle] M; here parties 1 and 2 each learn w + rho
// in the same round, by an oblivious transfer in which the other helps:
//   rho = u + v, u from party 0's key with party 1, v from its key with 2.
//   Party 0 sends party 1 f = M + k (k from its key with party 2) and
//   party 2 f' = M + j (j from its key with party 1). Party 2 sends party 1
//   g = v + [b not middle] k, party 1 sends party 2 g' = u + [b not middle] j.
//   Party 1: u + g - [b not middle] f + [b top] = rho + w; party 2 the same
//   from v, g' and f'.
// Both put -(rho + w) 2^(64-d) into y2, and party 0 puts +rho 2^(64-d) into
// y0 (which it sends to party 2, masked by y1 as always).
// What each sees: party 1 gets f and g, uniform and independent whatever M
// is, since k and v are unknown to it; party 2 likewise with j and u.
// rho + w is uniform to each. Only rho + w mod 2^d matters: the words
// travel as ceil(d/8) bytes. Party 0 sends y0 and one word to each of the
// others, parties 1 and 2 one word each: the bytes of the two-round form.
Task<Rss3Share> Rss3::truncate_view_exact_at_once(RingTensor part, int bits) {
  const Shape s = shape_of(part);
  const std::size_t n = part.size();
  const int up = ring_bits - bits;  // the wrap's weight in the result: 2^(64-d)
  // Parties 1 and 2: b's quarters (both steps read them), b's own mask
  // from the helper's key, then rho + w.
  std::vector<Quarter> quarters;
  if (party_->id_ != 0) {
    quarters.resize(n);
    for (std::size_t i = 0; i < n; ++i) quarters[i] = quarter_of(part.data()[i]);
  }
  auto helper_word = [&](const RingTensor& share_of_rho, const RingTensor& mask) {
    RingTensor out = RingTensor::from_shape(s);
    for (std::size_t i = 0; i < n; ++i)
      out.data()[i] = share_of_rho.data()[i] + (quarters[i] == Quarter::middle ? 0 : mask.data()[i]);
    return out;
  };
  auto take_wrap = [&](RingTensor& y2, const RingTensor& share_of_rho, const RingTensor& from_helper,
                       const RingTensor& masked_m) {
    for (std::size_t i = 0; i < n; ++i) {
      const Ring rho_plus_w = share_of_rho.data()[i] + from_helper.data()[i] + wrap_from(quarters[i], masked_m.data()[i]);
      y2.data()[i] -= rho_plus_w << up;
    }
  };
  switch (party_->id_) {
    case 0: {
      RingTensor y1 = draw_next(s);
      const RingTensor u = draw_next(s), j = draw_next(s);
      const RingTensor v = draw_prev(s), k = draw_prev(s);
      RingTensor y0 = ring_sub(ring_shift_floor(part, bits), y1);
      RingTensor to_1 = RingTensor::from_shape(s), to_2 = RingTensor::from_shape(s);
      for (std::size_t i = 0; i < n; ++i) {
        const Ring m = sign_bit(part.data()[i]);
        to_1.data()[i] = m + k.data()[i];
        to_2.data()[i] = m + j.data()[i];
        y0.data()[i] += (u.data()[i] + v.data()[i]) << up;
      }
      send(1, to_1, bits);
      send(2, y0);
      send(2, to_2, bits);
      co_return Rss3Share{std::move(y0), std::move(y1)};
    }
    case 1: {
      RingTensor y1 = draw_prev(s);
      const RingTensor u = draw_prev(s), j = draw_prev(s);
      send(2, helper_word(u, j), bits);
      const RingTensor from_0 = co_await recv(0, s, bits);
      const RingTensor from_2 = co_await recv(2, s, bits);
      RingTensor y2 = ring_shift_ceil(part, bits);
      take_wrap(y2, u, from_2, from_0);
      co_return Rss3Share{std::move(y1), std::move(y2)};
    }
    default: {
      const RingTensor v = draw_next(s), k = draw_next(s);
      send(1, helper_word(v, k), bits);
      RingTensor y0 = co_await recv(0, s);
      const RingTensor from_0 = co_await recv(0, s, bits);
      const RingTensor from_1 = co_await recv(1, s, bits);
      RingTensor y2 = ring_shift_ceil(part, bits);
      take_wrap(y2, v, from_1, from_0);
      co_return Rss3Share{std::move(y2), std::move(y0)};
    }
  }
}

}  // namespace mpcache
