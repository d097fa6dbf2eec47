module mpcache.proto;
import mpcache.std;
import mpcache.core;

namespace mpcache::client_shares {
namespace {

constexpr std::byte seed_form{0}, values_form{1};

void put_seed(std::vector<std::byte>& out, const PrgKey& seed) {
  out.push_back(seed_form);
  for (auto b : seed) out.push_back(std::byte(b));
}

void put_values(std::vector<std::byte>& out, const RingTensor& t) {
  out.push_back(values_form);
  auto bytes = ring_bytes(t);
  out.insert(out.end(), bytes.begin(), bytes.end());
}

RingTensor expand(const PrgKey& seed, const Shape& shape) {
  std::uint64_t block = 0;
  return Prg(seed).draw(0, block, shape);
}

// One component of a part: a seed, or its values at `offset` in the part.
struct Component {
  bool seeded = false;
  PrgKey seed{};
  std::size_t offset = 0;
};

// Both components' places in `part`, every form and size checked: a part
// of the wrong size or form throws Error(protocol) naming what.
std::array<Component, 2> layout(PartyId server, std::span<const std::byte> part, const Shape& shape) {
  if (server > 2) throw Error(ErrorCode::bad_party, "client share for server " + std::to_string(server) + " (0..2)");
  const auto bad = [&](const std::string& what) {
    return Error(ErrorCode::protocol, "client share for server " + std::to_string(server) + ": " + what);
  };
  std::array<Component, 2> out;
  std::size_t at = 0;
  for (Component& c : out) {
    if (at >= part.size()) throw bad("truncated (" + std::to_string(part.size()) + " bytes)");
    const std::byte form = part[at++];
    if (form == seed_form) {
      if (part.size() - at < 16) throw bad("truncated seed");
      c.seeded = true;
      for (std::size_t i = 0; i < 16; ++i) c.seed[i] = std::to_integer<std::uint8_t>(part[at + i]);
      at += 16;
      continue;
    }
    if (form != values_form) throw bad("unknown component form " + std::to_string(std::to_integer<unsigned>(form)));
    const std::size_t bytes = element_count(shape) * sizeof(Ring);
    if (part.size() - at < bytes)
      throw bad(std::to_string(part.size() - at) + " bytes of values where the shape " + shape_string(shape) +
                " needs " + std::to_string(bytes));
    c.offset = at;
    at += bytes;
  }
  if (at != part.size()) throw bad(std::to_string(part.size() - at) + " bytes too many");
  return out;
}

// Rows [begin, end) of one component of a secret of `shape` (rows along
// the first axis): a seed's stream drawn from the rows' first element
// (two elements per AES block), or the values' bytes.
RingTensor component_rows(const Component& c, std::span<const std::byte> part, const Shape& shape, std::size_t begin,
                          std::size_t end) {
  Shape rows_shape = shape;  // a scalar is one row of one element
  const std::size_t per_row = shape.empty() || shape[0] == 0 ? 1 : element_count(shape) / shape[0];
  if (!rows_shape.empty()) rows_shape[0] = end - begin;
  const std::size_t first = begin * per_row, n = (end - begin) * per_row;
  if (!c.seeded) return ring_from_bytes(part.subspan(c.offset + first * sizeof(Ring), n * sizeof(Ring)), rows_shape);
  RingTensor out = RingTensor::from_shape(rows_shape);
  const Prg prg(c.seed);
  std::uint64_t block = first / 2;
  std::span<Ring> rest(out.data(), n);
  if (first % 2 == 1 && n > 0) {  // the first element is a block's second half: that block alone
    std::array<Ring, 2> pair{};
    prg.fill(0, block, pair);
    rest[0] = pair[1];
    rest = rest.subspan(1);
  }
  prg.fill(0, block, rest);
  return out;
}

}  // namespace

std::array<std::vector<std::byte>, 3> split(const RingTensor& x) {
  const Shape shape = shape_of(x);
  const PrgKey seed0 = random_prg_key(), seed1 = random_prg_key();
  RingTensor s2 = x;
  ring_sub_inplace(s2, expand(seed0, shape));
  ring_sub_inplace(s2, expand(seed1, shape));
  std::array<std::vector<std::byte>, 3> parts;
  put_seed(parts[0], seed0);
  put_seed(parts[0], seed1);
  put_seed(parts[1], seed1);
  put_values(parts[1], s2);
  put_values(parts[2], s2);
  put_seed(parts[2], seed0);
  return parts;
}

Rss3Share assemble(PartyId server, std::span<const std::byte> part, const Shape& shape) {
  return assemble_rows(server, part, shape, 0, shape.empty() ? 1 : shape[0]);
}

void check_part(PartyId server, std::span<const std::byte> part, const Shape& shape) {
  (void)layout(server, part, shape);
}

Rss3Share assemble_rows(PartyId server, std::span<const std::byte> part, const Shape& shape, std::size_t begin,
                        std::size_t end) {
  const auto [own, next] = layout(server, part, shape);
  const std::size_t rows = shape.empty() ? 1 : shape[0];
  if (begin > end || end > rows)
    throw Error(ErrorCode::invalid_argument, "client share rows [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") of " + shape_string(shape));
  return Rss3Share{component_rows(own, part, shape, begin, end), component_rows(next, part, shape, begin, end)};
}

std::vector<std::byte> open_part(const Rss3Share& share) {
  std::vector<std::byte> out;
  put_values(out, share.own);
  put_values(out, share.next);
  return out;
}

RingTensor reconstruct(const std::array<std::vector<std::byte>, 3>& parts, const Shape& shape) {
  std::array<Rss3Share, 3> held;
  for (PartyId i = 0; i < 3; ++i) held[i] = assemble(i, parts[i], shape);
  // Component j is server j's own and server j-1's next.
  for (PartyId j = 0; j < 3; ++j) {
    const PartyId before = (j + 2) % 3;
    const RingTensor& a = held[j].own;
    const RingTensor& b = held[before].next;
    if (!std::equal(a.data(), a.data() + a.size(), b.data()))
      throw Error(ErrorCode::protocol, "servers " + std::to_string(before) + " and " + std::to_string(j) +
                                           " sent different copies of component " + std::to_string(j) +
                                           ": a server is faulty or lying; the result is refused");
  }
  RingTensor x = held[0].own;
  ring_add_inplace(x, held[1].own);
  ring_add_inplace(x, held[2].own);
  return x;
}

}  // namespace mpcache::client_shares
