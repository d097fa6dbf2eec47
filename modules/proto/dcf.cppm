// Distributed comparison functions (DCF): the dealer's keys for f(x) =
// beta [x < alpha] on in_bits-bit inputs, split between two parties so that
// each evaluates its key locally on a public x and the two outputs add up
// (mod 2^out_bits) to f(x), while one key alone says nothing about alpha or
// beta. Boyle, Gilboa, Ishai, Kolobov et al., "Function Secret Sharing for
// Mixed-Mode and Fixed-Point Secure Computation" (Eurocrypt 2021), Fig. 1
// (Gen^<, Eval^<), after Boyle, Gilboa, Ishai (2016/2019).
//
// A key is a GGM tree walk: one 128-bit root seed per party and, per input
// bit, one correction word common to both keys (a seed correction with the
// two control-bit corrections in its low bits, and one output-group value),
// then one final output correction. The tree's PRG is fixed-key AES-128
// (AES-NI through OpenSSL) in Matyas-Meyer-Oseas form, G_i(s) = AES_K(s ^ i)
// ^ s ^ i with a public K, evaluated for a whole batch of keys at once. A
// child's seed keeps 126 bits (the low two carry the control bit and, when
// the output group is Z_2, the output bit).
//
// Sizes: a party's key is its 16-byte root plus the common corrections,
// dcf_correction_bytes(in_bits, out_bits, n) for n keys: 16 in_bits bytes
// and out_bits (in_bits + 1) bits a key (bits packed across the batch).
// Evaluation costs in_bits AES blocks per key (2 in_bits when out_bits > 1),
// generation four times that for both parties.
export module mpcache.proto:dcf;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

struct DcfSeed {
  std::uint64_t lo = 0, hi = 0;
};

// The correction words of `count` keys, shared by both parties' keys;
// level-major ([level * count + key]) so that a level evaluates as a batch.
struct DcfCorrections {
  int in_bits = 0, out_bits = 0;
  std::size_t count = 0;
  std::vector<DcfSeed> seeds;  // in_bits * count; bit 0: left control correction, bit 1: right
  std::vector<Ring> values;    // (in_bits + 1) * count: per level, then the final one, each < 2^out_bits
};

// Bytes of dcf_serialize for `count` keys.
std::size_t dcf_correction_bytes(int in_bits, int out_bits, std::size_t count);
// One party's whole key batch: its root seeds and the corrections.
std::size_t dcf_key_bytes(int in_bits, int out_bits, std::size_t count);

std::vector<std::byte> dcf_serialize(const DcfCorrections& keys);
// `what` names the sender in the error a message of the wrong size gets.
DcfCorrections dcf_deserialize(std::span<const std::byte> bytes, int in_bits, int out_bits, std::size_t count,
                               const std::string& what);
// Keys [begin, end) of a serialized batch of `count` keys (a store of dealt
// keys hands them out piece by piece without parsing the whole batch).
DcfCorrections dcf_deserialize_range(std::span<const std::byte> bytes, int in_bits, int out_bits, std::size_t count,
                                     std::size_t begin, std::size_t end);

// Keys for beta [x < alpha_k] for every k, from the two parties' root seeds
// (the caller draws them: in add2 each from the PRG key the dealer shares
// with that party, so roots never travel). alpha_k < 2^in_bits; 1 <= in_bits,
// out_bits <= 64.
DcfCorrections dcf_generate(int in_bits, int out_bits, std::span<const Ring> alpha, Ring beta,
                            std::span<const DcfSeed> root0, std::span<const DcfSeed> root1);
// The same with a payload per key: betas[k] [x < alpha_k] (betas.size() is
// 1 or alpha.size()); rss3's arithmetic comparisons deal beta = +-1.
DcfCorrections dcf_generate(int in_bits, int out_bits, std::span<const Ring> alpha, std::span<const Ring> betas,
                            std::span<const DcfSeed> root0, std::span<const DcfSeed> root1);

// Party b's (0 or 1) shares of beta [x_k < alpha_k], each in [0, 2^out_bits):
// party 0's plus party 1's is the value mod 2^out_bits.
std::vector<Ring> dcf_evaluate(int party, const DcfCorrections& keys, std::span<const DcfSeed> root,
                               std::span<const Ring> x);

}  // namespace mpcache
