#include "block/bulk_window.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

#include <gtest/gtest.h>

namespace nasgw::block {
namespace {

constexpr uint64_t kMs = 1'000'000;

// A LUN behind a link, simulated: commands cross the link one after another
// (first in, first out) at `bytes_per_ns`, then take `base_ns` more (the
// array's own time). Bulk demand never ends: 64 KiB commands (or `bulk_bytes`)
// are issued whenever the window and the bulk slots admit one, as the device
// does. A 4 KiB sync command is issued every `probe_every_ns`, never held,
// and its latency is what the window is for.
struct Link {
  double bytes_per_ns = 0;
  uint64_t base_ns = 0;
  uint64_t bulk_bytes = 64 << 10;
  uint32_t bulk_slots = 48;  // three quarters of the default queue depth
  uint64_t probe_every_ns = 10 * kMs;
  // Optional: the link's rate changes to this at `change_ns`.
  double later_bytes_per_ns = 0;
  uint64_t change_ns = UINT64_MAX;
};

struct Outcome {
  std::vector<uint64_t> sync_ns;  // latencies of probes sent after the warm-up
  double bulk_bytes_per_ns = 0;   // delivered after the warm-up
  uint64_t max_window = 0;
};

Outcome Simulate(const Link& link, const BulkWindowOptions& opt, uint64_t warmup_ns, uint64_t end_ns) {
  BulkWindow w(opt);
  struct Cmd {
    uint64_t bytes;
    bool sync;
    uint64_t sent_ns;
  };
  std::multimap<uint64_t, Cmd> in_flight;  // by completion time
  uint64_t link_free = 0, now = 0, next_probe = 0, delivered = 0;
  uint32_t bulk = 0;
  Outcome out;
  auto send = [&](uint64_t bytes, bool sync) {
    const double rate = now >= link.change_ns ? link.later_bytes_per_ns : link.bytes_per_ns;
    const uint64_t start = std::max(now, link_free);
    link_free = start + static_cast<uint64_t>(static_cast<double>(bytes) / rate);
    in_flight.emplace(link_free + link.base_ns, Cmd{bytes, sync, now});
  };
  while (now < end_ns) {
    while (bulk < link.bulk_slots && w.Admits(link.bulk_bytes)) {
      send(link.bulk_bytes, false);
      w.Issued(link.bulk_bytes, now);
      bulk++;
    }
    out.max_window = now >= warmup_ns ? std::max(out.max_window, w.window()) : 0;
    const uint64_t next_done = in_flight.empty() ? UINT64_MAX : in_flight.begin()->first;
    if (next_probe <= next_done) {
      now = next_probe;
      send(4096, true);
      next_probe += link.probe_every_ns;
      continue;
    }
    now = next_done;
    const Cmd c = in_flight.begin()->second;
    in_flight.erase(in_flight.begin());
    if (c.sync) {
      if (c.sent_ns >= warmup_ns) out.sync_ns.push_back(now - c.sent_ns);
    } else {
      w.Completed(c.bytes, true, now);
      bulk--;
      if (now >= warmup_ns) delivered += c.bytes;
    }
  }
  std::sort(out.sync_ns.begin(), out.sync_ns.end());
  out.bulk_bytes_per_ns = static_cast<double>(delivered) / static_cast<double>(end_ns - warmup_ns);
  return out;
}

uint64_t P99(const Outcome& o) {
  return o.sync_ns.empty() ? 0 : o.sync_ns[o.sync_ns.size() * 99 / 100];
}

void Say(const char* what, const Outcome& o, double link_bytes_per_ns) {
  std::printf("%s: sync p50 %.1f ms, p99 %.1f ms, max %.1f ms; bulk %.0f%% of the link; ", what,
              o.sync_ns.empty() ? 0.0 : static_cast<double>(o.sync_ns[o.sync_ns.size() / 2]) / 1e6,
              static_cast<double>(P99(o)) / 1e6, o.sync_ns.empty() ? 0.0 : static_cast<double>(o.sync_ns.back()) / 1e6,
              100 * o.bulk_bytes_per_ns / link_bytes_per_ns);
  if (o.max_window == UINT64_MAX) {
    std::printf("no window\n");
  } else {
    std::printf("window up to %.2f MiB\n", static_cast<double>(o.max_window) / (1 << 20));
  }
}

// stall_lab's array link: 150 Mbit/s.
constexpr double kSlowLink = 150e6 / 8 / 1e9;

TEST(BulkWindow, ASaturatedLinkKeepsSyncCommandsNearTheTarget) {
  const Link link{.bytes_per_ns = kSlowLink, .base_ns = 1 * kMs};
  const Outcome o = Simulate(link, {.target_ns = 25 * kMs}, 2'000 * kMs, 12'000 * kMs);
  Say("150 Mbit/s, window", o, kSlowLink);
  ASSERT_GT(o.sync_ns.size(), 900u);
  // The window's bytes take the target to cross the link; a probe waits for
  // them and for one command being sent.
  EXPECT_LE(P99(o), 45 * kMs);
  EXPECT_LE(o.sync_ns.back(), 60 * kMs);
  // And the link stays full of bulk.
  EXPECT_GE(o.bulk_bytes_per_ns, 0.95 * kSlowLink);
}

TEST(BulkWindow, WithoutAWindowSyncCommandsWaitBehindEveryBulkSlot) {
  // What the window prevents: 48 x 64 KiB in front of every probe, 170 ms
  // on this link.
  const Link link{.bytes_per_ns = kSlowLink, .base_ns = 1 * kMs};
  const Outcome o = Simulate(link, {.target_ns = 0}, 2'000 * kMs, 12'000 * kMs);
  Say("150 Mbit/s, no window", o, kSlowLink);
  EXPECT_GE(P99(o), 150 * kMs);
  EXPECT_GE(o.bulk_bytes_per_ns, 0.95 * kSlowLink);
}

TEST(BulkWindow, AFastArrayIsNotHeldBack) {
  // 2 GB/s with 0.5 ms of its own per command, 1 MiB commands: the link is
  // full only with about 20 MiB in flight. The window grows from its
  // minimum until latency reaches the target or the slots run out.
  const Link link{.bytes_per_ns = 2.0, .base_ns = kMs / 2, .bulk_bytes = 1 << 20};
  const Outcome o = Simulate(link, {.target_ns = 25 * kMs}, 1'000 * kMs, 4'000 * kMs);
  Say("2 GB/s", o, 2.0);
  EXPECT_GE(o.bulk_bytes_per_ns, 0.9 * 2.0);
  EXPECT_GE(o.max_window, uint64_t{20} << 20);
}

TEST(BulkWindow, ALinkThatSlowsDownShrinksTheWindow) {
  // A fast link (the window grows large) becomes the slow one, as when a
  // path fails over to a lesser port: within a couple of seconds the
  // probes are back near the target.
  const Link link{.bytes_per_ns = 0.5, .base_ns = 1 * kMs, .later_bytes_per_ns = kSlowLink, .change_ns = 2'000 * kMs};
  const Outcome o = Simulate(link, {.target_ns = 25 * kMs}, 6'000 * kMs, 12'000 * kMs);
  Say("500 MB/s, then 150 Mbit/s", o, kSlowLink);
  ASSERT_FALSE(o.sync_ns.empty());
  EXPECT_LE(P99(o), 45 * kMs);
  EXPECT_GE(o.bulk_bytes_per_ns, 0.95 * kSlowLink);
}

TEST(BulkWindow, ACommandLargerThanTheWindowGoesAloneAndNothingJoinsIt) {
  BulkWindow w({.target_ns = 25 * kMs, .min_bytes = 256 << 10, .max_bytes = 1 << 20});
  EXPECT_EQ(w.window(), 256u << 10);  // it starts at the minimum
  EXPECT_TRUE(w.Admits(8 << 20));     // nothing in flight: any size goes
  w.Issued(8 << 20, 0);
  EXPECT_FALSE(w.Admits(4096));
  w.Completed(8 << 20, true, kMs);
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_TRUE(w.Admits(4096));
  // Within the window: up to its bytes.
  w.Issued(128 << 10, kMs);
  EXPECT_TRUE(w.Admits(128 << 10));
  EXPECT_FALSE(w.Admits((128 << 10) + 4096));
}

TEST(BulkWindow, FailedCommandsLeaveTheWireButDeliverNothing) {
  // Commands that fail (a path lost: they are re-issued) are not delivery:
  // a sample of nothing but failures shrinks the window to its minimum.
  BulkWindow w({.target_ns = 10 * kMs, .min_bytes = 64 << 10, .max_bytes = 64 << 20});
  uint64_t now = 0;
  for (int i = 0; i < 400; i++) {  // grows on a fast sample first
    w.Issued(64 << 10, now);
    now += kMs / 10;
    w.Completed(64 << 10, true, now);
  }
  EXPECT_GT(w.window(), uint64_t{4} << 20);
  for (int i = 0; i < 40; i++) {
    w.Issued(64 << 10, now);
    now += kMs;
    w.Completed(64 << 10, false, now);
  }
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_EQ(w.window(), 64u << 10);
}

TEST(BulkWindow, TargetZeroAdmitsEverything) {
  BulkWindow w({.target_ns = 0});
  for (int i = 0; i < 1000; i++) {
    ASSERT_TRUE(w.Admits(8 << 20));
    w.Issued(8 << 20, static_cast<uint64_t>(i));
  }
  for (int i = 0; i < 1000; i++) w.Completed(8 << 20, true, 2000);
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_TRUE(w.Admits(8 << 20));
}

}  // namespace
}  // namespace nasgw::block
