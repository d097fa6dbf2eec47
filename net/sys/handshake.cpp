#include "handshake.hpp"
#include <memory>
#include <stdexcept>
#include <vector>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include "connect.hpp"

namespace mpcache::sys {
namespace {

struct PkeyFree { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
struct CtxFree { void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); } };
struct MdFree { void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); } };
struct BioFree { void operator()(BIO* p) const { BIO_free(p); } };
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Ctx = std::unique_ptr<EVP_PKEY_CTX, CtxFree>;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

Pkey read_pem(const std::string& pem, bool secret, const std::string& what) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) fail("out of memory reading " + what);
  Pkey key(secret ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                  : PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  if (!key) fail(what + " is not a PEM " + (secret ? "private" : "public") + " key");
  if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) fail(what + " is not an Ed25519 key");
  return key;
}

std::string write_pem(EVP_PKEY* key, bool secret) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  const int ok = secret ? PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
                        : PEM_write_bio_PUBKEY(bio.get(), key);
  if (ok != 1) fail("cannot encode a key as PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

void put32(std::vector<unsigned char>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

std::array<std::uint8_t, 32> hkdf(const std::vector<unsigned char>& secret,
                                  const std::vector<unsigned char>& salt, const std::string& info) {
  Ctx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  std::array<std::uint8_t, 32> out{};
  std::size_t len = out.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt.data(), static_cast<int>(salt.size())) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), secret.data(), static_cast<int>(secret.size())) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), reinterpret_cast<const unsigned char*>(info.data()),
                                  static_cast<int>(info.size())) != 1 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &len) != 1)
    fail("HKDF failed");
  return out;
}

}  // namespace

std::pair<std::string, std::string> generate_ed25519_pem() {
  Ctx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1)
    fail("Ed25519 key generation failed");
  Pkey key(raw);
  return {write_pem(key.get(), true), write_pem(key.get(), false)};
}

void check_ed25519_pem(const std::string& pem, bool secret, const std::string& what) {
  read_pem(pem, secret, what);
}

DirectionKeys run_handshake(int fd, std::uint32_t self, std::uint32_t peer,
                            const std::string& secret_key_pem, const std::string& peer_public_pem,
                            std::chrono::steady_clock::time_point deadline,
                            const std::function<void(const std::array<unsigned char, 32>&)>& first_from_peer) {
  const std::string me = "party " + std::to_string(self), them = "party " + std::to_string(peer);
  Pkey identity = read_pem(secret_key_pem, true, me + "'s secret key");
  Pkey pinned = read_pem(peer_public_pem, false, them + "'s pinned public key");

  Ctx kctx(EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!kctx || EVP_PKEY_keygen_init(kctx.get()) != 1 || EVP_PKEY_keygen(kctx.get(), &raw) != 1)
    fail("X25519 key generation failed");
  Pkey eph(raw);
  std::array<unsigned char, 32> mine{}, theirs{};
  std::size_t len = mine.size();
  if (EVP_PKEY_get_raw_public_key(eph.get(), mine.data(), &len) != 1 || len != 32)
    fail("X25519 public key export failed");

  const std::string step = me + ": key exchange with " + them;
  write_exactly(fd, mine.data(), mine.size(), deadline, step);
  read_exactly(fd, theirs.data(), theirs.size(), deadline, step);
  if (first_from_peer) first_from_peer(theirs);

  // Transcript: both ids and both ephemeral keys, lower party first.
  std::vector<unsigned char> transcript;
  const std::string label = "mpcache handshake v1";
  transcript.insert(transcript.end(), label.begin(), label.end());
  const bool low = self < peer;
  put32(transcript, low ? self : peer);
  put32(transcript, low ? peer : self);
  const auto& a = low ? mine : theirs;
  const auto& b = low ? theirs : mine;
  transcript.insert(transcript.end(), a.begin(), a.end());
  transcript.insert(transcript.end(), b.begin(), b.end());

  auto signed_by = [&](std::uint32_t signer) {
    std::vector<unsigned char> m = transcript;
    put32(m, signer);
    return m;
  };
  std::array<unsigned char, 64> sig{}, peer_sig{};
  {
    std::unique_ptr<EVP_MD_CTX, MdFree> md(EVP_MD_CTX_new());
    const auto msg = signed_by(self);
    std::size_t sig_len = sig.size();
    if (!md || EVP_DigestSignInit(md.get(), nullptr, nullptr, nullptr, identity.get()) != 1 ||
        EVP_DigestSign(md.get(), sig.data(), &sig_len, msg.data(), msg.size()) != 1 || sig_len != 64)
      fail(me + ": Ed25519 signing failed");
  }
  write_exactly(fd, sig.data(), sig.size(), deadline, step);
  read_exactly(fd, peer_sig.data(), peer_sig.size(), deadline, step);
  {
    std::unique_ptr<EVP_MD_CTX, MdFree> md(EVP_MD_CTX_new());
    const auto msg = signed_by(peer);
    if (!md || EVP_DigestVerifyInit(md.get(), nullptr, nullptr, nullptr, pinned.get()) != 1 ||
        EVP_DigestVerify(md.get(), peer_sig.data(), peer_sig.size(), msg.data(), msg.size()) != 1)
      fail(me + ": " + them +
           " failed to prove its identity (its signature does not match the pinned public key "
           "in the cluster config)");
  }

  Pkey peer_eph(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, theirs.data(), theirs.size()));
  Ctx dctx(EVP_PKEY_CTX_new(eph.get(), nullptr));
  std::vector<unsigned char> shared(32);
  std::size_t shared_len = shared.size();
  if (!peer_eph || !dctx || EVP_PKEY_derive_init(dctx.get()) != 1 ||
      EVP_PKEY_derive_set_peer(dctx.get(), peer_eph.get()) != 1 ||
      EVP_PKEY_derive(dctx.get(), shared.data(), &shared_len) != 1)
    fail(me + ": X25519 with " + them + " failed (bad ephemeral key)");
  shared.resize(shared_len);

  DirectionKeys keys;
  keys.send = hkdf(shared, transcript, "mpcache key " + std::to_string(self) + "->" + std::to_string(peer));
  keys.recv = hkdf(shared, transcript, "mpcache key " + std::to_string(peer) + "->" + std::to_string(self));
  return keys;
}

}  // namespace mpcache::sys
