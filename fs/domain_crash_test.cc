// The domain under power cuts: the array stops taking writes after the
// k-th one (any LUN, any thread: the intent log's writer, the metadata
// store's flushes, data writes), then loses everything not yet durable, and
// the domain is opened again. Over a thousand random cut points, each open
// must replay to a state where fsck (Domain::Check) finds nothing and every
// change that was answered is there, exactly; the one change in flight at the
// cut may have happened or not.
#include <map>
#include <optional>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "fs/domain.h"
#include "fs/testing/power_cut_rig.h"

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class DomainCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vol_ = rig_.Create();
    ASSERT_NE(vol_, 0u);
    auto sub = dom_->Create(vol_, kRootIno, "sub", FileType::kDirectory, 0755, 0, 0);
    ASSERT_TRUE(sub.ok());
    sub_ = sub->ino;
  }

  static DomainOptions Options() {
    DomainOptions o;
    o.store.write_buffer_bytes = 128 << 10;  // the store flushes on its own too
    o.store.block_cache_bytes = 1 << 20;
    o.store.error_pause_ms = 1;  // after a cut, close at once
    o.metafs.log_compact_bytes = 256 << 10;
    o.log_bytes = IntentLog::kMinBytes;  // checkpoints and wrap-around come often
    o.txg_interval_ms = 15;              // transaction groups between operations
    return o;
  }

  void CutAndReopen() { rig_.CutAndReopen(); }

  // What the directory `dir` holds: name -> content (files only).
  std::map<std::string, std::string> Actual(uint64_t dir) {
    std::map<std::string, std::string> out;
    auto es = dom_->ReadDir(vol_, dir, 0, 100000);
    EXPECT_TRUE(es.ok()) << es.status().ToString();
    if (!es.ok()) return out;
    for (const auto& e : *es) {
      if (e.type != FileType::kRegular) continue;
      auto a = dom_->GetAttr(vol_, e.ino);
      EXPECT_TRUE(a.ok());
      if (!a.ok()) continue;
      std::string s(a->size, '\0');
      auto n = dom_->Read(vol_, e.ino, 0, s.size(), s.data());
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (n.ok()) s.resize(*n);
      out[e.name] = s;
    }
    return out;
  }

  testing::PowerCutRig rig_{2, 48 * kMiB, Options()};
  std::shared_ptr<Domain>& dom_ = rig_.domain();
  uint32_t vol_ = 0;
  uint64_t sub_ = 0;
};

TEST_F(DomainCrashTest, ThousandPowerCutsLoseNothingAnswered) {
  std::mt19937 rng(20261125);
  // The model: every answered change, per directory.
  std::map<std::string, std::string> model[2];
  const uint64_t dirs[2] = {kRootIno, sub_};
  auto ino_of = [&](int d, const std::string& name) -> std::optional<uint64_t> {
    auto a = dom_->Lookup(vol_, dirs[d], name);
    if (!a.ok()) return std::nullopt;
    return a->ino;
  };
  int cuts = 0, answered = 0, failed = 0;
  const int kCuts = 1000;
  while (cuts < kCuts) {
    // The array takes 1..80 more writes, then the power goes.
    rig_.CutAfter(1 + static_cast<int64_t>(rng() % 80));
    // The change in flight when the array stopped, if any: its directory
    // and names may show it or not.
    std::set<std::pair<int, std::string>> uncertain;  // (directory, name)
    for (int op = 0; op < 200 && !rig_.dead(); op++) {
      const int d = static_cast<int>(rng() % 2);
      const std::string name = "f" + std::to_string(rng() % 12);
      auto& m = model[d];
      const bool exists = m.contains(name);
      Status s;
      std::map<std::string, std::string> next = m;
      int other_dir = d;
      const int kind = static_cast<int>(rng() % 6);
      if (!exists || kind == 0) {
        if (exists) continue;
        auto a = dom_->Create(vol_, dirs[d], name, FileType::kRegular, 0644, 0, 0);
        s = a.status();
        if (s.ok()) {
          std::string data(static_cast<size_t>(rng() % 40000), '\0');
          for (auto& c : data) c = static_cast<char>('a' + rng() % 26);
          next[name] = "";
          m = next;  // the create was answered
          answered++;
          auto w = dom_->Write(vol_, a->ino, 0, data.data(), data.size());
          s = w.status();
          next[name] = data;
        }
      } else if (kind == 1) {
        // Overwrite a piece, maybe past the end.
        auto ino = ino_of(d, name);
        ASSERT_TRUE(ino) << "answered file " << name << " missing";
        const uint64_t off = rng() % (m[name].size() + 20000);
        std::string data(1 + rng() % 20000, static_cast<char>('A' + rng() % 26));
        s = dom_->Write(vol_, *ino, off, data.data(), data.size()).status();
        std::string& c = next[name];
        if (c.size() < off + data.size()) c.resize(off + data.size(), '\0');
        c.replace(off, data.size(), data);
      } else if (kind == 2) {
        auto ino = ino_of(d, name);
        ASSERT_TRUE(ino);
        SetAttr sa;
        sa.set_size = true;
        sa.size = rng() % (m[name].size() + 10000);
        s = dom_->SetAttrs(vol_, *ino, sa).status();
        next[name].resize(sa.size, '\0');
      } else if (kind == 3) {
        s = dom_->Unlink(vol_, dirs[d], name);
        next.erase(name);
      } else if (kind == 4) {
        // Rename, maybe into the other directory, maybe over a file.
        other_dir = static_cast<int>(rng() % 2);
        const std::string to = "f" + std::to_string(rng() % 12);
        if (other_dir == d && to == name) continue;
        s = dom_->Rename(vol_, dirs[d], name, dirs[other_dir], to);
        if (s.ok()) {
          const std::string c = m[name];
          m.erase(name);
          model[other_dir][to] = c;
          answered++;
          continue;
        }
        if (!rig_.dead()) FAIL() << "rename failed: " << s.ToString();
        uncertain = {{d, name}, {other_dir, to}};
        // Either side of the rename may show it: both directories.
        break;
      } else {
        auto ino = ino_of(d, name);
        ASSERT_TRUE(ino);
        s = dom_->SetXattr(vol_, *ino, "user.x", std::string(rng() % 3000, 'x'), 0);
      }
      if (s.ok()) {
        m = next;
        answered++;
      } else {
        ASSERT_TRUE(rig_.dead()) << "a change failed with the array up: " << s.ToString();
        failed++;
        uncertain = {{d, name}};
        break;
      }
    }
    if (!rig_.dead()) continue;  // the ops ran out before the cut: go on
    CutAndReopen();
    cuts++;
    auto problems = dom_->Check();
    ASSERT_TRUE(problems.ok()) << problems.status().ToString();
    ASSERT_TRUE(problems->empty()) << "fsck after cut " << cuts << ": " << problems->front();
    for (int d = 0; d < 2; d++) {
      auto actual = Actual(dirs[d]);
      std::set<std::string> skip;
      for (const auto& [ud, n] : uncertain) {
        if (ud == d) skip.insert(n);
      }
      for (const auto& [name, content] : model[d]) {
        if (skip.contains(name)) continue;
        auto it = actual.find(name);
        ASSERT_TRUE(it != actual.end()) << "cut " << cuts << ": answered file " << name << " lost";
        ASSERT_EQ(it->second.size(), content.size()) << "cut " << cuts << ": " << name;
        ASSERT_TRUE(it->second == content) << "cut " << cuts << ": " << name << " differs";
      }
      for (const auto& [name, content] : actual) {
        if (skip.contains(name)) continue;
        ASSERT_TRUE(model[d].count(name)) << "cut " << cuts << ": " << name << " was never answered";
      }
      // The uncertain names: take what the domain says.
      for (const auto& n : skip) {
        if (actual.contains(n)) {
          model[d][n] = actual[n];
        } else {
          model[d].erase(n);
        }
      }
    }
  }
  EXPECT_EQ(cuts, kCuts);
  EXPECT_GT(answered, 5 * kCuts);
  EXPECT_GT(failed, kCuts / 4);
}

}  // namespace
}  // namespace nasgw::fs
