// AES-128-CTR keystream kernels (see aes_ctr.hpp). Counters are made in
// native 64-bit lanes (hi, lo + i) and byte-swapped into the cipher's
// big-endian block; a run whose low half would wrap takes the one-block
// path, which carries into hi.
#include "aes_ctr.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mpcache::kernels {

#if defined(__x86_64__)
namespace {

#define MPCACHE_AESNI [[gnu::target("aes,sse4.1")]]
#define MPCACHE_VAES [[gnu::target("aes,sse4.1,avx2,avx512f,avx512bw,vaes")]]

MPCACHE_AESNI inline __m128i expand_step(__m128i key, __m128i assist) {
  assist = _mm_shuffle_epi32(assist, 0xff);
  key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
  key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
  key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
  return _mm_xor_si128(key, assist);
}

// The big-endian block of counter hi:lo.
MPCACHE_AESNI inline __m128i counter_block(std::uint64_t hi, std::uint64_t lo) {
  return _mm_set_epi64x(static_cast<long long>(__builtin_bswap64(lo)), static_cast<long long>(__builtin_bswap64(hi)));
}

MPCACHE_AESNI inline __m128i encrypt_one(const Aes128RoundKeys& keys, __m128i block) {
  block = _mm_xor_si128(block, _mm_load_si128(reinterpret_cast<const __m128i*>(keys.round[0])));
  for (int r = 1; r < 10; ++r) block = _mm_aesenc_si128(block, _mm_load_si128(reinterpret_cast<const __m128i*>(keys.round[r])));
  return _mm_aesenclast_si128(block, _mm_load_si128(reinterpret_cast<const __m128i*>(keys.round[10])));
}

// One block at a time, carrying from lo into hi: the tail, and runs that wrap.
MPCACHE_AESNI void keystream_one_by_one(const Aes128RoundKeys& keys, std::uint64_t hi, std::uint64_t lo,
                                        unsigned char* out, std::size_t blocks) {
  for (std::size_t i = 0; i < blocks; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * i), encrypt_one(keys, counter_block(hi, lo)));
    if (++lo == 0) ++hi;
  }
}

// Eight blocks in flight (AES-NI's latency is several cycles, its
// throughput one or two per cycle).
MPCACHE_AESNI void keystream_aesni(const Aes128RoundKeys& keys, std::uint64_t hi, std::uint64_t lo,
                                   unsigned char* out, std::size_t blocks) {
  __m128i rk[11];
  for (int r = 0; r < 11; ++r) rk[r] = _mm_load_si128(reinterpret_cast<const __m128i*>(keys.round[r]));
  const std::uint64_t hi_be = __builtin_bswap64(hi);
  std::size_t i = 0;
  for (; i + 8 <= blocks; i += 8) {
    __m128i b[8];
    for (int j = 0; j < 8; ++j)
      b[j] = _mm_xor_si128(_mm_set_epi64x(static_cast<long long>(__builtin_bswap64(lo + i + j)),
                                          static_cast<long long>(hi_be)),
                           rk[0]);
    for (int r = 1; r < 10; ++r)
      for (int j = 0; j < 8; ++j) b[j] = _mm_aesenc_si128(b[j], rk[r]);
    for (int j = 0; j < 8; ++j)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * (i + j)), _mm_aesenclast_si128(b[j], rk[10]));
  }
  keystream_one_by_one(keys, hi, lo + i, out + 16 * i, blocks - i);
}

// Sixteen blocks in flight, four per 512-bit register. Counters advance in
// native lanes (hi, lo + i) and a byte shuffle makes them big-endian.
MPCACHE_VAES void keystream_vaes(const Aes128RoundKeys& keys, std::uint64_t hi, std::uint64_t lo,
                                 unsigned char* out, std::size_t blocks) {
  __m512i rk[11];
  for (int r = 0; r < 11; ++r)
    rk[r] = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(keys.round[r])));
  // Reverses the bytes of each 64-bit lane.
  const __m512i swap = _mm512_broadcast_i32x4(_mm_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  const auto h = static_cast<long long>(hi), l = static_cast<long long>(lo);
  __m512i ctr[4];
  for (int j = 0; j < 4; ++j) ctr[j] = _mm512_set_epi64(l + 4 * j + 3, h, l + 4 * j + 2, h, l + 4 * j + 1, h, l + 4 * j, h);
  const __m512i step = _mm512_set_epi64(16, 0, 16, 0, 16, 0, 16, 0);
  std::size_t i = 0;
  for (; i + 16 <= blocks; i += 16) {
    __m512i b[4];
    for (int j = 0; j < 4; ++j) {
      b[j] = _mm512_xor_si512(_mm512_shuffle_epi8(ctr[j], swap), rk[0]);
      ctr[j] = _mm512_add_epi64(ctr[j], step);
    }
    for (int r = 1; r < 10; ++r)
      for (int j = 0; j < 4; ++j) b[j] = _mm512_aesenc_epi128(b[j], rk[r]);
    for (int j = 0; j < 4; ++j) _mm512_storeu_si512(out + 16 * (i + 4 * j), _mm512_aesenclast_epi128(b[j], rk[10]));
  }
  keystream_aesni(keys, hi, lo + i, out + 16 * i, blocks - i);
}

}  // namespace

AesLevel detected_aes_level() noexcept {
  static const AesLevel level = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("aes") || !__builtin_cpu_supports("sse4.1")) return AesLevel::none;
    // __builtin_cpu_supports also checks that the OS saves the wide registers.
    if (__builtin_cpu_supports("vaes") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
      return AesLevel::vaes;
    return AesLevel::aesni;
  }();
  return level;
}

MPCACHE_AESNI Aes128RoundKeys aes128_expand_key(const unsigned char* key) noexcept {
  Aes128RoundKeys keys;
  __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key));
  _mm_store_si128(reinterpret_cast<__m128i*>(keys.round[0]), k);
#define MPCACHE_EXPAND(r, rcon)                                  \
  k = expand_step(k, _mm_aeskeygenassist_si128(k, rcon));       \
  _mm_store_si128(reinterpret_cast<__m128i*>(keys.round[r]), k);
  MPCACHE_EXPAND(1, 0x01)
  MPCACHE_EXPAND(2, 0x02)
  MPCACHE_EXPAND(3, 0x04)
  MPCACHE_EXPAND(4, 0x08)
  MPCACHE_EXPAND(5, 0x10)
  MPCACHE_EXPAND(6, 0x20)
  MPCACHE_EXPAND(7, 0x40)
  MPCACHE_EXPAND(8, 0x80)
  MPCACHE_EXPAND(9, 0x1b)
  MPCACHE_EXPAND(10, 0x36)
#undef MPCACHE_EXPAND
  return keys;
}

void aes128_ctr_keystream(AesLevel level, const Aes128RoundKeys& keys, std::uint64_t hi, std::uint64_t lo,
                          unsigned char* out, std::size_t blocks) noexcept {
  const AesLevel best = detected_aes_level();
  if (level > best) level = best;
  if (level == AesLevel::none) return;  // not allowed (see the header); nothing can run
  // A run whose low half wraps goes block by block, carrying into hi.
  if (blocks > 0 && lo > ~std::uint64_t{0} - (blocks - 1)) return keystream_one_by_one(keys, hi, lo, out, blocks);
  if (level == AesLevel::vaes) return keystream_vaes(keys, hi, lo, out, blocks);
  keystream_aesni(keys, hi, lo, out, blocks);
}

#else  // no x86: OpenSSL does it all

AesLevel detected_aes_level() noexcept { return AesLevel::none; }
Aes128RoundKeys aes128_expand_key(const unsigned char*) noexcept { return {}; }
void aes128_ctr_keystream(AesLevel, const Aes128RoundKeys&, std::uint64_t, std::uint64_t, unsigned char*,
                          std::size_t) noexcept {}

#endif

const char* aes_level_name(AesLevel level) noexcept {
  switch (level) {
    case AesLevel::none: return "none";
    case AesLevel::aesni: return "aesni";
    case AesLevel::vaes: return "vaes";
  }
  return "?";
}

}  // namespace mpcache::kernels
