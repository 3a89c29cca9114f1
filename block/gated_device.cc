#include "block/gated_device.h"

#include <utility>

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
  if (Changes(req.op) && !gate_->is_open()) {
    Status why = gate_->reason();
    return Status(why.code(),
                  std::string(OpName(req.op)) + " on " + info().name + " refused: " + std::string(why.message()));
  }
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
