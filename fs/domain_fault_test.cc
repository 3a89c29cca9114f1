// The domain under device read errors: every failed read reaches the caller
// as an error (IoError here), never as an answer (an empty directory, a hole
// of zeros, "not found", "stale"), and a failed change changes nothing.
//
// Method: the store has no block cache, so every table read reaches the
// LUNs; the metadata is flushed into table files by reopening the domain.
// An operation is then run over and over, the k-th metadata read of this
// thread failing on run k, until a run meets no fault: every read it makes
// has failed once. RocksDB's own threads are never faulted (MemDevice asks
// the fault function on the submitting thread).
#include <atomic>
#include <functional>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "block/mem_device.h"
#include "fs/domain.h"

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kAgBytes = 4 * kMiB;
constexpr uint32_t kRecordBytes = 16 << 10;

enum class Region { kMeta, kData };

// Which reads fail. Shared by every LUN's fault function.
struct Faults {
  std::thread::id thread;  // only this thread's reads fail
  std::atomic<bool> armed{false};
  Region region = Region::kMeta;  // set while disarmed
  int fail_at = 0;                // fail the n-th read of the region (1-based); 0: every one
  std::atomic<int> seen{0};
  std::atomic<int> hits{0};
};

class DomainFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    faults_.thread = std::this_thread::get_id();
    std::vector<Reserve::Device> devs;
    for (int i = 0; i < 2; i++) {
      media_.push_back(std::make_shared<block::MemLun>(512, 64 * kMiB / 512, "naa.fault" + std::to_string(i)));
      auto dev = std::make_shared<block::MemDevice>(media_.back());
      Faults* f = &faults_;
      dev->SetFault([f, bs = dev->info().block_size](const block::IoRequest& req) {
        if (req.op != block::Op::kRead || !f->armed.load() || std::this_thread::get_id() != f->thread) {
          return Status();
        }
        // The first group of each LUN holds metadata (meta_groups below);
        // reads below it are the reserve header's and the store's.
        const bool meta = req.lba * bs < Reserve::AgOffset(kAgBytes, 1);
        if (meta != (f->region == Region::kMeta)) return Status();
        const int n = ++f->seen;
        if (f->fail_at != 0 && n != f->fail_at) return Status();
        f->hits++;
        return Status::IoError("injected read error");
      });
      devs.push_back(dev);
    }
    ReserveOptions o;
    o.name = "fault";
    o.ag_bytes = kAgBytes;
    reserve_ = std::move(Reserve::Format(devs, o).value());
    auto d = Domain::Create(reserve_, 0, Options());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dom_ = std::move(d.value());
    auto v = dom_->CreateVolume("vol", kRecordBytes);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vol_ = v->id;
  }

  static DomainOptions Options() {
    DomainOptions o;
    o.meta_groups = 2;              // one per LUN: group 0
    o.store.block_cache_bytes = 0;  // every table read reaches the LUNs
    o.store.write_buffer_bytes = 4 * kMiB;
    return o;
  }

  // Flushes everything into table files: the next reads go to the LUNs.
  // Keys sort by tag; xattrs ('X') come after every other kind, so padding
  // them pushes the rest out of a table's last, partial block (MetaFs keeps
  // that one in memory).
  void Settle() {
    if (pad_ == 0) {
      auto p = dom_->Create(vol_, kRootIno, "pad", FileType::kRegular, 0644, 0, 0);
      ASSERT_TRUE(p.ok());
      pad_ = p->ino;
      std::mt19937_64 rng(7);
      for (int i = 0; i < 4; i++) {
        std::string v(16 << 10, 0);
        for (auto& c : v) c = static_cast<char>(rng());
        ASSERT_TRUE(dom_->SetXattr(vol_, pad_, "user.pad" + std::to_string(i), v, 0).ok());
      }
    }
    dom_.reset();
    auto d = Domain::Open(reserve_, 0, Options());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dom_ = std::move(d.value());
  }

  // Runs op with the k-th read of `region` failing, k = 1, 2, ... until a
  // run meets no fault. A run that met one must fail with IoError; `after`
  // (run with no fault) checks that such a run changed nothing. Returns the
  // status of the last run, which met no fault.
  Status Sweep(Region region, const std::function<Status()>& op, const std::function<void()>& after = nullptr) {
    int faulted = 0;
    for (int k = 1;; k++) {
      faults_.region = region;
      faults_.fail_at = k;
      faults_.seen = 0;
      faults_.hits = 0;
      faults_.armed = true;
      Status s = op();
      faults_.armed = false;
      if (faults_.hits == 0) {
        EXPECT_GT(faulted, 0) << "no read reached the device: the sweep tested nothing";
        return s;
      }
      faulted++;
      EXPECT_EQ(s.code(), Code::kIoError) << "read " << k << " failed, the operation said: " << s.ToString();
      if (after) after();
      if (k > 1000) {
        ADD_FAILURE() << "sweep does not end";
        return s;
      }
    }
  }

  // Every read of `region` fails while op runs.
  Status AllFail(Region region, const std::function<Status()>& op) {
    faults_.region = region;
    faults_.fail_at = 0;
    faults_.seen = 0;
    faults_.hits = 0;
    faults_.armed = true;
    Status s = op();
    faults_.armed = false;
    EXPECT_GT(faults_.hits.load(), 0) << "no read reached the device";
    return s;
  }

  Attr Mk(uint64_t dir, const std::string& name, FileType t = FileType::kRegular) {
    auto a = dom_->Create(vol_, dir, name, t, 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    return a.ok() ? *a : Attr{};
  }
  static std::string Pattern(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string s(n, 0);
    for (auto& c : s) c = static_cast<char>('a' + rng() % 26);
    return s;
  }
  std::vector<std::string> Names(uint64_t dir) {
    auto e = dom_->ReadDir(vol_, dir, 0, 1000);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    std::vector<std::string> out;
    if (e.ok()) {
      for (const auto& x : *e) out.push_back(x.name);
    }
    return out;
  }
  void ExpectClean() {
    auto p = dom_->Check();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (const auto& line : *p) ADD_FAILURE() << line;
  }

  Faults faults_;
  std::vector<std::shared_ptr<block::MemLun>> media_;
  std::shared_ptr<Reserve> reserve_;
  std::unique_ptr<Domain> dom_;
  uint32_t vol_ = 0;
  uint64_t pad_ = 0;
};

TEST_F(DomainFaultTest, RmdirOfANonEmptyDirectoryWhoseScanFailsRemovesNothing) {
  Attr d = Mk(kRootIno, "d", FileType::kDirectory);
  Attr f = Mk(d.ino, "f");
  ASSERT_TRUE(dom_->Write(vol_, f.ino, 0, "data", 4).ok());
  Mk(d.ino, "sub", FileType::kDirectory);
  Settle();
  Status last = Sweep(
      Region::kMeta, [&] { return dom_->Rmdir(vol_, kRootIno, "d"); },
      [&] {
        auto l = dom_->Lookup(vol_, kRootIno, "d");
        ASSERT_TRUE(l.ok()) << "the directory went: " << l.status().ToString();
        EXPECT_EQ(Names(d.ino), (std::vector<std::string>{"f", "sub"}));
      });
  EXPECT_EQ(last.code(), Code::kNotEmpty);
  // The same through rename onto it.
  Mk(kRootIno, "e", FileType::kDirectory);
  Settle();
  last = Sweep(
      Region::kMeta, [&] { return dom_->Rename(vol_, kRootIno, "e", kRootIno, "d"); },
      [&] {
        EXPECT_EQ(Names(d.ino), (std::vector<std::string>{"f", "sub"}));
        EXPECT_TRUE(dom_->Lookup(vol_, kRootIno, "e").ok());
      });
  EXPECT_EQ(last.code(), Code::kNotEmpty);
  EXPECT_EQ(Names(d.ino), (std::vector<std::string>{"f", "sub"}));
  ExpectClean();
}

TEST_F(DomainFaultTest, RmdirOfAnEmptyDirectoryFailsWholeOrSucceeds) {
  Attr d = Mk(kRootIno, "d", FileType::kDirectory);
  ASSERT_TRUE(dom_->SetXattr(vol_, d.ino, "user.x", "1", 0).ok());
  Settle();
  Status last = Sweep(
      Region::kMeta, [&] { return dom_->Rmdir(vol_, kRootIno, "d"); },
      [&] { EXPECT_TRUE(dom_->Lookup(vol_, kRootIno, "d").ok()); });
  EXPECT_TRUE(last.ok()) << last.ToString();
  EXPECT_EQ(dom_->Lookup(vol_, kRootIno, "d").status().code(), Code::kNotFound);
  ExpectClean();
}

TEST_F(DomainFaultTest, ReadOverAFailedReadIsAnErrorNeverZeros) {
  Attr f = Mk(kRootIno, "f");
  const std::string data = Pattern(5 * kRecordBytes + 1000, 1);
  ASSERT_TRUE(dom_->Write(vol_, f.ino, 0, data.data(), data.size()).ok());
  Settle();
  std::string got;
  auto read = [&] {
    got.assign(data.size(), 'Z');
    auto n = dom_->Read(vol_, f.ino, 0, got.size(), got.data());
    if (!n.ok()) return n.status();
    EXPECT_EQ(*n, data.size());
    return Status();
  };
  // The extent maps (metadata) cannot be read.
  Status last = Sweep(Region::kMeta, read);
  ASSERT_TRUE(last.ok()) << last.ToString();
  EXPECT_TRUE(got == data);
  // The data cannot be read.
  EXPECT_EQ(AllFail(Region::kData, read).code(), Code::kIoError);
  last = Sweep(Region::kData, read);
  ASSERT_TRUE(last.ok()) << last.ToString();
  EXPECT_TRUE(got == data);
}

TEST_F(DomainFaultTest, WritesAndTruncatesThatCannotReadChangeNothing) {
  Attr f = Mk(kRootIno, "f");
  const std::string data = Pattern(size_t{3} * kRecordBytes, 2);
  ASSERT_TRUE(dom_->Write(vol_, f.ino, 0, data.data(), data.size()).ok());
  Settle();
  const StatFs before = dom_->Statfs();
  auto unchanged = [&] {
    std::string got(data.size(), 0);
    auto n = dom_->Read(vol_, f.ino, 0, got.size(), got.data());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_TRUE(got == data);
    EXPECT_EQ(dom_->Statfs().free_bytes, before.free_bytes) << "space leaked or lost";
  };
  // A partial-record write reads the record's old content first.
  Status s = AllFail(Region::kData, [&] { return dom_->Write(vol_, f.ino, 100, "xyz", 3).status(); });
  EXPECT_EQ(s.code(), Code::kIoError);
  unchanged();
  s = Sweep(
      Region::kMeta, [&] { return dom_->Write(vol_, f.ino, 100, "xyz", 3).status(); }, unchanged);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Settle();
  std::string now = data;
  now.replace(100, 3, "xyz");
  SetAttr cut;
  cut.set_size = true;
  cut.size = kRecordBytes + 10;
  auto same = [&] {
    std::string got(now.size(), 0);
    auto n = dom_->Read(vol_, f.ino, 0, got.size(), got.data());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_TRUE(got == now);
  };
  s = Sweep(
      Region::kMeta, [&] { return dom_->SetAttrs(vol_, f.ino, cut).status(); }, same);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string got(cut.size, 0);
  ASSERT_TRUE(dom_->Read(vol_, f.ino, 0, got.size(), got.data()).ok());
  EXPECT_TRUE(got == now.substr(0, cut.size));
  ExpectClean();
}

TEST_F(DomainFaultTest, LookupsAttributesListingsAndXattrsPropagateReadErrors) {
  Attr d = Mk(kRootIno, "Dir", FileType::kDirectory);
  Attr f = Mk(d.ino, "File");
  auto l = dom_->Create(vol_, d.ino, "link", FileType::kSymlink, 0777, 0, 0, 0, "File");
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(dom_->SetXattr(vol_, f.ino, "user.a", "va", 0).ok());
  Settle();
  EXPECT_TRUE(Sweep(Region::kMeta, [&] { return dom_->Lookup(vol_, kRootIno, "Dir").status(); }).ok());
  EXPECT_TRUE(Sweep(Region::kMeta, [&] { return dom_->Lookup(vol_, d.ino, "File").status(); }).ok());
  EXPECT_TRUE(Sweep(Region::kMeta, [&] { return dom_->GetAttr(vol_, f.ino).status(); }).ok());
  EXPECT_TRUE(Sweep(Region::kMeta,
                    [&] {
                      return dom_->GetAttr(Handle{vol_, f.ino, f.gen}).status();
                    })
                  .ok())
      << "a handle whose volume cannot be read is not stale";
  EXPECT_TRUE(Sweep(Region::kMeta, [&] { return dom_->ReadLink(vol_, l->ino).status(); }).ok());
  EXPECT_TRUE(Sweep(Region::kMeta, [&] {
                auto e = dom_->ReadDir(vol_, d.ino, 0, 100);
                if (e.ok()) {
                  EXPECT_EQ(e->size(), 2u);
                }
                return e.status();
              }).ok());
  EXPECT_EQ(Sweep(Region::kMeta, [&] { return dom_->FindCaseless(vol_, d.ino, "file").status(); }).code(), Code::kOk);
  EXPECT_TRUE(Sweep(Region::kMeta, [&] { return dom_->GetXattr(vol_, f.ino, "user.a").status(); }).ok());
  EXPECT_EQ(Sweep(Region::kMeta, [&] { return dom_->GetXattr(vol_, f.ino, "user.none").status(); }).code(),
            Code::kNotFound);
  EXPECT_TRUE(Sweep(Region::kMeta, [&] {
                auto x = dom_->ListXattr(vol_, f.ino);
                if (x.ok()) {
                  EXPECT_EQ(x->size(), 1u);
                }
                return x.status();
              }).ok());
  EXPECT_TRUE(Sweep(Region::kMeta, [&] { return dom_->FindVolume("vol").status(); }).ok());
  EXPECT_TRUE(Sweep(Region::kMeta, [&] {
                auto v = dom_->ListVolumes();
                if (v.ok()) {
                  EXPECT_EQ(v->size(), 1u);
                }
                return v.status();
              }).ok());
  EXPECT_TRUE(Sweep(Region::kMeta, [&] {
                auto p = dom_->Check();
                if (p.ok()) {
                  EXPECT_TRUE(p->empty());
                }
                return p.status();
              }).ok());
}

TEST_F(DomainFaultTest, ChangesThatCannotTellWhatExistsAreRefused) {
  Attr d = Mk(kRootIno, "d", FileType::kDirectory);
  Attr f = Mk(d.ino, "f");
  ASSERT_TRUE(dom_->Write(vol_, f.ino, 0, "old", 3).ok());
  ASSERT_TRUE(dom_->SetXattr(vol_, f.ino, "user.a", "1", 0).ok());
  Mk(d.ino, "g");
  Settle();
  auto f_intact = [&] {
    auto a = dom_->Lookup(vol_, d.ino, "f");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->ino, f.ino);
    char buf[3];
    auto n = dom_->Read(vol_, f.ino, 0, 3, buf);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(std::string(buf, 3), "old");
  };
  // An existing name is never created over.
  EXPECT_EQ(Sweep(
                Region::kMeta, [&] { return dom_->Create(vol_, d.ino, "f", FileType::kRegular, 0644, 0, 0).status(); },
                f_intact)
                .code(),
            Code::kExists);
  EXPECT_EQ(Sweep(
                Region::kMeta, [&] { return dom_->Link(vol_, f.ino, d.ino, "g").status(); }, f_intact)
                .code(),
            Code::kExists);
  EXPECT_EQ(Sweep(Region::kMeta, [&] { return dom_->SetXattr(vol_, f.ino, "user.a", "2", 1); }).code(), Code::kExists);
  EXPECT_EQ(*dom_->GetXattr(vol_, f.ino, "user.a"), "1");
  EXPECT_EQ(Sweep(Region::kMeta, [&] { return dom_->CreateVolume("vol").status(); }).code(), Code::kExists);
  // Renaming onto an existing file replaces it only when it can be seen.
  Status s = Sweep(
      Region::kMeta, [&] { return dom_->Rename(vol_, d.ino, "g", d.ino, "f"); }, f_intact);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(dom_->Lookup(vol_, d.ino, "g").status().code(), Code::kNotFound);
  Settle();
  // Unlinking a file whose extent maps cannot be read frees nothing, and
  // leaks nothing once it works.
  Attr h = Mk(d.ino, "h");
  const std::string data = Pattern(size_t{4} * kRecordBytes, 3);
  ASSERT_TRUE(dom_->Write(vol_, h.ino, 0, data.data(), data.size()).ok());
  Settle();
  const uint64_t free_before = dom_->Statfs().free_bytes;
  s = Sweep(
      Region::kMeta, [&] { return dom_->Unlink(vol_, d.ino, "h"); },
      [&] {
        EXPECT_TRUE(dom_->Lookup(vol_, d.ino, "h").ok());
        EXPECT_EQ(dom_->Statfs().free_bytes, free_before);
      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(dom_->Statfs().free_bytes, free_before + data.size());
  ExpectClean();
}

TEST_F(DomainFaultTest, AnOrphanThatCannotBeDroppedStaysForTheNextOpen) {
  Attr g = Mk(kRootIno, "g");
  const std::string data = Pattern(size_t{2} * kRecordBytes, 4);
  ASSERT_TRUE(dom_->Write(vol_, g.ino, 0, data.data(), data.size()).ok());
  Settle();  // the extent maps are in a table file now
  ASSERT_TRUE(dom_->OpenFile(vol_, g.ino).ok());
  ASSERT_TRUE(dom_->Unlink(vol_, kRootIno, "g").ok());
  const uint64_t free_open = dom_->Statfs().free_bytes;
  // The release cannot read the extent maps: it says so, and the orphan
  // (with its space) stays rather than half-dropped.
  EXPECT_EQ(AllFail(Region::kMeta, [&] { return dom_->ReleaseFile(vol_, g.ino); }).code(), Code::kIoError);
  EXPECT_EQ(dom_->Statfs().free_bytes, free_open);
  ExpectClean();
  Settle();
  EXPECT_EQ(dom_->Statfs().free_bytes, free_open + data.size()) << "the next open drops the orphan";
  EXPECT_EQ(dom_->GetAttr(vol_, g.ino).status().code(), Code::kNotFound);
  ExpectClean();
}

}  // namespace
}  // namespace nasgw::fs
