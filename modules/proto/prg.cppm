// Pseudo-random generator for correlated randomness: AES-128 in counter mode
// (our AES-NI/VAES keystream, src/proto/aes_ctr.cpp, where the CPU has
// AES-NI; OpenSSL EVP otherwise: the same values either way). The 128-bit counter block is
// (stream id, block index), so every stream has its own key stream and
// concurrent sub-protocols draw the same values at every party whatever
// order their messages arrive in.
export module mpcache.proto:prg;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

using PrgKey = std::array<std::uint8_t, 16>;

// 16 bytes from the operating system's RNG (getrandom).
PrgKey random_prg_key();
// Deterministic key for tests and reproducible benches only: NOT secret.
PrgKey insecure_prg_key(std::uint64_t seed, std::uint64_t index);

// The stream a backend's key agreement runs on; derive_stream never returns it.
inline constexpr StreamId protocol_setup_stream = ~StreamId{0};
// The stream id of a protocol handle's `child`-th fork (or session): the
// same at every party, so that forks' messages and randomness line up.
StreamId derive_stream(StreamId parent, std::uint64_t child);

// Who computes the keystream: `best`, our kernels where the CPU has AES-NI
// (OpenSSL otherwise), or `openssl` always (the reference, for tests and
// the kernels bench). Both give the same values.
enum class PrgEngine : std::uint8_t { best, openssl };

class Prg {
 public:
  explicit Prg(const PrgKey& key, PrgEngine engine = PrgEngine::best);
  ~Prg();
  Prg(Prg&&) noexcept;
  Prg& operator=(Prg&&) noexcept;

  // Fills `out` with key stream for `stream` starting at AES block `block`;
  // advances `block` past the blocks used (two ring elements per block).
  void fill(StreamId stream, std::uint64_t& block, std::span<Ring> out) const;
  RingTensor draw(StreamId stream, std::uint64_t& block, const Shape& shape) const;
  // "vaes", "aesni" or "openssl": what computes this PRG's keystream.
  const char* engine_name() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpcache
