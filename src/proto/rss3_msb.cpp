// rss3 msb_bits: the sign bit of a w-bit value on packed bit planes.
//
// For the elements it leads, party L holds A = s_L + s_{L+1} and parties
// L+1 ("first") and L+2 ("second") both hold B = s_{L+2}; x = A + B. The
// sign of x mod 2^w is A_{w-1} ^ B_{w-1} ^ carry, the carry out of the
// low m = w - 1 bits. Those positions form groups of g (2..6). A group's
// generate G and propagate P are XORs of products (monomials) of A's bits
// with coefficients that depend on B's bits only. Round 1: the lead sends
// first every monomial of every group, masked with bits from its key with
// second (2^g - 1 planes per group). First then holds the XOR of masked
// monomial & coefficient, second the XOR of mask & coefficient: together
// G and P of every group. Round 2: first and second reshare those planes
// into a replicated sharing (second's message needs nothing from round 1,
// so it goes out in round 1). Then a carry tree of ANDs halves the groups
// per round: G = G_hi ^ P_hi G_lo, P = P_hi P_lo (the lowest group's P is
// never needed). All bits travel as planes packed 64 elements to a word.
// Each party leads a third of the elements, so the lead's larger first
// message is spread evenly.
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

namespace {

std::size_t words_for(std::size_t n) { return (n + 63) / 64; }

// Beyond 6 positions a group's 2^g - 1 monomials outweigh the tree level
// they save.
constexpr int max_group = 6;

// Groups of `group` positions over the m low positions, from the bottom.
struct Groups {
  std::vector<int> lo, size;
  std::size_t count() const { return lo.size(); }
  // Planes the lead sends in round 1: every non-empty monomial of every group, and A's top bit.
  std::size_t monomial_planes() const {
    std::size_t q = 1;
    for (int s : size) q += (std::size_t{1} << s) - 1;
    return q;
  }
  // Planes first and second each reshare: G of every group, P of all but the lowest, the top bit.
  std::size_t reshared_planes() const { return 2 * count(); }
};

Groups make_groups(int m, int group) {
  Groups g;
  for (int lo = 0; lo < m; lo += group) {
    g.lo.push_back(lo);
    g.size.push_back(std::min(group, m - lo));
  }
  return g;
}

struct Shape3 {
  std::uint64_t rounds;
  std::uint64_t lead_planes, other_planes;  // per element-word of a chunk
};

// Rounds and planes per word of a chunk, for the lead and for the others.
// The tree's ANDs, each one plane sent by every party: pairs of groups,
// two ANDs each except the lowest pair's (its P is never needed). Cost
// models call this in their inner loops: arithmetic only, no allocation.
Shape3 plan(int width, int group) {
  const int m = width - 1;
  const std::uint64_t full = static_cast<std::uint64_t>(m / group), rest = static_cast<std::uint64_t>(m % group);
  const std::uint64_t groups = full + (rest > 0 ? 1 : 0);
  const std::uint64_t monomials = 1 + full * ((std::uint64_t{1} << group) - 1) + (rest > 0 ? (std::uint64_t{1} << rest) - 1 : 0);
  std::uint64_t ands = 0, levels = 0;
  for (std::uint64_t k = groups; k > 1; k = k / 2 + k % 2, ++levels) ands += 2 * (k / 2) - 1;
  return {2 + levels, monomials + ands, 2 * groups + ands};
}

int choose_group(int width) {
  const int m = width - 1;
  if (m <= 2) return std::max(1, m);
  int best = 2;
  for (int g = 3; g <= std::min(max_group, m); ++g) {
    const Shape3 a = plan(width, g), b = plan(width, best);
    const auto planes = [](const Shape3& s) { return s.lead_planes + 2 * s.other_planes; };
    if (a.rounds < b.rounds || (a.rounds == b.rounds && planes(a) < planes(b))) best = g;
  }
  return best;
}

void check_msb_args(int width, int group) {
  if (width < 2 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument, "msb: width " + std::to_string(width) + " is outside [2, 64]");
  if (group < 0 || group > max_group)
    throw Error(ErrorCode::invalid_argument,
                "msb: group size " + std::to_string(group) + " is outside [0, " + std::to_string(max_group) + "]");
}

// Below this many words per plane one party leads every element: three
// leads would triple the messages of each round, which costs more wall
// time than the lead's larger first message saves (successive calls
// rotate the lead instead).
constexpr std::size_t split_from_words = 24;

// Elements [begin, end) of chunk j of n: split at word boundaries into
// thirds, or all in chunk 2 when n is small.
std::pair<std::size_t, std::size_t> chunk(std::size_t n, int j) {
  const std::size_t w = words_for(n);
  if (w < split_from_words) return j == 2 ? std::pair{std::size_t{0}, n} : std::pair{std::size_t{0}, std::size_t{0}};
  const std::size_t b = 64 * (w * static_cast<std::size_t>(j) / 3);
  const std::size_t e = 64 * (w * static_cast<std::size_t>(j + 1) / 3);
  return {std::min(b, n), std::min(e, n)};
}

// Transposes a 64 x 64 bit matrix in place: afterwards bit i of a[j] is
// what bit j of a[i] was (swapping ever smaller off-diagonal blocks, 6
// stages of 32 word operations; Hacker's Delight 7-3, least significant bit
// first).
void transpose64(Ring* a) {
  Ring m = 0x00000000FFFFFFFFull;
  for (int j = 32; j != 0; j >>= 1, m ^= m << j)
    for (int k = 0; k < 64; k = ((k | j) + 1) & ~j) {
      const Ring t = ((a[k] >> j) ^ a[k | j]) & m;
      a[k] ^= t << j;
      a[k | j] ^= t;
    }
}

// Plane j, bit e: bit j of v[e]. 64 elements at a time by a bit-matrix
// transpose: 7x faster than setting bit by bit (2.6 us against 18 for 512
// values of 27 bits), which was the largest cost of a small sort's round.
std::vector<Ring> to_planes(const Ring* v, std::size_t n, int width) {
  const std::size_t words = words_for(n);
  std::vector<Ring> out(static_cast<std::size_t>(width) * words);
  std::array<Ring, 64> block;
  for (std::size_t q = 0; q < words; ++q) {
    const std::size_t first = q * 64, count = std::min<std::size_t>(64, n - first);
    std::copy(v + first, v + first + count, block.begin());
    std::fill(block.begin() + static_cast<std::ptrdiff_t>(count), block.end(), Ring{0});
    transpose64(block.data());
    for (int j = 0; j < width; ++j) out[static_cast<std::size_t>(j) * words + q] = block[static_cast<std::size_t>(j)];
  }
  return out;
}

// A group's G and P as XORs over monomials of A's bits: entry S (a subset
// of the group's positions, as a mask) holds the coefficient plane of
// prod_{t in S} a_{lo+t}, a function of B's bits.
struct GroupForm {
  std::vector<Ring> g, p;  // (1 << size) planes each
};

GroupForm group_form(const std::vector<Ring>& b, std::size_t words, int lo, int size) {
  const std::size_t terms = std::size_t{1} << size;
  GroupForm f{std::vector<Ring>(terms * words, 0), std::vector<Ring>(terms * words, 0)};
  const Ring* b_lo = b.data() + static_cast<std::size_t>(lo) * words;
  for (std::size_t q = 0; q < words; ++q) {
    f.g[words + q] = b_lo[q];  // g = a b
    f.p[q] = b_lo[q];          // p = a ^ b
    f.p[words + q] = ~Ring{0};
  }
  for (int t = 1; t < size; ++t) {
    const Ring* bt = b.data() + static_cast<std::size_t>(lo + t) * words;
    const std::size_t bit = std::size_t{1} << t;
    // X <- p_t X = b_t X ^ a_t X, for X = G and P (no term holds a_t yet).
    for (auto* x : {&f.g, &f.p})
      for (std::size_t s = 0; s < bit; ++s)
        for (std::size_t q = 0; q < words; ++q) {
          (*x)[(s | bit) * words + q] = (*x)[s * words + q];
          (*x)[s * words + q] &= bt[q];
        }
    for (std::size_t q = 0; q < words; ++q) f.g[bit * words + q] ^= bt[q];  // G ^= a_t b_t
  }
  return f;
}

// The carry tree over the replicated planes of msb_planes' groups: G of
// every group, P of all but the lowest, A's top bit. A level ANDs adjacent
// groups (G = G_hi ^ P_hi G_lo, P = P_hi P_lo) in one message; the sign is
// the last G XOR the top bit.
Task<Rss3Bits> carry_tree(Rss3& proto, Rss3Bits shared, std::size_t count, std::size_t reshared, std::size_t words) {
  using Bits = Rss3Bits;
  // Planes of both components, laid out flat: plane j at [j words, (j+1) words).
  // g[j] is shared's plane j; p[j] its plane count - 1 + j (p[0] unused).
  const auto copy_plane = [words](const Bits& from, std::size_t i, Bits& to, std::size_t j) {
    for (const auto& [src, dst] : {std::pair{&from.own, &to.own}, std::pair{&from.next, &to.next}})
      std::copy_n(src->data() + i * words, words, dst->data() + j * words);
  };
  const auto planes = [words](std::size_t n) {
    return Bits{RingTensor::from_shape({n * words}), RingTensor::from_shape({n * words})};
  };
  Bits g = planes(count), p = planes(count);
  for (std::size_t k = 0; k < count; ++k) {
    copy_plane(shared, k, g, k);
    if (k > 0) copy_plane(shared, count - 1 + k, p, k);
  }
  Bits top_bit = planes(1);
  copy_plane(shared, reshared - 1, top_bit, 0);
  for (std::size_t k = count; k > 1;) {
    const std::size_t pairs = k / 2, ands = 2 * pairs - 1, left_over = k % 2;
    Bits left = planes(ands), right = planes(ands);
    for (std::size_t j = 0, at = 0; j < pairs; ++j) {
      copy_plane(p, 2 * j + 1, left, at);
      copy_plane(g, 2 * j, right, at++);
      if (j > 0) {
        copy_plane(p, 2 * j + 1, left, at);
        copy_plane(p, 2 * j, right, at++);
      }
    }
    const Bits products = co_await proto.bits_and(left, right);
    Bits g_next = planes(pairs + left_over), p_next = planes(pairs + left_over);
    for (std::size_t j = 0, at = 0; j < pairs; ++j) {
      copy_plane(products, at++, g_next, j);  // G = G_hi ^ P_hi G_lo
      for (auto [dst, src] : {std::pair{&g_next.own, &g.own}, std::pair{&g_next.next, &g.next}})
        for (std::size_t q = 0; q < words; ++q) dst->data()[j * words + q] ^= src->data()[(2 * j + 1) * words + q];
      if (j > 0) copy_plane(products, at++, p_next, j);  // P = P_hi P_lo
    }
    if (left_over) {
      copy_plane(g, k - 1, g_next, pairs);
      copy_plane(p, k - 1, p_next, pairs);
    }
    g = std::move(g_next);
    p = std::move(p_next);
    k = pairs + left_over;
  }
  co_return proto.bits_xor(g, top_bit);  // g holds one plane now
}

}  // namespace

Rss3DcfCost rss3_dcf_cost(int width, std::size_t n, std::uint64_t slice_bytes, Rss3DcfStoreUse store,
                          Rss3DcfOutput output, int result_bits) {
  check_msb_args(width, 0);
  const bool arith = output == Rss3DcfOutput::arith;
  Rss3DcfCost cost;
  const std::size_t slice = rss3_dcf_slice_elements(width, slice_bytes, output);
  const std::uint64_t header = store == Rss3DcfStoreUse::off ? 0 : 16;
  const std::uint64_t per_opening = bytes_per_word(width);
  for (int j = 0; j < 3; ++j) {
    const auto [b, e] = chunk(n, j);
    if (b == e) continue;
    const std::size_t k = e - b;
    const std::size_t dealer = static_cast<std::size_t>(j), first = (dealer + 1) % 3, second = (dealer + 2) % 3;
    const std::uint64_t result_bytes = arith ? bytes_per_word(result_bits) * k : (k + 7) / 8;
    cost.bytes[dealer] += 2 * header;
    cost.bytes[first] += per_opening * k + result_bytes;
    cost.bytes[second] += per_opening * k + result_bytes;
    if (store == Rss3DcfStoreUse::filled) {  // offsets r - r* instead of keys
      cost.bytes[dealer] += 2 * per_opening * k;
      cost.rounds = std::max<std::uint64_t>(cost.rounds, 2);
      continue;
    }
    const std::size_t slices = (k + slice - 1) / slice;
    for (std::size_t s = 0; s < slices; ++s) {
      const std::size_t part = std::min(slice, k - s * slice);
      const std::uint64_t dealt = arith ? 2 * dcf_correction_bytes(width - 1, ring_bits, part) + 8 * part
                                        : 2 * dcf_correction_bytes(width - 1, 1, part) + (part + 7) / 8;
      cost.dealt[dealer] += dealt;
      cost.bytes[dealer] += dealt;
    }
    const std::uint64_t acks = slices > 2 ? slices - 2 : 0;  // one byte each, from A and from B
    cost.bytes[first] += acks;
    cost.bytes[second] += acks;
    // The opening beside the first two slices, then two rounds per further pair, then the resharing.
    cost.rounds = std::max<std::uint64_t>(cost.rounds, 2 + 2 * ((slices - 1) / 2));
  }
  return cost;
}

Rss3MsbCost rss3_msb_cost(int width, std::size_t n, int group) {
  check_msb_args(width, group);
  Rss3MsbCost cost;
  cost.group = std::min(group == 0 ? choose_group(width) : group, std::max(1, width - 1));
  const Shape3 s = plan(width, cost.group);
  for (int j = 0; j < 3; ++j) {
    const auto [b, e] = chunk(n, j);
    if (b == e) continue;
    const int lead = j;  // a call whose rotation is r: party i pays what i - r pays here
    const std::uint64_t bytes_per_plane = words_for(e - b) * sizeof(Ring);
    cost.rounds = s.rounds;
    for (int id = 0; id < 3; ++id)
      cost.bytes[static_cast<std::size_t>(id)] += (id == lead ? s.lead_planes : s.other_planes) * bytes_per_plane;
  }
  return cost;
}

Task<Rss3Bits> Rss3::msb_planes(PartyId lead, RingTensor values, std::size_t n, int width, int group) {
  const std::size_t words = words_for(n);
  const int role = static_cast<int>((party_->id_ + 3 - lead) % 3);  // 0 lead, 1 first, 2 second
  const PartyId first = (lead + 1) % 3, second = (lead + 2) % 3;
  const Groups groups = make_groups(width - 1, group);
  const std::size_t count = groups.count(), monomials = groups.monomial_planes(), reshared = groups.reshared_planes();
  const std::vector<Ring> planes = to_planes(values.data(), n, width);  // A's at the lead, B's elsewhere
  const Ring* top = planes.data() + static_cast<std::size_t>(width - 1) * words;

  Bits shared;  // (count G, count - 1 P, top) planes, replicated
  if (role == 0) {
    RingTensor masked = draw_prev({monomials * words});  // masks shared with second
    std::size_t at = 0;
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t terms = std::size_t{1} << groups.size[k];
      std::vector<Ring> mono(terms * words, ~Ring{0});
      for (std::size_t s = 1; s < terms; ++s) {
        int high = 0;
        while ((s >> (high + 1)) != 0) ++high;
        const std::size_t rest = s & ~(std::size_t{1} << high);
        const Ring* a = planes.data() + static_cast<std::size_t>(groups.lo[k] + high) * words;
        for (std::size_t q = 0; q < words; ++q) {
          mono[s * words + q] = mono[rest * words + q] & a[q];
          masked.data()[at * words + q] ^= mono[s * words + q];
        }
        ++at;
      }
    }
    for (std::size_t q = 0; q < words; ++q) masked.data()[at * words + q] ^= top[q];
    send(first, masked);
    RingTensor sigma = draw_prev({reshared * words}), rho = draw_next({reshared * words});
    shared = Bits{std::move(sigma), std::move(rho)};
  } else {
    // First: masked monomials (round 1); second: the masks themselves.
    RingTensor mask = role == 2 ? draw_next({monomials * words}) : RingTensor{};
    RingTensor part = ring_zeros({reshared * words});
    auto fill = [&](const RingTensor& m) {
      std::size_t at = 0;
      for (std::size_t k = 0; k < count; ++k) {
        const GroupForm f = group_form(planes, words, groups.lo[k], groups.size[k]);
        const std::size_t terms = std::size_t{1} << groups.size[k];
        Ring* g_out = part.data() + k * words;
        Ring* p_out = k > 0 ? part.data() + (count - 1 + k) * words : nullptr;
        for (std::size_t s = 1; s < terms; ++s, ++at)
          for (std::size_t q = 0; q < words; ++q) {
            const Ring v = m.data()[at * words + q];
            g_out[q] ^= v & f.g[s * words + q];
            if (p_out) p_out[q] ^= v & f.p[s * words + q];
          }
        if (role == 1)  // the constant terms, once
          for (std::size_t q = 0; q < words; ++q) {
            g_out[q] ^= f.g[q];
            if (p_out) p_out[q] ^= f.p[q];
          }
      }
      Ring* top_out = part.data() + (reshared - 1) * words;
      for (std::size_t q = 0; q < words; ++q)
        top_out[q] = m.data()[at * words + q] ^ (role == 1 ? top[q] : Ring{0});
    };
    // Reshare: second masks its part with sigma (its key with the lead),
    // first with rho (the lead's key with it); each adds the other's part.
    const bool is_second = role == 2;
    if (is_second) fill(mask);
    else fill(co_await recv(lead, {monomials * words}));
    RingTensor own_mask = is_second ? draw_next({reshared * words}) : draw_prev({reshared * words});
    ring_xor_inplace(part, own_mask);
    const PartyId other = is_second ? first : second;
    send(other, part);
    RingTensor theirs = co_await recv(other, {reshared * words});
    ring_xor_inplace(theirs, part);
    shared = is_second ? Bits{std::move(theirs), std::move(own_mask)} : Bits{std::move(own_mask), std::move(theirs)};
  }

  co_return co_await carry_tree(*this, std::move(shared), count, reshared, words);
}

Task<std::pair<RingTensor, RingTensor>> Rss3::compare_thirds(const Share& a, int width, int group,
                                                             Rss3DcfOutput output, int result_bits) {
  const Shape s = shape(a);
  const std::size_t n = a.own.size();
  const PartyId id = party_->id_;
  // Chunk j's lead: j + rotation, the same at every party (they fork alike).
  const int rotation = static_cast<int>((forks_ / 3) % 3);
  const bool dcf = dcf_comparisons() && !circuit_only_;
  auto run = [&](int j, Rss3 q) -> Task<std::pair<RingTensor, RingTensor>> {
    const auto [b, e] = chunk(n, j);
    if (b == e) co_return std::pair<RingTensor, RingTensor>{};
    const int lead = (j + rotation) % 3;
    RingTensor values = RingTensor::from_shape({e - b});
    const auto role = (id + 3 - static_cast<PartyId>(lead)) % 3;
    if (dcf) {  // the lead deals; the next party holds s_{L+1} + s_{L+2}, the one after s_L
      if (role != 0)
        for (std::size_t i = b; i < e; ++i)
          values.data()[i - b] = role == 1 ? a.own.data()[i] + a.next.data()[i] : a.next.data()[i];
      co_return co_await q.dcf_compare(static_cast<PartyId>(lead), std::move(values), e - b, width, output,
                                       result_bits);
    }
    for (std::size_t i = b; i < e; ++i)
      values.data()[i - b] = role == 0 ? a.own.data()[i] + a.next.data()[i]
                             : role == 1 ? a.next.data()[i]
                                         : a.own.data()[i];
    Bits bits = co_await q.msb_planes(static_cast<PartyId>(lead), std::move(values), e - b, width, group);
    co_return std::pair{std::move(bits.own), std::move(bits.next)};
  };
  Rss3 q0 = fork(), q1 = fork(), q2 = fork();  // in this order at every party
  auto [c0, c1, c2] = co_await when_all(run(0, std::move(q0)), run(1, std::move(q1)), run(2, std::move(q2)));
  std::pair<RingTensor, RingTensor> out{RingTensor::from_shape(s), RingTensor::from_shape(s)};
  const std::pair<RingTensor, RingTensor>* chunks[3] = {&c0, &c1, &c2};
  const bool arith = output == Rss3DcfOutput::arith;
  for (int j = 0; j < 3; ++j) {
    const auto [b, e] = chunk(n, j);
    for (std::size_t i = b; i < e; ++i) {
      const std::size_t local = i - b;
      if (arith) {
        out.first.data()[i] = chunks[j]->first.data()[local];
        out.second.data()[i] = chunks[j]->second.data()[local];
      } else {
        out.first.data()[i] = (chunks[j]->first.data()[local / 64] >> (local % 64)) & 1;
        out.second.data()[i] = (chunks[j]->second.data()[local / 64] >> (local % 64)) & 1;
      }
    }
  }
  co_return out;
}

Task<Rss3Bits> Rss3::msb_bits(const Share& a, int width, int group) {
  check_msb_args(width, group);
  if (group == 0) group = choose_group(width);
  group = std::min(group, std::max(1, width - 1));
  auto [own, next] = co_await compare_thirds(a, width, group, Rss3DcfOutput::bit);
  co_return Bits{std::move(own), std::move(next)};
}

Task<Rss3Share> Rss3::msb_arith(const Share& a, int width, int result_bits) {
  check_msb_args(width, 0);
  if (result_bits < 1 || result_bits > ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "rss3 msb_arith: result bits " + std::to_string(result_bits) + " outside [1, 64]");
  if (!dcf_comparisons() || circuit_only_) co_return co_await bit_to_arith(co_await msb_bits(a, width), result_bits);
  auto [own, next] = co_await compare_thirds(a, width, 0, Rss3DcfOutput::arith, result_bits);
  co_return Share{std::move(own), std::move(next)};
}

}  // namespace mpcache
