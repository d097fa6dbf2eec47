// AES-256-GCM record protection (OpenSSL EVP) in plain C++ behind a std-only
// interface. The 96-bit nonce is 4 zero bytes and a 64-bit record counter,
// so a replayed, reordered or altered record fails authentication.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mpcache::sys {

constexpr std::size_t aead_tag_bytes = 16;

class Aead {
 public:
  explicit Aead(const std::array<std::uint8_t, 32>& key);
  ~Aead();
  Aead(const Aead&) = delete;
  Aead& operator=(const Aead&) = delete;
  // Encrypts data in place and writes the tag.
  void seal(std::uint64_t counter, const std::byte* aad, std::size_t aad_size, std::byte* data,
            std::size_t size, std::byte* tag);
  // Decrypts in place; false when authentication fails.
  bool open(std::uint64_t counter, const std::byte* aad, std::size_t aad_size, std::byte* data,
            std::size_t size, const std::byte* tag);

  // The same over a record that arrives or leaves in pieces: begin, then the
  // pieces in order (each transformed in place), then finish. One record at
  // a time in each direction.
  void begin_seal(std::uint64_t counter, const std::byte* aad, std::size_t aad_size);
  void seal_piece(std::byte* data, std::size_t size);
  void finish_seal(std::byte* tag);
  void begin_open(std::uint64_t counter, const std::byte* aad, std::size_t aad_size);
  void open_piece(std::byte* data, std::size_t size);
  bool finish_open(const std::byte* tag);  // false when authentication fails

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace mpcache::sys
