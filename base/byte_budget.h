// ByteBudget: a bound on the bytes many holders keep at once (the head
// server's request buffers, a share of the node's memory budget). Taking
// more than is free waits, in arrival order, so a large request is never
// overtaken forever by small ones; Stop() releases every waiter.
//
// Thread-safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <utility>

#include "base/mutex.h"

namespace nasgw {

class ByteBudget {
 public:
  static constexpr uint64_t kStopped = UINT64_MAX;

  explicit ByteBudget(uint64_t capacity) : capacity_(capacity) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Takes n bytes, or the whole capacity when n is more (so that one
  // request larger than the budget still runs, alone), waiting until they
  // are free and every earlier caller has been served. Returns what it took,
  // for Release; kStopped (nothing taken) once Stop() was called.
  uint64_t Acquire(uint64_t n) EXCLUDES(mu_) {
    if (n > capacity_) n = capacity_;
    MutexLock l(mu_);
    if (stopped_) return kStopped;
    const uint64_t ticket = next_ticket_++;
    if (serving_ != ticket || used_ + n > capacity_) {
      waits_++;
      waiting_++;
      while (!stopped_ && (serving_ != ticket || used_ + n > capacity_)) cv_.Wait(mu_);
      waiting_--;
    }
    serving_++;  // the next in line may go (also when stopped: all return)
    cv_.NotifyAll();
    if (stopped_) return kStopped;
    used_ += n;
    return n;
  }

  void Release(uint64_t n) EXCLUDES(mu_) {
    if (n == kStopped || n == 0) return;
    MutexLock l(mu_);
    used_ -= n;
    cv_.NotifyAll();
  }

  void Stop() EXCLUDES(mu_) {
    MutexLock l(mu_);
    stopped_ = true;
    cv_.NotifyAll();
  }

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return used_;
  }
  // Callers that had to wait, in all; and those waiting now.
  uint64_t waits() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return waits_;
  }
  uint64_t waiting() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return waiting_;
  }

 private:
  const uint64_t capacity_;
  mutable Mutex mu_;
  CondVar cv_;
  uint64_t used_ GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ GUARDED_BY(mu_) = 0;
  uint64_t serving_ GUARDED_BY(mu_) = 0;
  uint64_t waits_ GUARDED_BY(mu_) = 0;
  uint64_t waiting_ GUARDED_BY(mu_) = 0;
  bool stopped_ GUARDED_BY(mu_) = false;
};

// Bytes taken from a ByteBudget, given back when this goes (RAII; movable,
// so it travels with the request that holds them).
class BudgetHold {
 public:
  BudgetHold() = default;
  BudgetHold(ByteBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
  BudgetHold(BudgetHold&& o) noexcept : budget_(o.budget_), bytes_(std::exchange(o.bytes_, 0)) {}
  BudgetHold& operator=(BudgetHold&& o) noexcept {
    if (this != &o) {
      Release();
      budget_ = o.budget_;
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  BudgetHold(const BudgetHold&) = delete;
  BudgetHold& operator=(const BudgetHold&) = delete;
  ~BudgetHold() { Release(); }

  uint64_t bytes() const { return bytes_; }
  void Release() {
    if (budget_ != nullptr && bytes_ != 0) budget_->Release(bytes_);
    bytes_ = 0;
  }

 private:
  ByteBudget* budget_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace nasgw
