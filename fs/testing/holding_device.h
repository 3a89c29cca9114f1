// HoldingDevice: a test seam that, once told to, holds every write until the
// test lets it go, in any order (an array completing commands out of order,
// or a node whose writes never reach the array before it dies).
#pragma once

#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "base/mutex.h"
#include "block/block_device.h"

namespace nasgw::fs::testing {

class HoldingDevice final : public block::BlockDevice {
 public:
  explicit HoldingDevice(std::shared_ptr<block::BlockDevice> inner) : inner_(std::move(inner)) {}
  const block::DeviceInfo& info() const override { return inner_->info(); }
  block::BlockStats Stats() const override { return inner_->Stats(); }
  void Hold() {
    MutexLock l(mu_);
    hold_ = true;
  }
  // Waits (at most 10 s) until `n` writes are held.
  bool WaitHeld(size_t n) {
    MutexLock l(mu_);
    return cv_.WaitFor(mu_, std::chrono::seconds(10), [&]() REQUIRES(mu_) { return held_.size() >= n; });
  }
  // Lets held write i (in arrival order) go on to the medium.
  void Release(size_t i) {
    block::IoRequest r;
    {
      MutexLock l(mu_);
      if (released_.contains(i)) return;
      released_.insert(i);
      r = std::move(held_.at(i));
    }
    r.done = [this, done = std::move(r.done)](Status s) {
      done(std::move(s));  // the log has seen it when the test is told
      MutexLock l(mu_);
      completed_++;
      cv_.NotifyAll();
    };
    Status s = inner_->Submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  // Lets every write still held go (a test that failed half way).
  void ReleaseAll() {
    size_t n = 0;
    {
      MutexLock l(mu_);
      hold_ = false;
      n = held_.size();
    }
    for (size_t i = 0; i < n; i++) Release(i);
  }
  // Waits (at most 10 s) until `n` released writes have completed.
  bool WaitCompleted(size_t n) {
    MutexLock l(mu_);
    return cv_.WaitFor(mu_, std::chrono::seconds(10), [&]() REQUIRES(mu_) { return completed_ >= n; });
  }

 protected:
  Status SubmitValidated(block::IoRequest req) override {
    MutexLock l(mu_);
    if (!hold_ || req.op != block::Op::kWrite) {
      l.Unlock();
      return inner_->Submit(std::move(req));
    }
    held_.push_back(std::move(req));
    cv_.NotifyAll();
    return Status();
  }

 private:
  std::shared_ptr<block::BlockDevice> inner_;
  Mutex mu_;
  CondVar cv_;
  std::vector<block::IoRequest> held_ GUARDED_BY(mu_);
  std::set<size_t> released_ GUARDED_BY(mu_);
  size_t completed_ GUARDED_BY(mu_) = 0;
  bool hold_ GUARDED_BY(mu_) = false;
};

}  // namespace nasgw::fs::testing
