#include "fs/handle.h"

#include <cerrno>
#include <cstring>

#include "base/assert.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/random.h>

namespace nasgw::fs {

namespace {

void Random(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    NASGW_ASSERT(r > 0);  // getrandom fails only on bad arguments here
    got += static_cast<size_t>(r);
  }
}

void PutLE(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

std::array<uint8_t, kHandleMacInputBytes> HandleMacInput(const Handle& h) {
  std::array<uint8_t, kHandleMacInputBytes> in{};
  in[0] = kHandleVersion;
  PutLE(&in[1], h.volume, 4);
  PutLE(&in[5], h.ino, 8);
  PutLE(&in[13], h.gen, 8);
  PutLE(&in[21], h.snap, 4);
  PutLE(&in[25], h.scope, 8);
  return in;
}

Result<HandleKey> HandleKey::FromSecret(std::string_view secret) {
  if (secret.size() != kHandleSecretBytes) {
    return Status::InvalidArgument("handle secret must be " + std::to_string(kHandleSecretBytes) + " bytes");
  }
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) return Status(Code::kNotSupported, "OpenSSL has no HMAC");
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  EVP_MAC_free(mac);  // the context holds its own reference
  if (ctx == nullptr) return Status(Code::kNoSpace, "EVP_MAC_CTX_new");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) != 1) {
    EVP_MAC_CTX_free(ctx);
    return Status(Code::kNotSupported, "HMAC-SHA256 init failed");
  }
  HandleKey k;
  k.ctx_ = std::shared_ptr<void>(ctx, [](void* c) { EVP_MAC_CTX_free(static_cast<EVP_MAC_CTX*>(c)); });
  return k;
}

HandleMac HandleKey::Mac(const Handle& h) const {
  HandleMac out{};
  if (ctx_ == nullptr) return out;
  // A copy of the keyed context per call: the key schedule is computed once,
  // and concurrent callers share nothing mutable.
  EVP_MAC_CTX* c = EVP_MAC_CTX_dup(static_cast<EVP_MAC_CTX*>(ctx_.get()));
  NASGW_ASSERT(c != nullptr);
  const auto in = HandleMacInput(h);
  unsigned char full[32];
  size_t n = 0;
  const bool ok = EVP_MAC_update(c, in.data(), in.size()) == 1 && EVP_MAC_final(c, full, &n, sizeof(full)) == 1;
  EVP_MAC_CTX_free(c);
  NASGW_ASSERT(ok && n == sizeof(full));
  std::memcpy(out.data(), full, out.size());
  return out;
}

bool HandleKey::Verify(const Handle& h) const {
  if (ctx_ == nullptr) return false;
  const HandleMac want = Mac(h);
  return CRYPTO_memcmp(want.data(), h.mac.data(), want.size()) == 0;
}

std::string NewHandleSecret() {
  std::string s(kHandleSecretBytes, '\0');
  Random(s.data(), s.size());
  return s;
}

uint64_t NewGeneration() {
  uint64_t g = 0;
  while (g == 0) Random(&g, sizeof(g));
  return g;
}

}  // namespace nasgw::fs
