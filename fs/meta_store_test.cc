#include "fs/meta_store.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

#include "block/mem_device.h"

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class MetaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<Reserve::Device> devs;
    for (int i = 0; i < 2; i++) {
      media_.push_back(std::make_shared<block::MemLun>(512, 64 * kMiB / 512, "naa.store" + std::to_string(i)));
      devs.push_back(std::make_shared<block::MemDevice>(media_.back()));
    }
    ReserveOptions o;
    o.name = "store";
    o.ag_bytes = 4 * kMiB;
    reserve_ = std::move(Reserve::Format(devs, o).value());
    std::vector<AgId> groups;
    for (uint32_t g = 0; g < 10; g++) groups.push_back({g % 2, g / 2});
    ASSERT_TRUE(MetaFs::Create(reserve_, 0, groups, FsOptions()).ok());
  }

  static MetaFsOptions FsOptions() {
    MetaFsOptions o;
    o.log_compact_bytes = 256 << 10;  // compactions happen during the test
    return o;
  }
  static MetaStoreOptions StoreOptions() {
    MetaStoreOptions o;
    o.write_buffer_bytes = 256 << 10;  // memtable flushes and compactions happen too
    o.block_cache_bytes = 1 << 20;
    return o;
  }

  struct Open {
    std::unique_ptr<MetaFs> fs;
    std::unique_ptr<MetaStore> store;
  };
  Open OpenStore() {
    Open o;
    auto fs = MetaFs::Mount(reserve_, 0, FsOptions());
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    if (!fs.ok()) return o;
    o.fs = std::move(fs.value());
    auto st = MetaStore::Open(o.fs.get(), StoreOptions());
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (st.ok()) o.store = std::move(st.value());
    return o;
  }

  std::vector<std::shared_ptr<block::MemLun>> media_;
  std::shared_ptr<Reserve> reserve_;
};

std::string Key(int i) {
  char b[32];
  std::snprintf(b, sizeof(b), "inode/%08d", i);
  return b;
}

TEST_F(MetaStoreTest, PutGetScanAcrossReopen) {
  std::mt19937_64 rng(1);
  std::map<std::string, std::string> model;
  {
    Open o = OpenStore();
    ASSERT_TRUE(o.store);
    for (int b = 0; b < 200; b++) {
      MetaBatch batch;
      for (int i = 0; i < 50; i++) {
        int k = static_cast<int>(rng() % 5000);
        if (rng() % 10 == 0) {
          batch.Delete(Key(k));
          model.erase(Key(k));
        } else {
          std::string v(20 + rng() % 200, static_cast<char>('a' + rng() % 26));
          batch.Put(Key(k), v);
          model[Key(k)] = v;
        }
      }
      ASSERT_TRUE(o.store->Write(batch, /*sync=*/b % 10 == 0).ok());
    }
    ASSERT_TRUE(o.store->Flush().ok());
    EXPECT_GT(o.fs->List("/nasgw-meta/").size(), 3u) << "SST files, WAL, MANIFEST, CURRENT live in MetaFs";
  }
  Open o = OpenStore();
  ASSERT_TRUE(o.store);
  size_t n = 0;
  auto it = model.begin();
  ASSERT_TRUE(o.store
                  ->Scan("inode/", "inode0",
                         [&](std::string_view k, std::string_view v) {
                           EXPECT_EQ(k, it->first);
                           EXPECT_EQ(v, it->second);
                           ++it;
                           n++;
                           return true;
                         })
                  .ok());
  EXPECT_EQ(n, model.size());
  EXPECT_EQ(o.store->Get("inode/99999999").status().code(), Code::kNotFound);
  auto v = o.store->Get(model.begin()->first);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, model.begin()->second);
}

// Synced batches survive a power cut at any point; each is all or nothing.
TEST_F(MetaStoreTest, SyncedBatchesSurvivePowerCuts) {
  std::mt19937_64 rng(2);
  int next = 0;
  for (int round = 0; round < 6; round++) {
    {
      Open o = OpenStore();
      ASSERT_TRUE(o.store) << "round " << round;
      // Everything acknowledged before is there, every batch whole.
      for (int i = 0; i < next; i++) {
        auto v = o.store->Get(Key(i));
        ASSERT_TRUE(v.ok()) << "round " << round << " key " << i << ": " << v.status().ToString();
        ASSERT_EQ(*v, "batch" + std::to_string(i / 10)) << i;
      }
      const int batches = 20 + static_cast<int>(rng() % 40);
      for (int b = 0; b < batches; b++) {
        MetaBatch batch;
        for (int i = 0; i < 10; i++) batch.Put(Key(next + i), "batch" + std::to_string((next + i) / 10));
        ASSERT_TRUE(o.store->Write(batch, /*sync=*/true).ok());
        next += 10;
      }
      // Unsynced writes after the last synced one may be lost; make some.
      MetaBatch loose;
      loose.Put("loose", "x");
      ASSERT_TRUE(o.store->Write(loose, false).ok());
      // "Crash": the objects go away, then the power fails before any cache
      // flush could help.
      o.store.reset();
    }
    for (auto& m : media_) m->PowerCut();
  }
}

}  // namespace
}  // namespace nasgw::fs
