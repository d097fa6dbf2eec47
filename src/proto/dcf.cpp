// DCF key generation and evaluation (see dcf.cppm): Boyle et al. 2021,
// Fig. 1, level by level over a whole batch so that each level's PRG calls
// are one AES-ECB pass.
module;
#include "prelude.hpp"
#include <openssl/evp.h>
module mpcache.proto;
import mpcache.core;

namespace mpcache {

namespace {

// The tree PRG's public AES key (the first hex digits of pi). Its secrecy
// plays no part: fixed-key AES is modelled as a random permutation, the
// usual instantiation of the DCF's PRG (Boyle et al. 2021, Sec. 6).
constexpr std::array<unsigned char, 16> tree_key = {0x24, 0x3F, 0x6A, 0x88, 0x85, 0xA3, 0x08, 0xD3,
                                                    0x13, 0x19, 0x8A, 0x2E, 0x03, 0x70, 0x73, 0x44};

// h(x) = AES_K(x) ^ x for a batch of blocks (Matyas-Meyer-Oseas).
class TreeHash {
 public:
  TreeHash() : ctx_(EVP_CIPHER_CTX_new()) {
    if (!ctx_ || EVP_EncryptInit_ex(ctx_, EVP_aes_128_ecb(), nullptr, tree_key.data(), nullptr) != 1 ||
        EVP_CIPHER_CTX_set_padding(ctx_, 0) != 1)
      throw Error(ErrorCode::invalid_argument, "cannot initialise AES-128-ECB (OpenSSL) for the DCF tree");
  }
  ~TreeHash() { EVP_CIPHER_CTX_free(ctx_); }
  TreeHash(const TreeHash&) = delete;
  TreeHash& operator=(const TreeHash&) = delete;

  void hash(const std::vector<DcfSeed>& in, std::vector<DcfSeed>& out) const {
    out.resize(in.size());
    const auto* from = reinterpret_cast<const unsigned char*>(in.data());
    auto* to = reinterpret_cast<unsigned char*>(out.data());
    constexpr std::size_t chunk = std::size_t{1} << 24;  // blocks: EVP takes int lengths
    for (std::size_t done = 0; done < in.size(); done += chunk) {
      const std::size_t blocks = std::min(chunk, in.size() - done);
      int written = 0;
      if (EVP_EncryptUpdate(ctx_, to + 16 * done, &written, from + 16 * done, static_cast<int>(16 * blocks)) != 1)
        throw Error(ErrorCode::invalid_argument, "AES-ECB encryption failed (DCF tree)");
    }
    for (std::size_t k = 0; k < in.size(); ++k) {
      out[k].lo ^= in[k].lo;
      out[k].hi ^= in[k].hi;
    }
  }

 private:
  EVP_CIPHER_CTX* ctx_;
};

static_assert(sizeof(DcfSeed) == 16);

Ring group_mask(int bits) { return bits >= ring_bits ? ~Ring{0} : (Ring{1} << bits) - 1; }

// PRG input j of a node: its seed with j in the low bits (0, 1: the left
// and right child; 2, 3: their output values when the group is wider than Z_2).
DcfSeed tweak(const DcfSeed& s, std::uint64_t j) { return {s.lo ^ j, s.hi}; }

// A child of a node: seed (low two bits clear), control bit, output value.
struct Child {
  DcfSeed seed;
  std::uint8_t t = 0;
  Ring v = 0;
};

// From the child's hash and, for groups wider than Z_2, its value block.
Child child_of(const DcfSeed& h, const DcfSeed* value_block, int out_bits) {
  Child c{{h.lo & ~Ring{3}, h.hi}, static_cast<std::uint8_t>(h.lo & 1), 0};
  c.v = value_block ? value_block->lo & group_mask(out_bits) : (h.lo >> 1) & 1;
  return c;
}

// The output group's image of a leaf seed: its high word (the low one has
// its two lowest bits clear).
Ring convert(const DcfSeed& s, int out_bits) { return s.hi & group_mask(out_bits); }

// PRG blocks per expanded child: one, plus its value block when out_bits > 1.
std::size_t blocks_per_child(int out_bits) { return out_bits == 1 ? 1 : 2; }

void check_bits(int in_bits, int out_bits, const char* what) {
  if (in_bits < 1 || in_bits > ring_bits)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": input width " + std::to_string(in_bits) + " is outside [1, 64]");
  if (out_bits < 1 || out_bits > ring_bits)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": output width " + std::to_string(out_bits) + " is outside [1, 64]");
}

void check_inputs(std::span<const Ring> values, int in_bits, const char* what, const char* name) {
  const Ring limit = group_mask(in_bits);
  for (std::size_t k = 0; k < values.size(); ++k)
    if (values[k] > limit)
      throw Error(ErrorCode::invalid_argument, std::string(what) + ": " + name + "[" + std::to_string(k) + "] = " +
                                                   std::to_string(values[k]) + " does not fit in " +
                                                   std::to_string(in_bits) + " bits");
}

// (-1)^t x.
Ring signed_by(std::uint8_t t, Ring x) { return t ? Ring{0} - x : x; }

// The serialised values are a little-endian bit stream: `width` bits each,
// low bit first, byte b holding stream bits 8b..8b+7. Word at a time: a
// bit-by-bit loop here was most of a dcf comparison's CPU time.
static_assert(std::endian::native == std::endian::little, "the bit stream copies 64-bit words as they lie in memory");

class BitPacker {
 public:
  explicit BitPacker(std::span<std::byte> out) : out_(out) {}
  void put(Ring v, int width) {
    v &= group_mask(width);
    const int total = filled_ + width;
    if (total < 64) {
      acc_ |= v << filled_;
      filled_ = total;
      return;
    }
    emit(acc_ | (v << filled_));  // filled_ < 64
    acc_ = filled_ == 0 ? 0 : v >> (64 - filled_);
    filled_ = total - 64;
  }
  // The last partial word's bytes.
  void finish() {
    const std::size_t bytes = (static_cast<std::size_t>(filled_) + 7) / 8;
    std::memcpy(out_.data() + pos_, &acc_, bytes);
    pos_ += bytes;
    acc_ = 0;
    filled_ = 0;
  }

 private:
  void emit(Ring word) {
    std::memcpy(out_.data() + pos_, &word, sizeof word);
    pos_ += sizeof word;
  }
  std::span<std::byte> out_;
  std::size_t pos_ = 0;
  Ring acc_ = 0;
  int filled_ = 0;  // bits of acc_ in use, < 64
};

// `width` bits of the stream `bytes` from stream bit `bit` (within it).
Ring read_bits(std::span<const std::byte> bytes, std::size_t bit, int width) {
  const std::size_t at = bit / 8;
  const int shift = static_cast<int>(bit % 8);
  std::array<std::byte, 16> window{};  // 8 bytes, and a 9th when the value crosses a word
  std::memcpy(window.data(), bytes.data() + at, std::min<std::size_t>(9, bytes.size() - at));
  Ring lo = 0, hi = 0;
  std::memcpy(&lo, window.data(), 8);
  std::memcpy(&hi, window.data() + 8, 8);
  const Ring v = shift == 0 ? lo : (lo >> shift) | (hi << (64 - shift));
  return v & group_mask(width);
}

}  // namespace

std::size_t dcf_correction_bytes(int in_bits, int out_bits, std::size_t count) {
  check_bits(in_bits, out_bits, "dcf_correction_bytes");
  const std::size_t levels = static_cast<std::size_t>(in_bits);
  const std::size_t value_bits = static_cast<std::size_t>(out_bits) * (levels + 1) * count;
  return sizeof(DcfSeed) * levels * count + (value_bits + 7) / 8;
}

std::size_t dcf_key_bytes(int in_bits, int out_bits, std::size_t count) {
  return sizeof(DcfSeed) * count + dcf_correction_bytes(in_bits, out_bits, count);
}

std::vector<std::byte> dcf_serialize(const DcfCorrections& keys) {
  std::vector<std::byte> out(dcf_correction_bytes(keys.in_bits, keys.out_bits, keys.count));
  const std::size_t seed_bytes = keys.seeds.size() * sizeof(DcfSeed);
  std::memcpy(out.data(), keys.seeds.data(), seed_bytes);
  // Values packed low bit first, out_bits each.
  BitPacker packer(std::span<std::byte>(out).subspan(seed_bytes));
  for (const Ring v : keys.values) packer.put(v, keys.out_bits);
  packer.finish();
  return out;
}

DcfCorrections dcf_deserialize(std::span<const std::byte> bytes, int in_bits, int out_bits, std::size_t count,
                               const std::string& what) {
  const std::size_t want = dcf_correction_bytes(in_bits, out_bits, count);
  if (bytes.size() != want)
    throw Error(ErrorCode::protocol, what + " sent " + std::to_string(bytes.size()) + " bytes of DCF keys, expected " +
                                         std::to_string(want) + " for " + std::to_string(count) + " keys of " +
                                         std::to_string(in_bits) + " input and " + std::to_string(out_bits) +
                                         " output bits");
  const std::size_t levels = static_cast<std::size_t>(in_bits);
  DcfCorrections keys{in_bits, out_bits, count, std::vector<DcfSeed>(levels * count),
                      std::vector<Ring>((levels + 1) * count, 0)};
  const std::size_t seed_bytes = keys.seeds.size() * sizeof(DcfSeed);
  std::memcpy(keys.seeds.data(), bytes.data(), seed_bytes);
  const auto stream = bytes.subspan(seed_bytes);
  const auto width = static_cast<std::size_t>(out_bits);
  for (std::size_t k = 0; k < keys.values.size(); ++k) keys.values[k] = read_bits(stream, k * width, out_bits);
  return keys;
}

DcfCorrections dcf_deserialize_range(std::span<const std::byte> bytes, int in_bits, int out_bits, std::size_t count,
                                     std::size_t begin, std::size_t end) {
  const std::size_t want = dcf_correction_bytes(in_bits, out_bits, count);
  if (bytes.size() != want || begin > end || end > count)
    throw Error(ErrorCode::invalid_argument, "dcf_deserialize_range: keys [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") of a batch of " + std::to_string(count) +
                                                 " keys in " + std::to_string(bytes.size()) + " bytes (expected " +
                                                 std::to_string(want) + ")");
  const std::size_t levels = static_cast<std::size_t>(in_bits), n = end - begin;
  DcfCorrections keys{in_bits, out_bits, n, std::vector<DcfSeed>(levels * n), std::vector<Ring>((levels + 1) * n, 0)};
  for (std::size_t level = 0; level < levels; ++level)
    std::memcpy(keys.seeds.data() + level * n, bytes.data() + sizeof(DcfSeed) * (level * count + begin),
                sizeof(DcfSeed) * n);
  const auto stream = bytes.subspan(sizeof(DcfSeed) * levels * count);
  const auto width = static_cast<std::size_t>(out_bits);
  for (std::size_t level = 0; level <= levels; ++level)
    for (std::size_t k = 0; k < n; ++k)
      keys.values[level * n + k] = read_bits(stream, (level * count + begin + k) * width, out_bits);
  return keys;
}

DcfCorrections dcf_generate(int in_bits, int out_bits, std::span<const Ring> alpha, Ring beta,
                            std::span<const DcfSeed> root0, std::span<const DcfSeed> root1) {
  return dcf_generate(in_bits, out_bits, alpha, std::span<const Ring>(&beta, 1), root0, root1);
}

DcfCorrections dcf_generate(int in_bits, int out_bits, std::span<const Ring> alpha, std::span<const Ring> betas,
                            std::span<const DcfSeed> root0, std::span<const DcfSeed> root1) {
  check_bits(in_bits, out_bits, "dcf_generate");
  const std::size_t n = alpha.size(), levels = static_cast<std::size_t>(in_bits);
  if (root0.size() != n || root1.size() != n)
    throw Error(ErrorCode::invalid_argument, "dcf_generate: " + std::to_string(n) + " thresholds but " +
                                                 std::to_string(root0.size()) + " and " + std::to_string(root1.size()) +
                                                 " root seeds");
  if (betas.size() != 1 && betas.size() != n)
    throw Error(ErrorCode::invalid_argument, "dcf_generate: " + std::to_string(betas.size()) + " payloads for " +
                                                 std::to_string(n) + " thresholds (give 1 or one per threshold)");
  check_inputs(alpha, in_bits, "dcf_generate", "alpha");
  const Ring mask = group_mask(out_bits);
  DcfCorrections keys{in_bits, out_bits, n, std::vector<DcfSeed>(levels * n), std::vector<Ring>((levels + 1) * n)};
  std::array<std::vector<DcfSeed>, 2> seed{std::vector<DcfSeed>(root0.begin(), root0.end()),
                                           std::vector<DcfSeed>(root1.begin(), root1.end())};
  std::array<std::vector<std::uint8_t>, 2> t{std::vector<std::uint8_t>(n, 0), std::vector<std::uint8_t>(n, 1)};
  std::vector<Ring> v_alpha(n, 0);  // what the on-path outputs so far sum to, minus beta's part
  // Both children (and their value blocks) of both parties' nodes:
  // block [(party * per_party + j) * n + k], j the tweak.
  const std::size_t per_party = 2 * blocks_per_child(out_bits);
  std::vector<DcfSeed> in(2 * per_party * n), out;
  const TreeHash prg;
  for (std::size_t level = 0; level < levels; ++level) {
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t j = 0; j < per_party; ++j)
        for (std::size_t k = 0; k < n; ++k) in[(b * per_party + j) * n + k] = tweak(seed[b][k], j);
    prg.hash(in, out);
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint8_t a = static_cast<std::uint8_t>((alpha[k] >> (levels - 1 - level)) & 1);
      std::array<std::array<Child, 2>, 2> c;  // [party][side]
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t d = 0; d < 2; ++d)
          c[b][d] = child_of(out[(b * per_party + d) * n + k],
                             out_bits == 1 ? nullptr : &out[(b * per_party + 2 + d) * n + k], out_bits);
      const std::size_t keep = a, lose = 1 - a;
      DcfSeed correction{c[0][lose].seed.lo ^ c[1][lose].seed.lo, c[0][lose].seed.hi ^ c[1][lose].seed.hi};
      const std::array<std::uint8_t, 2> t_cw{static_cast<std::uint8_t>(c[0][0].t ^ c[1][0].t ^ a ^ 1),
                                             static_cast<std::uint8_t>(c[0][1].t ^ c[1][1].t ^ a)};
      const std::uint8_t t1 = t[1][k];
      const Ring beta = betas[betas.size() == 1 ? 0 : k] & mask;
      Ring v_cw = signed_by(t1, c[1][lose].v - c[0][lose].v - v_alpha[k]);
      if (lose == 0) v_cw += signed_by(t1, beta);  // x goes left of alpha here: x < alpha
      v_cw &= mask;
      v_alpha[k] = v_alpha[k] - c[1][keep].v + c[0][keep].v + signed_by(t1, v_cw);
      for (std::size_t b = 0; b < 2; ++b) {
        const std::uint8_t tb = t[b][k];
        seed[b][k] = c[b][keep].seed;
        if (tb) {
          seed[b][k].lo ^= correction.lo;
          seed[b][k].hi ^= correction.hi;
        }
        t[b][k] = static_cast<std::uint8_t>(c[b][keep].t ^ (tb & t_cw[keep]));
      }
      correction.lo |= Ring{t_cw[0]} | (Ring{t_cw[1]} << 1);
      keys.seeds[level * n + k] = correction;
      keys.values[level * n + k] = v_cw;
    }
  }
  for (std::size_t k = 0; k < n; ++k)
    keys.values[levels * n + k] =
        signed_by(t[1][k], convert(seed[1][k], out_bits) - convert(seed[0][k], out_bits) - v_alpha[k]) & mask;
  return keys;
}

std::vector<Ring> dcf_evaluate(int party, const DcfCorrections& keys, std::span<const DcfSeed> root,
                               std::span<const Ring> x) {
  check_bits(keys.in_bits, keys.out_bits, "dcf_evaluate");
  if (party != 0 && party != 1)
    throw Error(ErrorCode::bad_party, "dcf_evaluate: party " + std::to_string(party) + " holds no key (0 or 1)");
  const std::size_t n = keys.count, levels = static_cast<std::size_t>(keys.in_bits);
  if (root.size() != n || x.size() != n || keys.seeds.size() != levels * n || keys.values.size() != (levels + 1) * n)
    throw Error(ErrorCode::invalid_argument, "dcf_evaluate: " + std::to_string(n) + " keys but " +
                                                 std::to_string(root.size()) + " root seeds and " +
                                                 std::to_string(x.size()) + " inputs");
  check_inputs(x, keys.in_bits, "dcf_evaluate", "x");
  const int out_bits = keys.out_bits;
  const std::uint8_t me = static_cast<std::uint8_t>(party);
  std::vector<DcfSeed> seed(root.begin(), root.end());
  std::vector<std::uint8_t> t(n, me);
  std::vector<Ring> y(n, 0);
  // The child on x's side (and its value block): block [j * n + k].
  const std::size_t per_key = blocks_per_child(out_bits);
  std::vector<DcfSeed> in(per_key * n), out;
  const TreeHash prg;
  for (std::size_t level = 0; level < levels; ++level) {
    const int shift = static_cast<int>(levels - 1 - level);
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t d = (x[k] >> shift) & 1;
      in[k] = tweak(seed[k], d);
      if (per_key == 2) in[n + k] = tweak(seed[k], 2 + d);
    }
    prg.hash(in, out);
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t d = (x[k] >> shift) & 1;
      Child c = child_of(out[k], per_key == 2 ? &out[n + k] : nullptr, out_bits);
      const DcfSeed& correction = keys.seeds[level * n + k];
      Ring v = c.v;
      if (t[k]) {
        c.seed.lo ^= correction.lo & ~Ring{3};
        c.seed.hi ^= correction.hi;
        c.t ^= static_cast<std::uint8_t>((correction.lo >> d) & 1);
        v += keys.values[level * n + k];
      }
      y[k] += signed_by(me, v);
      seed[k] = c.seed;
      t[k] = c.t;
    }
  }
  const Ring mask = group_mask(out_bits);
  for (std::size_t k = 0; k < n; ++k) {
    Ring leaf = convert(seed[k], out_bits);
    if (t[k]) leaf += keys.values[levels * n + k];
    y[k] = (y[k] + signed_by(me, leaf)) & mask;
  }
  return y;
}

}  // namespace mpcache
