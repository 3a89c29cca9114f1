#include "fs/metafs.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

#include "block/mem_device.h"

namespace nasgw::fs {
namespace {

using block::MemDevice;
using block::MemLun;

constexpr uint64_t kMiB = 1 << 20;

class MetaFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<Reserve::Device> devs;
    for (int i = 0; i < 2; i++) {
      media_.push_back(std::make_shared<MemLun>(512, 16 * kMiB / 512, "naa.meta" + std::to_string(i)));
      devs.push_back(std::make_shared<MemDevice>(media_.back()));
    }
    ReserveOptions o;
    o.name = "meta";
    o.ag_bytes = kMiB;
    auto r = Reserve::Format(devs, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reserve_ = std::move(r.value());
  }

  // Eight 1 MiB groups over both LUNs by default.
  std::unique_ptr<MetaFs> Create(const MetaFsOptions& o = {},
                                 const std::vector<AgId>& groups = {
                                     {0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}}) {
    auto fs = MetaFs::Create(reserve_, 0, groups, o);
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    return fs.ok() ? std::move(fs.value()) : nullptr;
  }
  std::unique_ptr<MetaFs> Mount(const MetaFsOptions& o = {}) {
    auto fs = MetaFs::Mount(reserve_, 0, o);
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    return fs.ok() ? std::move(fs.value()) : nullptr;
  }
  void PowerCut() {
    for (auto& m : media_) m->PowerCut();
  }

  std::vector<std::shared_ptr<MemLun>> media_;
  std::shared_ptr<Reserve> reserve_;
};

std::string Random(std::mt19937_64& rng, size_t n) {
  std::string s(n, 0);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Compares contents without printing megabytes of binary on failure.
::testing::AssertionResult Same(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) i++;
  auto r = ::testing::AssertionFailure() << "got " << got.size() << " bytes, want " << want.size()
                                         << ", first difference at " << i;
  if (!got.empty() && got[0] == '<') r << " (" << got.substr(0, 200) << ")";
  return r;
}

std::string ReadAll(MetaFs& fs, const std::string& name) {
  auto f = fs.OpenForRead(name);
  if (!f.ok()) return "<" + f.status().ToString() + ">";
  auto size = fs.Size(name);
  std::string out(*size, 0);
  // Odd-sized reads at odd offsets exercise the block arithmetic.
  size_t at = 0;
  while (at < out.size()) {
    size_t n = std::min<size_t>(out.size() - at, 777 + at % 5000);
    auto got = fs.Read(*f, at, n, out.data() + at);
    if (!got.ok()) return "<" + got.status().ToString() + ">";
    if (*got == 0) break;
    at += *got;
  }
  return out;
}

Status WriteFile(MetaFs& fs, const std::string& name, const std::string& data, std::mt19937_64& rng, bool sync = true) {
  auto f = fs.OpenForWrite(name);
  if (!f.ok()) return f.status();
  size_t at = 0;
  while (at < data.size()) {
    size_t n = std::min<size_t>(data.size() - at, 1 + rng() % 300000);
    NASGW_RETURN_IF_ERROR(fs.Append(*f, data.data() + at, n));
    at += n;
    if (rng() % 4 == 0) NASGW_RETURN_IF_ERROR(fs.Flush(*f));
  }
  return sync ? fs.Sync(*f) : Status();
}

TEST_F(MetaFsTest, FilesSurviveRemount) {
  std::mt19937_64 rng(1);
  std::map<std::string, std::string> want;
  {
    auto fs = Create();
    ASSERT_TRUE(fs);
    for (size_t size : {0, 1, 100, 4095, 4096, 4097, 70000, 3 * 1024 * 1024 + 17}) {
      std::string name = "db/" + std::to_string(size) + ".sst";
      want[name] = Random(rng, size);
      ASSERT_TRUE(WriteFile(*fs, name, want[name], rng).ok());
      EXPECT_TRUE(Same(ReadAll(*fs, name), want[name])) << "read back before remount: " << name;
    }
  }
  auto fs = Mount();
  ASSERT_TRUE(fs);
  EXPECT_EQ(fs->List("db/").size(), want.size());
  for (const auto& [name, data] : want) EXPECT_TRUE(Same(ReadAll(*fs, name), data)) << name;
  EXPECT_FALSE(fs->Exists("nope"));
  EXPECT_EQ(fs->Size("nope").status().code(), Code::kNotFound);
}

TEST_F(MetaFsTest, AppendsContinueAfterRemount) {
  std::mt19937_64 rng(2);
  std::string a = Random(rng, 5000), b = Random(rng, 9000);
  {
    auto fs = Create();
    auto f = fs->OpenForWrite("wal");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(fs->Append(*f, a.data(), a.size()).ok());
    ASSERT_TRUE(fs->Sync(*f).ok());
  }
  {
    auto fs = Mount();
    auto f = fs->OpenForRead("wal");  // RocksDB reopens WALs for reading only; here we append to prove the tail
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(fs->Append(*f, b.data(), b.size()).ok());
    ASSERT_TRUE(fs->Sync(*f).ok());
  }
  auto fs = Mount();
  EXPECT_TRUE(Same(ReadAll(*fs, "wal"), a + b));
}

TEST_F(MetaFsTest, PowerCutKeepsExactlyWhatWasSynced) {
  std::mt19937_64 rng(3);
  std::string synced = Random(rng, 100000), later = Random(rng, 50000);
  {
    auto fs = Create();
    auto f = fs->OpenForWrite("MANIFEST-000001");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(fs->Append(*f, synced.data(), synced.size()).ok());
    ASSERT_TRUE(fs->Sync(*f).ok());
    ASSERT_TRUE(fs->Append(*f, later.data(), later.size()).ok());
    ASSERT_TRUE(fs->Flush(*f).ok());  // written, not synced
    ASSERT_TRUE(WriteFile(*fs, "unsynced", Random(rng, 10000), rng, /*sync=*/false).ok());
  }
  PowerCut();
  auto fs = Mount();
  ASSERT_TRUE(fs);
  EXPECT_TRUE(Same(ReadAll(*fs, "MANIFEST-000001"), synced));
  // Its create record was durable, its data never synced: it exists, empty.
  EXPECT_EQ(*fs->Size("unsynced"), 0u);
}

TEST_F(MetaFsTest, RenameAndDeleteAreDurable) {
  std::mt19937_64 rng(4);
  {
    auto fs = Create();
    ASSERT_TRUE(WriteFile(*fs, "CURRENT.tmp", "MANIFEST-000002\n", rng).ok());
    ASSERT_TRUE(WriteFile(*fs, "CURRENT", "MANIFEST-000001\n", rng).ok());
    ASSERT_TRUE(fs->Rename("CURRENT.tmp", "CURRENT").ok());
    ASSERT_TRUE(WriteFile(*fs, "old.log", Random(rng, 40000), rng).ok());
    ASSERT_TRUE(fs->Delete("old.log").ok());
    EXPECT_EQ(fs->Delete("old.log").code(), Code::kNotFound);
    EXPECT_EQ(fs->Rename("missing", "x").code(), Code::kNotFound);
  }
  PowerCut();
  auto fs = Mount();
  EXPECT_TRUE(Same(ReadAll(*fs, "CURRENT"), "MANIFEST-000002\n"));
  EXPECT_FALSE(fs->Exists("CURRENT.tmp"));
  EXPECT_FALSE(fs->Exists("old.log"));
}

TEST_F(MetaFsTest, LogCompactsAndChainsAndStillReplays) {
  MetaFsOptions o;
  o.log_compact_bytes = 64 << 10;
  o.log_extent_bytes = 16 << 10;
  std::mt19937_64 rng(5);
  std::map<std::string, std::string> want;
  {
    auto fs = Create(o);
    for (int i = 0; i < 300; i++) {
      std::string name = "f" + std::to_string(i % 40);
      want[name] = Random(rng, rng() % 3000);
      ASSERT_TRUE(WriteFile(*fs, name, want[name], rng).ok());
      if (i % 7 == 0) {
        ASSERT_TRUE(fs->Delete(name).ok());
        want.erase(name);
      }
    }
    EXPECT_GT(fs->Stats().compactions, 0u);
  }
  auto fs = Mount(o);
  ASSERT_TRUE(fs);
  for (const auto& [name, data] : want) EXPECT_TRUE(Same(ReadAll(*fs, name), data)) << name;
  EXPECT_EQ(fs->List("f").size(), want.size());
}

TEST_F(MetaFsTest, NoSpaceIsCleanAndRecovers) {
  std::mt19937_64 rng(6);
  MetaFsOptions o;
  o.log_extent_bytes = 64 << 10;
  auto fs = Create(o, {{0, 0}});  // one 1 MiB group
  ASSERT_TRUE(fs);
  Status s = WriteFile(*fs, "big", Random(rng, 2 * kMiB), rng);
  EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
  ASSERT_TRUE(fs->Delete("big").ok());
  Status st = WriteFile(*fs, "small", Random(rng, 100000), rng);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReadAll(*fs, "small").size(), 100000u);
}

TEST_F(MetaFsTest, CreateRefusesALiveStoreAndMountNeedsOne) {
  EXPECT_EQ(MetaFs::Mount(reserve_, 0).status().code(), Code::kNotFound);
  auto fs = Create();
  ASSERT_TRUE(fs);
  EXPECT_EQ(MetaFs::Create(reserve_, 0, {{1, 1}}).status().code(), Code::kExists);
  EXPECT_EQ(MetaFs::Create(reserve_, 1, {{9, 0}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(MetaFs::Create(reserve_, kDomainsMax, {{1, 1}}).status().code(), Code::kInvalidArgument);
}

// Random operations with power cuts at random moments: after each cut the
// store holds exactly the durable state (synced contents, durable renames
// and deletes).
TEST_F(MetaFsTest, RandomOperationsWithPowerCuts) {
  MetaFsOptions o;
  o.log_compact_bytes = 32 << 10;
  o.log_extent_bytes = 16 << 10;
  std::mt19937_64 rng(7);
  std::map<std::string, std::string> durable;
  ASSERT_TRUE(Create(o));
  for (int round = 0; round < 25; round++) {
    {
      auto fs = Mount(o);
      ASSERT_TRUE(fs) << "round " << round;
      ASSERT_EQ(fs->List("").size(), durable.size()) << "round " << round;
      for (const auto& [name, data] : durable)
        ASSERT_TRUE(Same(ReadAll(*fs, name), data)) << name << " round " << round;
      const int ops = 1 + static_cast<int>(rng() % 20);
      for (int i = 0; i < ops; i++) {
        std::string name = "k" + std::to_string(rng() % 12);
        switch (rng() % 4) {
          case 0:
          case 1: {
            std::string data = Random(rng, rng() % 20000);
            bool sync = rng() % 3 != 0;
            ASSERT_TRUE(WriteFile(*fs, name, data, rng, sync).ok());
            durable[name] = sync ? data : "";  // the create is durable either way
            break;
          }
          case 2:
            if (durable.contains(name)) {
              std::string to = "k" + std::to_string(rng() % 12);
              ASSERT_TRUE(fs->Rename(name, to).ok());
              std::string v = durable[name];
              durable.erase(name);
              durable[to] = v;
            }
            break;
          case 3:
            if (durable.contains(name)) {
              ASSERT_TRUE(fs->Delete(name).ok());
              durable.erase(name);
            }
            break;
        }
      }
    }
    PowerCut();
  }
}

}  // namespace
}  // namespace nasgw::fs
