module;
#include "prelude.hpp"
#include <sys/random.h>
#include <openssl/evp.h>
#include "aes_ctr.hpp"
module mpcache.proto;
import mpcache.core;

namespace mpcache {

PrgKey random_prg_key() {
  PrgKey key{};
  std::size_t got = 0;
  while (got < key.size()) {
    const ssize_t r = getrandom(key.data() + got, key.size() - got, 0);
    if (r < 0) throw Error(ErrorCode::invalid_argument, "getrandom failed: no OS randomness");
    got += static_cast<std::size_t>(r);
  }
  return key;
}

PrgKey insecure_prg_key(std::uint64_t seed, std::uint64_t index) {
  // splitmix64: cheap, deterministic, well mixed. Not a secret by design.
  auto mix = [](std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  const std::uint64_t lo = mix(seed ^ mix(index));
  const std::uint64_t hi = mix(lo ^ 0xA5A5A5A5A5A5A5A5ull);
  PrgKey key{};
  std::memcpy(key.data(), &lo, 8);
  std::memcpy(key.data() + 8, &hi, 8);
  return key;
}

StreamId derive_stream(StreamId parent, std::uint64_t child) {
  std::uint64_t x = parent ^ (child * 0x9E3779B97F4A7C15ull) ^ 0x6A09E667F3BCC909ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x == protocol_setup_stream ? x - 1 : x;
}

struct Prg::Impl {
  // Our AES-NI/VAES keystream where the CPU has AES-NI (the same values as
  // OpenSSL's, written straight into the draw: no zeroing, no XOR, no
  // context to reposition); OpenSSL's EVP AES-128-CTR otherwise (none).
  kernels::AesLevel level = kernels::detected_aes_level();
  kernels::Aes128RoundKeys round_keys{};
  EVP_CIPHER_CTX* ctx = nullptr;
  // Where the keystream stands after the last fill: a fill that continues
  // it (same stream, next block) skips re-initialising the context, which
  // cost more than the AES of a small draw (one per round and party in a
  // sort's layers).
  bool positioned = false;
  StreamId stream = 0;
  std::uint64_t next_block = 0;
  ~Impl() { EVP_CIPHER_CTX_free(ctx); }
};

Prg::Prg(const PrgKey& key, PrgEngine engine) : impl_(std::make_unique<Impl>()) {
  if (engine == PrgEngine::openssl) impl_->level = kernels::AesLevel::none;
  if (impl_->level != kernels::AesLevel::none) {
    impl_->round_keys = kernels::aes128_expand_key(key.data());
    return;
  }
  impl_->ctx = EVP_CIPHER_CTX_new();
  if (!impl_->ctx || EVP_EncryptInit_ex(impl_->ctx, EVP_aes_128_ctr(), nullptr, key.data(),
                                        nullptr) != 1)
    throw Error(ErrorCode::invalid_argument, "cannot initialise AES-128-CTR (OpenSSL)");
}

Prg::~Prg() = default;
Prg::Prg(Prg&&) noexcept = default;
Prg& Prg::operator=(Prg&&) noexcept = default;

void Prg::fill(StreamId stream, std::uint64_t& block, std::span<Ring> out) const {
  const std::size_t blocks = (out.size() + 1) / 2;
  if (blocks == 0) return;
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  if (impl_->level != kernels::AesLevel::none) {
    const std::size_t whole_blocks = out.size() / 2;
    kernels::aes128_ctr_keystream(impl_->level, impl_->round_keys, stream, block, bytes, whole_blocks);
    if (out.size() % 2) {  // last half block
      alignas(16) unsigned char tail[16];
      kernels::aes128_ctr_keystream(impl_->level, impl_->round_keys, stream, block + whole_blocks, tail, 1);
      std::memcpy(bytes + 16 * whole_blocks, tail, sizeof(Ring));
    }
    block += blocks;
    return;
  }
  if (!impl_->positioned || impl_->stream != stream || impl_->next_block != block) {
    // Counter block: stream id (high 64 bits), block index (low 64 bits), big endian.
    std::array<unsigned char, 16> iv{};
    for (int i = 0; i < 8; ++i) iv[i] = static_cast<unsigned char>(stream >> (56 - 8 * i));
    for (int i = 0; i < 8; ++i) iv[8 + i] = static_cast<unsigned char>(block >> (56 - 8 * i));
    if (EVP_EncryptInit_ex(impl_->ctx, nullptr, nullptr, nullptr, iv.data()) != 1)
      throw Error(ErrorCode::invalid_argument, "AES-CTR re-initialisation failed");
  }
  impl_->positioned = false;  // until this fill has run to its end
  const std::size_t whole = out.size() / 2 * 16;
  std::memset(bytes, 0, out.size() * sizeof(Ring));
  int written = 0;
  constexpr std::size_t chunk = std::size_t{1} << 28;  // EVP takes int lengths
  for (std::size_t done = 0; done < whole; done += chunk) {
    const int len = static_cast<int>(std::min(chunk, whole - done));
    if (EVP_EncryptUpdate(impl_->ctx, bytes + done, &written, bytes + done, len) != 1)
      throw Error(ErrorCode::invalid_argument, "AES-CTR encryption failed");
  }
  if (out.size() % 2) {  // last half block
    unsigned char tail[16] = {};
    if (EVP_EncryptUpdate(impl_->ctx, tail, &written, tail, 16) != 1)
      throw Error(ErrorCode::invalid_argument, "AES-CTR encryption failed");
    std::memcpy(bytes + whole, tail, sizeof(Ring));
  }
  // Whole 16-byte blocks only (the tail used one whole), so the counter now
  // stands at block + blocks.
  impl_->positioned = true;
  impl_->stream = stream;
  impl_->next_block = block + blocks;
  block += blocks;
}

const char* Prg::engine_name() const noexcept {
  return impl_->level == kernels::AesLevel::none ? "openssl" : kernels::aes_level_name(impl_->level);
}

RingTensor Prg::draw(StreamId stream, std::uint64_t& block, const Shape& shape) const {
  RingTensor t = RingTensor::from_shape(shape);
  fill(stream, block, std::span<Ring>(t.data(), t.size()));
  return t;
}

}  // namespace mpcache
