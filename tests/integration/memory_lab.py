#!/usr/bin/env python3
"""nasgwd stays within its memory budget under a write flood ten times the
budget (issue 12), through the real path: tgtd -> nasgwd (Release) ->
ganesha + FSAL_NASGW -> NFS clients in lab namespaces.

nasgwd runs with [cache] memory_mib = 128: a 16 MiB metadata cache, 16 MiB
of request buffers and a 96 MiB data cache, of which dirty_mib = 32 may be
dirty. 16 NFSv4.1 clients (nfs-rs: 1 MiB UNSTABLE WRITEs, a COMMIT at
close) each write 80 MiB at once, 1,280 MiB in all; then all 16 read their
files back at once. Checks:

  - every byte is read back as written;
  - the dirty bytes sampled during the flood never passed dirty_mib (plus
    one largest write), and the data cache filled to its share of the budget
    (so the flood and the reads really pressed on the bound);
  - nasgwd's peak RSS (VmHWM) stays under its RSS before the load (code,
    libraries, thread stacks, RocksDB's fixed part) plus the budget plus
    the stated overhead: OVERHEAD_FRACTION of the budget (the cache's
    bookkeeping, ~4%, and the allocator's free-but-not-returned memory)
    and OVERHEAD_FIXED_MIB (per-connection state, metrics, the read-ahead
    and flush buffers in flight). docs/cache.md "Memory" states the same.

RSS means something only without sanitizers (ASan's shadow memory and
quarantine come on top of everything), so nasgwd is a Release build:
--nasgwd (make test builds it); ganesha's FSAL and the CLI come from --build.

  memory_lab.py --build BUILD_DIR --nasgwd RELEASE_BUILD/daemon/nasgwd
"""

import json
import os
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402

BUDGET_MIB = 128
DIRTY_MIB = 32
CLIENTS = 16
NAMESPACES = 4            # clients share lab namespaces, four each
FILE_MIB = 80             # 16 x 80 MiB = 10 x the budget
OVERHEAD_FRACTION = 0.25  # of the budget
OVERHEAD_FIXED_MIB = 32
DATA_MIB = 96             # limits::SharesOf(128 MiB).data
WRITE_MAX_MIB = 16        # limits::kCacheWriteBytesMax: dirty may pass its bound by one write

WRITER = """
import hashlib, random, time, nfs_rs
r = random.Random(ARGS['seed'])
h = hashlib.sha256()
t0 = time.monotonic()
with nfs_rs.Client.connect(ARGS['url']) as c:
    with c.open(ARGS['path'], 'wb') as f:
        for i in range(ARGS['mib']):
            b = r.randbytes(1 << 20)
            h.update(b)
            f.write(b)
out({'sha': h.hexdigest(), 's': time.monotonic() - t0})
"""

READER = """
import hashlib, time, nfs_rs
h = hashlib.sha256()
n = 0
t0 = time.monotonic()
with nfs_rs.Client.connect(ARGS['url']) as c:
    with c.open(ARGS['path'], 'rb') as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            n += len(b)
out({'sha': h.hexdigest(), 'bytes': n, 's': time.monotonic() - t0})
"""

failures = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        failures.append(what)


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/%d/status" % (field, pid))


def run_all(clients, code, args_of):
    """Starts `code` on every client at once. Returns an Event set when all
    have ended, and their out() values in order (filled as they end; an
    exception's text for one that failed)."""
    results = [None] * len(clients)
    left = [len(clients)]
    mu = threading.Lock()
    all_done = threading.Event()

    def one(i):
        try:
            results[i] = clients[i].python(code, args_of(i), timeout=900)[0]
        except Exception as e:  # noqa: BLE001 - reported as a failure below
            results[i] = {"error": str(e)[-2000:]}
        with mu:
            left[0] -= 1
            if left[0] == 0:
                all_done.set()

    for i in range(len(clients)):
        threading.Thread(target=one, args=(i,), daemon=True).start()
    return all_done, results


def main():
    parsed = nasgwlab.nfs_lab_args(lambda ap: ap.add_argument("--nasgwd", required=True, help="a Release nasgwd"))
    if parsed is None:
        return 1
    a, b, fsal = parsed
    pid = os.getpid()
    name = "mem%d" % pid
    node = lab = None
    try:
        node = nasgwlab.Node({"nasgwd": a.nasgwd, "cli": b + "/cli/nasgw"}, luns=2, size="2G", tag="mem",
                             metrics=True)
        node.start("[cache]\nmemory_mib = %d\ndirty_mib = %d\n" % (BUDGET_MIB, DIRTY_MIB))
        node.format()
        lab = nfslab.Lab(name=name, clients=NAMESPACES)
        cfg = nfslab.GaneshaConfig(exports=[nfslab.nasgw_export(1, "vol1", "/vol1")], plugins={"nasgw": fsal},
                                   nasgw_socket=node.head_socket)
        lab.start_server(cfg)
        clients = [lab.client(1 + i % NAMESPACES) for i in range(CLIENTS)]
        # Every client has mounted (and ganesha connected) before the baseline.
        for c in clients[:NAMESPACES]:
            c.nfsrs("out(client.stat('/').mode)", "/vol1", version="3")
        daemon = node.s["daemon_pid"]
        base_kib = status_kib(daemon, "VmRSS")
        print("nasgwd RSS before the load: %.1f MiB" % (base_kib / 1024), flush=True)

        # The flood, sampling the dirty bytes and what the data cache holds
        # meanwhile.
        held_max = [0.0]
        t0 = time.monotonic()
        done, wrote = run_all(clients, WRITER, lambda i: {"url": clients[i].url("/vol1", "4.1"),
                                                           "path": "/f%d" % i, "seed": i, "mib": FILE_MIB})
        dirty_max = 0.0
        while not done.wait(0.2):  # a sample every 0.2 s until all have ended
            dirty = node.metric("nasgw_cache_dirty_bytes")
            dirty_max = max(dirty_max, dirty)
            held_max[0] = max(held_max[0], dirty + node.metric("nasgw_cache_clean_bytes"))
        flood_s = time.monotonic() - t0
        written = CLIENTS * FILE_MIB
        print("wrote %d MiB from %d clients in %.1f s (%.0f MiB/s); most dirty seen %.1f MiB" %
              (written, CLIENTS, flood_s, written / flood_s, dirty_max / 2**20), flush=True)
        print("nasgwd RSS after the writes: peak %.1f MiB, now %.1f MiB" %
              (status_kib(daemon, "VmHWM") / 1024, status_kib(daemon, "VmRSS") / 1024), flush=True)
        bad = [w for w in wrote if "error" in w]
        check(not bad, "every client's %d MiB was written and committed (%s)" % (FILE_MIB, bad[:1]))
        print("writers held back by the dirty limit: %d times" % node.metric("nasgw_cache_stalls_total"), flush=True)
        check(dirty_max <= (DIRTY_MIB + WRITE_MAX_MIB) * 2**20,
              "dirty bytes stayed within dirty_mib (most seen %.1f MiB)" % (dirty_max / 2**20))

        done, read = run_all(clients, READER, lambda i: {"url": clients[i].url("/vol1", "4.1"), "path": "/f%d" % i})
        while not done.wait(0.2):
            held_max[0] = max(held_max[0], node.metric("nasgw_cache_dirty_bytes") +
                              node.metric("nasgw_cache_clean_bytes"))
        data_share = node.metric("nasgw_cache_clean_capacity_bytes") + node.metric("nasgw_cache_dirty_bytes")
        check(held_max[0] >= 0.9 * DATA_MIB * 2**20,
              "the data cache filled to its share of the budget (%.1f of %d MiB held at most; capacity now %.1f MiB)"
              % (held_max[0] / 2**20, DATA_MIB, data_share / 2**20))
        same = [i for i in range(CLIENTS) if "sha" in read[i] and "sha" in wrote[i] and read[i]["sha"] == wrote[i]["sha"]
                and read[i]["bytes"] == FILE_MIB << 20]
        check(len(same) == CLIENTS, "every file read back as written (%d of %d; %s)" %
              (len(same), CLIENTS, [r for r in read if "error" in r][:1]))

        peak_kib = status_kib(daemon, "VmHWM")
        bound_kib = base_kib + (BUDGET_MIB * (1 + OVERHEAD_FRACTION) + OVERHEAD_FIXED_MIB) * 1024
        print("nasgwd RSS: before %.1f MiB, peak %.1f MiB (+%.1f MiB over a %d MiB budget); bound %.1f MiB" %
              (base_kib / 1024, peak_kib / 1024, (peak_kib - base_kib) / 1024, BUDGET_MIB, bound_kib / 1024),
              flush=True)
        print("meta cache %.1f of %.1f MiB; request buffer waits %d; read cache hits %.0f MiB" %
              (node.metric("nasgw_meta_cache_bytes") / 2**20, node.metric("nasgw_meta_cache_capacity_bytes") / 2**20,
               node.metric("nasgw_head_request_buffer_waits_total"),
               node.metric("nasgw_cache_read_bytes_total", result="hit") / 2**20), flush=True)
        check(peak_kib <= bound_kib, "nasgwd's peak RSS within its RSS before the load + the budget + the stated "
              "overhead (%.1f <= %.1f MiB)" % (peak_kib / 1024, bound_kib / 1024))
        # `nasgw stats` tells the same story: every byte written went through
        # the cache, and (UNSTABLE 1 MiB writes, flushed once) the array got
        # each about once: the data, its metadata and the log, no rewrite.
        st = node.cli("stats", json_out=True)["cache"]
        print("nasgw stats: %.0f MiB written by clients, %.0f MiB to the array (%.2f per client byte), "
              "%d flushes" % (st["client_write_bytes"] / 2**20, st["array_write_bytes"] / 2**20,
                              st["write_amplification"], st["flushes"]), flush=True)
        check(st["client_write_bytes"] >= written << 20,
              "nasgw stats counts every byte the clients wrote (%d MiB)" % (st["client_write_bytes"] >> 20))
        check(1.0 <= st["write_amplification"] <= 1.2 and
              abs(st["write_amplification"] - node.metric("nasgw_write_amplification")) < 0.05,
              "bytes to the array per client byte near 1 for large UNSTABLE writes, and the metric agrees (%.3f, %.3f)"
              % (st["write_amplification"], node.metric("nasgw_write_amplification")))
    except Exception:
        traceback.print_exc()
        failures.append("exception")
    finally:
        rc = nasgwlab.finish(failures, node=node, lab=lab)
    return rc


if __name__ == "__main__":
    sys.exit(main())
