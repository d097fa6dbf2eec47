#include "aead.hpp"
#include <algorithm>
#include <climits>
#include <string>
#include <stdexcept>
#include <openssl/evp.h>

namespace mpcache::sys {

struct Aead::Ctx {
  EVP_CIPHER_CTX* enc = nullptr;
  EVP_CIPHER_CTX* dec = nullptr;
  ~Ctx() {
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
  }
};

namespace {
std::array<unsigned char, 12> nonce_of(std::uint64_t counter) {
  std::array<unsigned char, 12> n{};
  for (int i = 0; i < 8; ++i) n[4 + i] = static_cast<unsigned char>(counter >> (8 * i));
  return n;
}
void check(int ok, const char* what) {
  if (ok != 1) throw std::runtime_error(std::string("AES-256-GCM: ") + what + " failed");
}
auto uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }
auto uc(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }
}  // namespace

Aead::Aead(const std::array<std::uint8_t, 32>& key) : ctx_(std::make_unique<Ctx>()) {
  ctx_->enc = EVP_CIPHER_CTX_new();
  ctx_->dec = EVP_CIPHER_CTX_new();
  if (!ctx_->enc || !ctx_->dec) throw std::runtime_error("AES-256-GCM: out of memory");
  check(EVP_EncryptInit_ex(ctx_->enc, EVP_aes_256_gcm(), nullptr, key.data(), nullptr), "init");
  check(EVP_DecryptInit_ex(ctx_->dec, EVP_aes_256_gcm(), nullptr, key.data(), nullptr), "init");
}

Aead::~Aead() = default;

void Aead::seal(std::uint64_t counter, const std::byte* aad, std::size_t aad_size, std::byte* data,
                std::size_t size, std::byte* tag) {
  begin_seal(counter, aad, aad_size);
  seal_piece(data, size);
  finish_seal(tag);
}

bool Aead::open(std::uint64_t counter, const std::byte* aad, std::size_t aad_size, std::byte* data,
                std::size_t size, const std::byte* tag) {
  begin_open(counter, aad, aad_size);
  open_piece(data, size);
  return finish_open(tag);
}

void Aead::begin_seal(std::uint64_t counter, const std::byte* aad, std::size_t aad_size) {
  const auto nonce = nonce_of(counter);
  EVP_CIPHER_CTX* c = ctx_->enc;
  check(EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()), "nonce");
  int len = 0;
  check(EVP_EncryptUpdate(c, nullptr, &len, uc(aad), static_cast<int>(aad_size)), "aad");
}

void Aead::seal_piece(std::byte* data, std::size_t size) {
  int len = 0;
  while (size > 0) {
    const int chunk = static_cast<int>(std::min<std::size_t>(size, INT_MAX / 2));
    check(EVP_EncryptUpdate(ctx_->enc, uc(data), &len, uc(data), chunk), "encrypt");
    data += chunk;
    size -= static_cast<std::size_t>(chunk);
  }
}

void Aead::finish_seal(std::byte* tag) {
  int len = 0;
  check(EVP_EncryptFinal_ex(ctx_->enc, nullptr, &len), "final");
  check(EVP_CIPHER_CTX_ctrl(ctx_->enc, EVP_CTRL_GCM_GET_TAG, aead_tag_bytes, uc(tag)), "tag");
}

void Aead::begin_open(std::uint64_t counter, const std::byte* aad, std::size_t aad_size) {
  const auto nonce = nonce_of(counter);
  EVP_CIPHER_CTX* c = ctx_->dec;
  check(EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()), "nonce");
  int len = 0;
  check(EVP_DecryptUpdate(c, nullptr, &len, uc(aad), static_cast<int>(aad_size)), "aad");
}

void Aead::open_piece(std::byte* data, std::size_t size) {
  int len = 0;
  while (size > 0) {
    const int chunk = static_cast<int>(std::min<std::size_t>(size, INT_MAX / 2));
    check(EVP_DecryptUpdate(ctx_->dec, uc(data), &len, uc(data), chunk), "decrypt");
    data += chunk;
    size -= static_cast<std::size_t>(chunk);
  }
}

bool Aead::finish_open(const std::byte* tag) {
  unsigned char t[aead_tag_bytes];
  for (std::size_t i = 0; i < aead_tag_bytes; ++i) t[i] = static_cast<unsigned char>(tag[i]);
  int len = 0;
  check(EVP_CIPHER_CTX_ctrl(ctx_->dec, EVP_CTRL_GCM_SET_TAG, aead_tag_bytes, t), "tag");
  return EVP_DecryptFinal_ex(ctx_->dec, nullptr, &len) == 1;
}

}  // namespace mpcache::sys
