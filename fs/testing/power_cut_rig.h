// PowerCutRig (tests only): LUNs in memory whose power can be cut. After the
// k-th write (any LUN, any thread: the intent log's writer, the metadata
// store's flushes, data writes) the array takes no more; the cut then loses
// everything not yet durable (block::MemLun::PowerCut) and the domain is
// opened again over fresh initiators. The domain crash tests of fs/ and of
// the write-back cache share it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "block/mem_device.h"
#include "fs/domain.h"

namespace nasgw::fs::testing {

class PowerCutRig {
 public:
  // `luns` LUNs of `bytes` each; a reserve formatted over them and a domain
  // created with `options`.
  PowerCutRig(int luns, uint64_t bytes, DomainOptions options) : options_(std::move(options)) {
    for (int i = 0; i < luns; i++) {
      media_.push_back(std::make_shared<block::MemLun>(512, bytes / 512, "naa.cut" + std::to_string(i)));
    }
    Attach();
  }
  // Formats the reserve and creates the domain with a volume "v" of 16 KiB
  // records (call once, in SetUp); returns the volume's id.
  uint32_t Create() {
    ReserveOptions o;
    o.name = "crash";
    o.ag_bytes = 4ull << 20;
    auto r = Reserve::Format(devs_, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return 0;
    reserve_ = std::move(r.value());
    auto d = Domain::Create(reserve_, 0, options_);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) return 0;
    dom_ = std::move(d.value());
    auto v = dom_->CreateVolume("v", 16 << 10);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? v->id : 0;
  }
  // The array takes `writes` more writes, then none.
  void CutAfter(int64_t writes) { left_ = writes; }
  bool dead() const { return dead_.load(); }
  // The power goes: writes stop, the domain is dropped, what was not
  // durable is lost; then the node comes back and opens the domain.
  void CutAndReopen() {
    dead_ = true;
    dom_.reset();
    for (auto& m : media_) m->PowerCut();
    dead_ = false;
    left_ = INT64_MAX;
    Attach();
    auto r = Reserve::Open(devs_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reserve_ = std::move(r.value());
    auto d = Domain::Open(reserve_, 0, options_);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dom_ = std::move(d.value());
  }
  // The domain, shared (the write-back cache holds it weakly).
  std::shared_ptr<Domain>& domain() { return dom_; }

 private:
  // Fresh initiators over the media, each asking before every write.
  void Attach() {
    devs_.clear();
    for (auto& m : media_) {
      auto d = std::make_shared<block::MemDevice>(m);
      d->SetFault([this](const block::IoRequest& req) {
        if (req.op != block::Op::kWrite && req.op != block::Op::kFlush && req.op != block::Op::kUnmap) {
          return Status();
        }
        if (dead_ || left_.fetch_sub(1) <= 0) {
          dead_ = true;
          return Status::IoError("power cut");
        }
        return Status();
      });
      devs_.push_back(d);
    }
  }

  const DomainOptions options_;
  std::vector<std::shared_ptr<block::MemLun>> media_;
  std::vector<Reserve::Device> devs_;
  std::atomic<int64_t> left_{INT64_MAX};  // writes the array still takes
  std::atomic<bool> dead_{false};
  std::shared_ptr<Reserve> reserve_;
  std::shared_ptr<Domain> dom_;
};

}  // namespace nasgw::fs::testing
