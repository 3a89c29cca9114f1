#include "block/block_device.h"

#include <cstring>
#include <vector>

#include "base/limits.h"
#include "base/mutex.h"

namespace nasgw::block {

const char* OpName(Op op) {
  switch (op) {
    case Op::kRead:
      return "read";
    case Op::kWrite:
      return "write";
    case Op::kFlush:
      return "flush";
    case Op::kUnmap:
      return "unmap";
    case Op::kCompareAndWrite:
      return "compare-and-write";
    case Op::kPrOut:
      return "persistent-reserve-out";
    case Op::kPrReadKeys:
      return "persistent-reserve-in(read-keys)";
    case Op::kPrReadReservation:
      return "persistent-reserve-in(read-reservation)";
  }
  return "?";
}

namespace {

Status CheckRange(const DeviceInfo& info, uint64_t lba, uint64_t blocks, const char* what) {
  if (blocks == 0) return Status::InvalidArgument(std::string(what) + " of zero blocks");
  if (lba >= info.num_blocks || blocks > info.num_blocks - lba) {
    return Status::OutOfRange(std::string(what) + " of " + std::to_string(blocks) + " blocks at lba " +
                              std::to_string(lba) + " is beyond the end of " + info.name + " (" +
                              std::to_string(info.num_blocks) + " blocks)");
  }
  return Status();
}

}  // namespace

Status BlockDevice::Submit(IoRequest req) {
  const DeviceInfo& in = info();
  if (!req.done) return Status::InvalidArgument("request without a completion callback");
  switch (req.op) {
    case Op::kRead:
    case Op::kWrite: {
      if (req.iov.empty()) return Status::InvalidArgument("read/write without buffers");
      if (req.iov.size() > limits::kIovecsMax) {
        return Status::InvalidArgument("too many buffers: " + std::to_string(req.iov.size()) + " > " +
                                       std::to_string(limits::kIovecsMax));
      }
      uint64_t bytes = 0;
      for (const IoVec& v : req.iov) {
        if (v.base == nullptr || v.len == 0) return Status::InvalidArgument("empty or null buffer");
        bytes += v.len;
      }
      if (bytes % in.block_size != 0) {
        return Status::InvalidArgument("length " + std::to_string(bytes) + " is not a multiple of the block size " +
                                       std::to_string(in.block_size));
      }
      if (bytes > limits::kIoBytesMax ||
          (in.max_transfer_blocks != 0 && bytes / in.block_size > in.max_transfer_blocks)) {
        return Status::InvalidArgument("request of " + std::to_string(bytes) + " bytes exceeds the largest transfer");
      }
      req.blocks = bytes / in.block_size;
      NASGW_RETURN_IF_ERROR(CheckRange(in, req.lba, req.blocks, OpName(req.op)));
      break;
    }
    case Op::kUnmap:
      NASGW_RETURN_IF_ERROR(CheckRange(in, req.lba, req.blocks, "unmap"));
      if (req.blocks > UINT32_MAX || (in.max_unmap_blocks != 0 && req.blocks > in.max_unmap_blocks)) {
        return Status::InvalidArgument(
            "unmap of " + std::to_string(req.blocks) + " blocks exceeds the device's limit of " +
            std::to_string(in.max_unmap_blocks ? in.max_unmap_blocks : UINT32_MAX) + "; split it");
      }
      break;
    case Op::kCompareAndWrite:
      NASGW_RETURN_IF_ERROR(CheckRange(in, req.lba, req.blocks, "compare-and-write"));
      if (req.compare_and_write == nullptr) return Status::InvalidArgument("compare-and-write without data");
      if (in.max_compare_write_blocks == 0) {
        return Status::NotSupported(in.name + " does not support COMPARE AND WRITE");
      }
      if (req.blocks > in.max_compare_write_blocks) {
        return Status::InvalidArgument("compare-and-write of " + std::to_string(req.blocks) +
                                       " blocks; the device allows " + std::to_string(in.max_compare_write_blocks));
      }
      break;
    case Op::kPrOut:
      if (static_cast<uint8_t>(req.pr_out.action) > static_cast<uint8_t>(PrAction::kRegisterAndIgnoreExistingKey)) {
        return Status::InvalidArgument("unknown persistent reserve action");
      }
      break;
    case Op::kPrReadKeys:
      if (req.keys_out == nullptr) return Status::InvalidArgument("read-keys without a result");
      break;
    case Op::kPrReadReservation:
      if (req.reservation_out == nullptr) return Status::InvalidArgument("read-reservation without a result");
      break;
    case Op::kFlush:
      break;
  }
  return SubmitValidated(std::move(req));
}

Status BlockDevice::Read(uint64_t lba, std::span<const IoVec> iov, IoCallback done, IoClass io_class) {
  IoRequest r;
  r.op = Op::kRead;
  r.io_class = io_class;
  r.lba = lba;
  r.iov.assign(iov.begin(), iov.end());
  r.done = std::move(done);
  return Submit(std::move(r));
}

Status BlockDevice::Write(uint64_t lba, std::span<const IoVec> iov, bool fua, IoCallback done, IoClass io_class) {
  IoRequest r;
  r.op = Op::kWrite;
  r.io_class = io_class;
  r.fua = fua;
  r.lba = lba;
  r.iov.assign(iov.begin(), iov.end());
  r.done = std::move(done);
  return Submit(std::move(r));
}

Status BlockDevice::Flush(IoCallback done) {
  IoRequest r;
  r.op = Op::kFlush;
  r.done = std::move(done);
  return Submit(std::move(r));
}

Status BlockDevice::Unmap(uint64_t lba, uint64_t blocks, IoCallback done) {
  IoRequest r;
  r.op = Op::kUnmap;
  r.lba = lba;
  r.blocks = blocks;
  r.done = std::move(done);
  return Submit(std::move(r));
}

Status BlockDevice::CompareAndWrite(uint64_t lba, const uint8_t* data, uint64_t blocks, IoCallback done) {
  IoRequest r;
  r.op = Op::kCompareAndWrite;
  r.lba = lba;
  r.blocks = blocks;
  r.compare_and_write = data;
  r.done = std::move(done);
  return Submit(std::move(r));
}

Status BlockDevice::PrOut(const PrOutParams& params, IoCallback done) {
  IoRequest r;
  r.op = Op::kPrOut;
  r.pr_out = params;
  r.done = std::move(done);
  return Submit(std::move(r));
}

Status BlockDevice::PrReadKeys(PrKeys* out, IoCallback done) {
  IoRequest r;
  r.op = Op::kPrReadKeys;
  r.keys_out = out;
  r.done = std::move(done);
  return Submit(std::move(r));
}

Status BlockDevice::PrReadReservation(PrReservation* out, IoCallback done) {
  IoRequest r;
  r.op = Op::kPrReadReservation;
  r.reservation_out = out;
  r.done = std::move(done);
  return Submit(std::move(r));
}

// ---- blocking helpers ------------------------------------------------------

namespace {

class Waiter {
 public:
  IoCallback Callback() {
    return [this](Status s) {
      MutexLock lock(mu_);
      status_ = std::move(s);
      done_ = true;
      cv_.NotifyOne();
    };
  }
  // Waits for the completion unless submission already failed.
  Status Wait(Status submitted) {
    if (!submitted.ok()) return submitted;
    MutexLock lock(mu_);
    cv_.Wait(mu_, [this]() REQUIRES(mu_) { return done_; });
    return std::move(status_);
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
};

}  // namespace

void IoBatch::Admit() {
  MutexLock l(mu_);
  cv_.Wait(mu_, [this]() REQUIRES(mu_) { return in_flight_ < depth_; });
  in_flight_++;
}

void IoBatch::Done(Status s) {
  MutexLock l(mu_);
  if (!s.ok() && first_.ok()) first_ = std::move(s);
  in_flight_--;
  cv_.NotifyAll();
}

void IoBatch::Read(BlockDevice& dev, uint64_t lba, void* buf, size_t len) {
  Admit();
  IoVec v{buf, len};
  Status s = dev.Read(
      lba, {&v, 1}, [this](Status r) { Done(std::move(r)); }, class_);
  if (!s.ok()) Done(std::move(s));  // not submitted: no callback comes
}

void IoBatch::Write(BlockDevice& dev, uint64_t lba, const void* buf, size_t len, bool fua) {
  Admit();
  IoVec v{const_cast<void*>(buf), len};
  Status s = dev.Write(
      lba, {&v, 1}, fua, [this](Status r) { Done(std::move(r)); }, class_);
  if (!s.ok()) Done(std::move(s));
}

Status IoBatch::Wait() {
  MutexLock l(mu_);
  cv_.Wait(mu_, [this]() REQUIRES(mu_) { return in_flight_ == 0; });
  return first_;
}

Status ReadSync(BlockDevice& dev, uint64_t lba, void* buf, size_t len) {
  Waiter w;
  IoVec v{buf, len};
  return w.Wait(dev.Read(lba, {&v, 1}, w.Callback()));
}

Status WriteSync(BlockDevice& dev, uint64_t lba, const void* buf, size_t len, bool fua) {
  Waiter w;
  IoVec v{const_cast<void*>(buf), len};
  return w.Wait(dev.Write(lba, {&v, 1}, fua, w.Callback()));
}

Status FlushSync(BlockDevice& dev) {
  Waiter w;
  return w.Wait(dev.Flush(w.Callback()));
}

Status UnmapSync(BlockDevice& dev, uint64_t lba, uint64_t blocks) {
  Waiter w;
  return w.Wait(dev.Unmap(lba, blocks, w.Callback()));
}

Status CompareAndWriteSync(BlockDevice& dev, uint64_t lba, const void* compare, const void* write, size_t len) {
  if (dev.info().block_size == 0 || len % dev.info().block_size != 0 || len == 0) {
    return Status::InvalidArgument("compare-and-write length must be whole blocks");
  }
  std::vector<uint8_t> both(2 * len);
  std::memcpy(both.data(), compare, len);
  std::memcpy(both.data() + len, write, len);
  Waiter w;
  return w.Wait(dev.CompareAndWrite(lba, both.data(), len / dev.info().block_size, w.Callback()));
}

Status PrOutSync(BlockDevice& dev, const PrOutParams& params) {
  Waiter w;
  return w.Wait(dev.PrOut(params, w.Callback()));
}

Result<PrKeys> PrReadKeysSync(BlockDevice& dev) {
  PrKeys keys;
  Waiter w;
  Status s = w.Wait(dev.PrReadKeys(&keys, w.Callback()));
  if (!s.ok()) return s;
  return keys;
}

Result<PrReservation> PrReadReservationSync(BlockDevice& dev) {
  PrReservation r;
  Waiter w;
  Status s = w.Wait(dev.PrReadReservation(&r, w.Callback()));
  if (!s.ok()) return s;
  return r;
}

Result<FenceResult> FenceSync(BlockDevice& dev, uint64_t my_key, uint64_t victim_key, PrType type) {
  Status s = PrOutSync(dev, {PrAction::kPreemptAndAbort, type, my_key, victim_key});
  if (s.ok()) return FenceResult{true};
  // ILLEGAL REQUEST (invalid field / opcode): the target lacks the action.
  if (s.code() != Code::kInvalidArgument && s.code() != Code::kNotSupported) return s;
  s = PrOutSync(dev, {PrAction::kPreempt, type, my_key, victim_key});
  if (!s.ok()) return s.WithContext("fence (PREEMPT; PREEMPT AND ABORT is not supported)");
  return FenceResult{false};
}

}  // namespace nasgw::block
