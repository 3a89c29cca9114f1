#include "block/gated_device.h"

#include <cstdio>
#include <utility>

#include "base/log.h"
#include "base/mutex.h"

namespace nasgw::block {

std::shared_ptr<WriteGate> WriteGate::Closed(const Status& reason) {
  auto g = std::make_shared<WriteGate>();
  g->Close(reason);
  return g;
}

bool WriteGate::Close(const Status& reason) {
  NASGW_ASSERT(!reason.ok());
  std::function<void(const Status&)> fn;
  {
    MutexLock lock(mu_);
    if (!open_.load(std::memory_order_relaxed)) return false;
    reason_ = reason;  // kept: `fn` is called with it after the lock is released
    open_.store(false, std::memory_order_release);
    fn = std::move(on_close_);
    on_close_ = nullptr;
  }
  if (fn) fn(reason);
  return true;
}

Status WriteGate::reason() const {
  MutexLock lock(mu_);
  return reason_;
}

void WriteGate::OnClose(std::function<void(const Status&)> fn) {
  Status closed;
  {
    MutexLock lock(mu_);
    if (open_.load(std::memory_order_relaxed)) {
      on_close_ = std::move(fn);
      return;
    }
    closed = reason_;
  }
  fn(closed);
}

void WriteGate::Bound(Clock clock, uint64_t give_up_ns, uint64_t renewed_ns) {
  NASGW_ASSERT(clock != nullptr && !bounded_.load());
  clock_.store(clock);
  give_up_ns_.store(give_up_ns);
  renewed_ns_.store(renewed_ns);
  bounded_.store(true, std::memory_order_release);
}

void WriteGate::Renewed(uint64_t sent_ns) {
  // Renewals finish in the order they were sent (one renewer), but keep the
  // latest anyway.
  uint64_t cur = renewed_ns_.load();
  while (sent_ns > cur && !renewed_ns_.compare_exchange_weak(cur, sent_ns)) {
  }
}

uint64_t WriteGate::SilentNs(uint64_t now_ns) const {
  if (!bounded_.load(std::memory_order_acquire)) return 0;
  const uint64_t last = renewed_ns_.load();
  return now_ns > last ? now_ns - last : 0;
}

Status WriteGate::CheckBound() {
  if (!is_open()) return reason();
  if (!bounded_.load(std::memory_order_acquire)) return Status();
  const uint64_t silent = SilentNs(clock_.load()());
  if (silent < give_up_ns_.load()) return Status();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", static_cast<double>(silent) / 1e9);
  Status lost = Status::Fenced(std::string("lease not renewed for ") + secs +
                               " (a hang, or a renewal still waiting on the SAN); another node may take the "
                               "domain over");
  if (Close(lost)) NASGW_LOG(kError, "fs") << "ownership lost" << Kv("error", lost.ToString());
  return reason();
}

GatedDevice::GatedDevice(std::shared_ptr<BlockDevice> inner, std::shared_ptr<WriteGate> gate)
    : inner_(std::move(inner)), gate_(std::move(gate)) {
  NASGW_ASSERT(inner_ != nullptr && gate_ != nullptr);
}

bool GatedDevice::Changes(Op op) {
  switch (op) {
    case Op::kRead:
    case Op::kPrReadKeys:
    case Op::kPrReadReservation:
      return false;
    case Op::kWrite:
    case Op::kFlush:
    case Op::kUnmap:
    case Op::kCompareAndWrite:
    case Op::kPrOut:
      return true;
  }
  return true;
}

Status GatedDevice::SubmitValidated(IoRequest req) {
  if (Changes(req.op) && !gate_->CheckBound().ok()) {
    Status why = gate_->reason();
    return Status(why.code(),
                  std::string(OpName(req.op)) + " on " + info().name + " refused: " + std::string(why.message()));
  }
  if (Changes(req.op)) req.gate = gate_.get();  // kept alive by the callback below
  // A conflict on any LUN closes the gate for all of them.
  req.done = [gate = gate_, done = std::move(req.done), name = info().name](Status s) {
    if (s.code() == Code::kFenced) gate->Close(s.WithContext(name));
    done(std::move(s));
  };
  return inner_->Submit(std::move(req));
}

std::vector<std::shared_ptr<BlockDevice>> Gate(const std::vector<std::shared_ptr<BlockDevice>>& devices,
                                               const std::shared_ptr<WriteGate>& gate) {
  std::vector<std::shared_ptr<BlockDevice>> out;
  out.reserve(devices.size());
  for (const auto& d : devices) out.push_back(std::make_shared<GatedDevice>(d, gate));
  return out;
}

}  // namespace nasgw::block
