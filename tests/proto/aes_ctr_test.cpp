// The AES-128-CTR keystream kernels (plain C++ under src/core) against
// OpenSSL's EVP AES-128-CTR, at every level this CPU has.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
#include <random>
#include <openssl/evp.h>
#include "aes_ctr.hpp"

using namespace mpcache::kernels;

namespace {

// OpenSSL's keystream: AES-128-CTR of zeros from IV hi:lo (big endian).
std::vector<unsigned char> openssl_keystream(const std::array<unsigned char, 16>& key, std::uint64_t hi,
                                             std::uint64_t lo, std::size_t blocks) {
  std::array<unsigned char, 16> iv{};
  for (int i = 0; i < 8; ++i) iv[i] = static_cast<unsigned char>(hi >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) iv[8 + i] = static_cast<unsigned char>(lo >> (56 - 8 * i));
  std::vector<unsigned char> out(16 * blocks, 0);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  REQUIRE(EVP_EncryptInit_ex(ctx, EVP_aes_128_ctr(), nullptr, key.data(), iv.data()) == 1);
  int written = 0;
  if (blocks > 0) REQUIRE(EVP_EncryptUpdate(ctx, out.data(), &written, out.data(), static_cast<int>(out.size())) == 1);
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

std::vector<AesLevel> levels_here() {
  std::vector<AesLevel> levels;
  for (AesLevel l : {AesLevel::aesni, AesLevel::vaes})
    if (l <= detected_aes_level()) levels.push_back(l);
  return levels;
}

}  // namespace

TEST_CASE("the AES-CTR keystream equals OpenSSL's at every level, size and counter, carries included") {
  if (detected_aes_level() == AesLevel::none) return;  // OpenSSL alone runs here: nothing to compare
  std::mt19937_64 draw(11);
  std::array<unsigned char, 16> key{};
  for (auto& b : key) b = static_cast<unsigned char>(draw());
  const Aes128RoundKeys keys = aes128_expand_key(key.data());
  const std::uint64_t max = ~std::uint64_t{0};
  // Counters: zero, arbitrary, and low halves that wrap inside the run (the
  // carry goes into hi, as OpenSSL's 128-bit counter does).
  const std::pair<std::uint64_t, std::uint64_t> counters[] = {
      {0, 0}, {7, 123456789}, {draw(), draw()}, {5, max - 3}, {max, max - 20}, {3, max}};
  for (AesLevel level : levels_here()) {
    INFO("level " << aes_level_name(level));
    for (const auto& [hi, lo] : counters)
      for (std::size_t blocks : {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 4099}) {
        INFO("counter " << hi << ":" << lo << ", " << blocks << " blocks");
        std::vector<unsigned char> ours(16 * blocks + 16, 0xAB);
        aes128_ctr_keystream(level, keys, hi, lo, ours.data(), blocks);
        const auto reference = openssl_keystream(key, hi, lo, blocks);
        CHECK(std::equal(reference.begin(), reference.end(), ours.begin()));
        CHECK(ours[16 * blocks] == 0xAB);  // nothing written past the run
      }
  }
}

TEST_CASE("a level above this CPU's runs at its own") {
  if (detected_aes_level() == AesLevel::none) return;
  std::array<unsigned char, 16> key{1, 2, 3};
  const Aes128RoundKeys keys = aes128_expand_key(key.data());
  std::vector<unsigned char> best(16 * 40), top(16 * 40);
  aes128_ctr_keystream(detected_aes_level(), keys, 9, 10, best.data(), 40);
  aes128_ctr_keystream(AesLevel::vaes, keys, 9, 10, top.data(), 40);
  CHECK(best == top);
  CHECK(best == openssl_keystream(key, 9, 10, 40));
}
