// libFuzzer target for the head protocol's decoders: whatever bytes arrive,
// decoding returns an error or a value, never crashes, never reads out of
// bounds (ASan), and a value that decodes re-encodes to bytes that decode to
// the same thing. `make fuzz` builds it with clang; the test suite runs it
// for a bounded time (tests/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "proto/head.h"

namespace {

constexpr uint16_t kOps[] = {1,  2,  3,  4,  10, 11, 12, 13, 20, 21, 22, 23, 24, 25,
                             26, 27, 30, 31, 32, 33, 34, 40, 41, 42, 43, 50, 51, 52};

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nasgw::proto;
  if (size >= kHeaderBytes) {
    (void)DecodeHeader(data, false);
    (void)DecodeHeader(data, true);
  }
  if (size < 1) return 0;
  const Op op = static_cast<Op>(kOps[data[0] % (sizeof(kOps) / sizeof(kOps[0]))]);
  const std::string payload(reinterpret_cast<const char*>(data + 1), size - 1);

  auto r = DecodeRequest(op, payload);
  if (r.ok()) {
    // Re-encoding a decoded request gives bytes that decode to the same request.
    std::string again = EncodeRequest(*r);
    if (op == Op::kWrite) again.append(r->data);
    auto r2 = DecodeRequest(op, again);
    Check(r2.ok());
    Check(EncodeRequest(*r2) == EncodeRequest(*r));
    Check(r2->data == r->data && r2->reject == r->reject && r2->stable == r->stable);
    // Handles (version 2: snapshot, scope, MAC) and MOUNT's path survive.
    Check(r2->h.mac == r->h.mac && r2->h.scope == r->h.scope && r2->h.snap == r->h.snap && r2->h.gen == r->h.gen);
    Check(r2->h2.mac == r->h2.mac && r2->h2.scope == r->h2.scope && r2->name2 == r->name2);
  }
  auto rep = DecodeReply(op, payload);
  if (rep.ok()) {
    auto rep2 = DecodeReply(op, EncodeReply(op, *rep));
    Check(rep2.ok());
    Check(EncodeReply(op, *rep2) == EncodeReply(op, *rep));
    Check(rep2->mac == rep->mac && rep2->macs == rep->macs && rep2->attr.snap == rep->attr.snap);
    Check(rep2->stable == rep->stable && rep2->verifier == rep->verifier &&
          rep2->hello.write_verifier == rep->hello.write_verifier);
  }
  if (size >= 1 + kReadPrefixBytes) (void)DecodeReadPrefix(data + 1, static_cast<uint32_t>(size), 1u << 20);
  (void)DecodeError(payload);
  // A LOCK refused with EAGAIN carries the conflict after the message.
  auto denied = DecodeLockDenied(payload);
  if (denied.ok()) {
    auto again = DecodeLockDenied(EncodeLockDenied(DecodeError(payload), *denied));
    Check(again.ok());
    Check(EncodeLockDenied("", *again) == EncodeLockDenied("", *denied));
  }
  return 0;
}
