#include "block/mem_device.h"

#include <cstring>

#include "base/clock.h"
#include "base/limits.h"
#include "base/mutex.h"

namespace nasgw::block {

MemLun::MemLun(uint32_t block_size, uint64_t num_blocks, const std::string& designator) {
  info_.name = "mem:" + designator;
  info_.block_size = block_size;
  info_.num_blocks = num_blocks;
  info_.vendor = "NASGW";
  info_.product = "MEMLUN";
  info_.serial = designator;
  info_.designator = designator;
  info_.thin_provisioned = true;
  info_.unmap_reads_zeroes = true;
  info_.max_compare_write_blocks = 1;
  durable_.assign(block_size * num_blocks, 0);
}

void MemLun::PowerCut() {
  MutexLock lock(mu_);
  volatile_.clear();
}

size_t MemLun::UnsyncedBlocks() const {
  MutexLock lock(mu_);
  return volatile_.size();
}

void MemLun::ReadBlock(uint64_t lba, uint8_t* out) const {
  auto it = volatile_.find(lba);
  const uint8_t* src = it != volatile_.end() ? it->second.data() : &durable_[lba * info_.block_size];
  std::memcpy(out, src, info_.block_size);
}

void MemLun::WriteBlock(uint64_t lba, const uint8_t* in, bool durable) {
  if (durable) {
    std::memcpy(&durable_[lba * info_.block_size], in, info_.block_size);
    volatile_.erase(lba);
  } else {
    volatile_[lba].assign(in, in + info_.block_size);
  }
}

// Reservation rules of SPC-4 5.13 for the types nasgw uses.
Status MemLun::CheckAccess(uint64_t initiator, bool write) const {
  if (!reserved_ || holder_ == initiator) return Status();
  const bool registered = registrations_.contains(initiator);
  switch (type_) {
    case PrType::kWriteExclusive:
      return write ? Status::Fenced("RESERVATION CONFLICT") : Status();
    case PrType::kExclusiveAccess:
      return Status::Fenced("RESERVATION CONFLICT");
    case PrType::kWriteExclusiveRegistrantsOnly:
    case PrType::kWriteExclusiveAllRegistrants:
      return (write && !registered) ? Status::Fenced("RESERVATION CONFLICT") : Status();
    case PrType::kExclusiveAccessRegistrantsOnly:
    case PrType::kExclusiveAccessAllRegistrants:
      return registered ? Status() : Status::Fenced("RESERVATION CONFLICT");
    case PrType::kNone:
      return Status();
  }
  return Status();
}

Status MemLun::Execute(uint64_t initiator, IoRequest& req) {
  MutexLock lock(mu_);
  const uint32_t bs = info_.block_size;
  switch (req.op) {
    case Op::kRead: {
      NASGW_RETURN_IF_ERROR(CheckAccess(initiator, false));
      std::vector<uint8_t> block(bs);
      uint64_t lba = req.lba;
      size_t off = 0;  // offset inside `block` already consumed
      for (const IoVec& v : req.iov) {
        size_t done = 0;
        while (done < v.len) {
          if (off == 0) ReadBlock(lba, block.data());
          size_t n = std::min(v.len - done, static_cast<size_t>(bs) - off);
          std::memcpy(static_cast<uint8_t*>(v.base) + done, block.data() + off, n);
          done += n;
          off += n;
          if (off == bs) {
            off = 0;
            lba++;
          }
        }
      }
      return Status();
    }
    case Op::kWrite: {
      NASGW_RETURN_IF_ERROR(CheckAccess(initiator, true));
      std::vector<uint8_t> block(bs);
      uint64_t lba = req.lba;
      size_t off = 0;
      for (const IoVec& v : req.iov) {
        size_t done = 0;
        while (done < v.len) {
          size_t n = std::min(v.len - done, static_cast<size_t>(bs) - off);
          std::memcpy(block.data() + off, static_cast<const uint8_t*>(v.base) + done, n);
          done += n;
          off += n;
          if (off == bs) {
            WriteBlock(lba++, block.data(), req.fua);
            off = 0;
          }
        }
      }
      return Status();
    }
    case Op::kFlush:
      for (auto& [lba, data] : volatile_) std::memcpy(&durable_[lba * bs], data.data(), bs);
      volatile_.clear();
      return Status();
    case Op::kUnmap: {
      NASGW_RETURN_IF_ERROR(CheckAccess(initiator, true));
      std::vector<uint8_t> zero(bs, 0);
      for (uint64_t i = 0; i < req.blocks; i++) WriteBlock(req.lba + i, zero.data(), true);
      return Status();
    }
    case Op::kCompareAndWrite: {
      NASGW_RETURN_IF_ERROR(CheckAccess(initiator, true));
      std::vector<uint8_t> block(bs);
      for (uint64_t i = 0; i < req.blocks; i++) {
        ReadBlock(req.lba + i, block.data());
        if (std::memcmp(block.data(), req.compare_and_write + i * bs, bs) != 0) {
          return Status::Miscompare("CHECK CONDITION: MISCOMPARE at lba " + std::to_string(req.lba + i));
        }
      }
      const uint8_t* data = req.compare_and_write + req.blocks * bs;
      for (uint64_t i = 0; i < req.blocks; i++) WriteBlock(req.lba + i, data + i * bs, false);
      return Status();
    }
    case Op::kPrReadKeys:
      req.keys_out->generation = pr_generation_;
      req.keys_out->keys.clear();
      for (auto& [init, key] : registrations_) req.keys_out->keys.push_back(key);
      return Status();
    case Op::kPrReadReservation: {
      *req.reservation_out = PrReservation{};
      req.reservation_out->generation = pr_generation_;
      if (reserved_) {
        req.reservation_out->reserved = true;
        req.reservation_out->key = registrations_.contains(holder_) ? registrations_.at(holder_) : 0;
        req.reservation_out->type = type_;
      }
      return Status();
    }
    case Op::kPrOut:
      break;
  }

  const PrOutParams& p = req.pr_out;
  auto it = registrations_.find(initiator);
  const bool registered = it != registrations_.end();
  Status conflict = Status::Fenced("RESERVATION CONFLICT");  // not const: returned by move
  switch (p.action) {
    case PrAction::kRegister:
    case PrAction::kRegisterAndIgnoreExistingKey:
      if (p.action == PrAction::kRegister && (registered ? it->second != p.key : p.key != 0)) return conflict;
      if (p.service_action_key == 0) {
        if (registered) {
          registrations_.erase(it);
          if (reserved_ && holder_ == initiator) reserved_ = false;
        }
      } else {
        registrations_[initiator] = p.service_action_key;
      }
      pr_generation_++;
      return Status();
    case PrAction::kReserve:
      if (!registered || it->second != p.key) return conflict;
      if (reserved_ && (holder_ != initiator || type_ != p.type)) return conflict;
      reserved_ = true;
      holder_ = initiator;
      type_ = p.type;
      return Status();
    case PrAction::kRelease:
      if (!registered || it->second != p.key) return conflict;
      if (reserved_ && holder_ == initiator) reserved_ = false;
      return Status();
    case PrAction::kClear:
      if (!registered || it->second != p.key) return conflict;
      registrations_.clear();
      reserved_ = false;
      pr_generation_++;
      return Status();
    case PrAction::kPreempt:
    case PrAction::kPreemptAndAbort: {
      if (!registered || it->second != p.key) return conflict;
      const bool holder_preempted =
          reserved_ && registrations_.contains(holder_) && registrations_.at(holder_) == p.service_action_key;
      for (auto r = registrations_.begin(); r != registrations_.end();) {
        if (r->second == p.service_action_key && r->first != initiator) {
          r = registrations_.erase(r);
        } else {
          ++r;
        }
      }
      if (holder_preempted) {
        holder_ = initiator;
        type_ = p.type;
      }
      pr_generation_++;
      return Status();
    }
  }
  return Status::InvalidArgument("unknown persistent reserve action");
}

MemDevice::MemDevice(std::shared_ptr<MemLun> lun, uint64_t initiator)
    : lun_(std::move(lun)), initiator_(initiator), thread_([this] { Run(); }) {}

MemDevice::~MemDevice() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

void MemDevice::SetFault(std::function<Status(const IoRequest&)> fault) {
  MutexLock lock(mu_);
  fault_ = std::move(fault);
}

BlockStats MemDevice::Stats() const {
  MutexLock lock(mu_);
  BlockStats s = stats_;
  s.queued = static_cast<uint32_t>(queue_.size());
  return s;
}

Status MemDevice::SubmitValidated(IoRequest req) {
  MutexLock lock(mu_);
  if (stopping_) return Status::Unavailable("device closing");
  // The fault is decided here, on the submitter's thread (see SetFault).
  Status fault;
  if (fault_) {
    auto fn = fault_;
    lock.Unlock();
    fault = fn(req);
    lock.Lock();
    if (stopping_) return Status::Unavailable("device closing");
  }
  if (queue_.size() >= limits::kSubmitQueueMax) {
    if (std::this_thread::get_id() == thread_.get_id()) return Status::Busy("submission queue full");
    cv_.Wait(mu_, [this]() REQUIRES(mu_) { return queue_.size() < limits::kSubmitQueueMax || stopping_; });
  }
  queue_.push_back({std::move(req), std::move(fault)});
  cv_.NotifyAll();
  return Status();
}

void MemDevice::Run() {
  MutexLock lock(mu_);
  for (;;) {
    cv_.Wait(mu_, [this]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and drained
    IoRequest req = std::move(queue_.front().req);
    Status s = std::move(queue_.front().fault);
    queue_.pop_front();
    cv_.NotifyAll();  // room for a blocked submitter
    lock.Unlock();

    const uint64_t start = MonotonicNanos();
    if (s.ok()) s = lun_->Execute(initiator_, req);
    const uint64_t bytes = req.op == Op::kRead || req.op == Op::kWrite ? req.blocks * lun_->info().block_size : 0;
    auto done = std::move(req.done);

    lock.Lock();
    OpStats& os = req.op == Op::kRead ? stats_.read : req.op == Op::kWrite ? stats_.write : stats_.other;
    os.ops++;
    os.bytes += bytes;
    if (!s.ok()) os.errors++;
    os.latency_ns.Record(MonotonicNanos() - start);
    lock.Unlock();
    done(std::move(s));
    lock.Lock();
  }
}

}  // namespace nasgw::block
