// AES-128 in counter mode as a keystream, with run-time CPU dispatch: VAES
// on 512-bit registers (four blocks per instruction) where the CPU has it,
// AES-NI otherwise. The PRG (src/proto/prg.cpp) draws every random share
// from it; OpenSSL's EVP AES-128-CTR, which it replaces on the hot path,
// stays the reference (tests/proto/aes_ctr_test.cpp) and the fallback on a
// CPU without AES-NI. Nothing here allocates or keeps state.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mpcache::kernels {

enum class AesLevel { none, aesni, vaes };

// The best level this CPU (and OS) supports: vaes needs VAES and AVX-512 F.
AesLevel detected_aes_level() noexcept;
const char* aes_level_name(AesLevel level) noexcept;

struct Aes128RoundKeys {
  alignas(16) unsigned char round[11][16];
};

// The round keys of `key` (16 bytes). Needs AES-NI (level != none).
Aes128RoundKeys aes128_expand_key(const unsigned char* key) noexcept;

// out = AES(c), AES(c + 1), ..., `blocks` 16-byte blocks, where c is the
// 128-bit big-endian counter hi:lo and + carries from lo into hi: exactly
// the keystream of AES-128-CTR with that IV. A level above the detected one
// runs at the detected one; level none is not allowed (use OpenSSL).
void aes128_ctr_keystream(AesLevel level, const Aes128RoundKeys& keys, std::uint64_t hi, std::uint64_t lo,
                          unsigned char* out, std::size_t blocks) noexcept;

}  // namespace mpcache::kernels
