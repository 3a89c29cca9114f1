#!/usr/bin/env python3
"""Small-write benchmark: 4-byte appends and 512-byte random overwrites, to
one file and to many, with no fsync (as a logger or a record store writes),
through nasgw FUSE mounts (every write to nasgwd as it is made, the default;
and with --writeback-cache, through the kernel's page cache) and through
XFS on a local loop device whose image sits on the same disk as the lab LUN
files, in one run, side by side.

Each run is `nasgw-bench posix --test append|overwrite` (bench/fs_bench.cc):
one thread, every write timed, then one fsync per file timed apart, then
the data checked (sizes; each file's last write read back). Reported per
workload: the median over the runs of writes/s, p50, p99 and p99.9 latency
and the closing fsync's seconds, and each nasgw mount's writes/s as a ratio
of XFS's.
Release build required (`make release`).

  python3 bench/small_write_bench.py [--build build/release] [--runs 3] [--seconds 5] [--out small.json]
  python3 bench/small_write_bench.py --build BUILD --smoke     # one short run of each, checks the harness
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from nasgwlab import Node, is_mounted, sh  # noqa: E402

# (name, test, write bytes, files, MiB per file for overwrites)
WORKLOADS = [
    ("append4_one", "append", 4, 1, 0),
    ("append4_many", "append", 4, 64, 0),
    ("overwrite512_one", "overwrite", 512, 1, 64),
    ("overwrite512_many", "overwrite", 512, 64, 1),
]


def run_bench(bench, d, test, write_bytes, files, mib, seconds):
    os.makedirs(d)
    cmd = [bench, "posix", "--dir", d, "--test", test, "--write-bytes", str(write_bytes), "--files", str(files),
           "--seconds", str(seconds)]
    if mib:
        cmd += ["--file-mib", str(mib)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    r = json.loads(p.stdout)
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)
    return r


def summary(runs):
    return {k: statistics.median(r[k] for r in runs) for k in ("per_sec", "p50_us", "p99_us", "p999_us",
                                                              "fsync_secs")} | {"runs": [r["per_sec"] for r in runs]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="one short run of each: checks the harness, not the figures")
    a = ap.parse_args()
    if a.smoke:
        a.runs, a.seconds = 1, 1
    b = os.path.abspath(a.build)
    bench = os.path.join(b, "bench", "nasgw-bench")
    bins = {"fuse": b + "/fsal/fuse/nasgw-fuse", "nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw"}
    targets = ("nasgw", "nasgw_wb", "xfs")
    res = {"runs": a.runs, "seconds": a.seconds, "build": b} | {t: {} for t in targets}
    node = wbp = wb = None
    img = "/var/tmp/nasgw-smallw-%d.img" % os.getpid()
    mnt = "/tmp/nasgw-smallw-xfs-%d" % os.getpid()
    dev = None
    try:
        node = Node(bins, luns=2, size="1G", tag="smallw")
        node.start()
        node.format()
        node.mount()
        wb = node.mount_path + ".wb"
        os.makedirs(wb, exist_ok=True)
        wbp = subprocess.Popen([bins["fuse"], "--socket", node.head_socket, "--volume", "vol1", "--writeback-cache",
                                "-f", wb], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        deadline = time.monotonic() + 30
        while not is_mounted(wb):
            if wbp.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("nasgw-fuse --writeback-cache did not mount")
            time.sleep(0.05)  # polling /proc/mounts: the mount has no event to wait on
        with open(img, "wb") as f:
            f.truncate(2 << 30)
        dev = sh(["losetup", "--find", "--show", img]).stdout.strip()
        sh(["mkfs.xfs", "-q", "-f", dev])
        os.makedirs(mnt, exist_ok=True)
        sh(["mount", dev, mnt])
        # Interleaved: run i of every target and workload before run i+1,
        # so that a noisy moment costs both sides alike.
        runs = {t: {w[0]: [] for w in WORKLOADS} for t in targets}
        for i in range(a.runs):
            for name, test, nbytes, files, mib in WORKLOADS:
                for target, top in (("nasgw", node.mount_path), ("nasgw_wb", wb), ("xfs", mnt)):
                    r = run_bench(bench, os.path.join(top, "%s-%d" % (name, i)), test, nbytes, files, mib, a.seconds)
                    runs[target][name].append(r)
                    print("%-8s %-18s run %d: %10.0f writes/s  p50 %7.2f us  p99 %8.2f us  fsync %.3f s" %
                          (target, name, i + 1, r["per_sec"], r["p50_us"], r["p99_us"], r["fsync_secs"]), flush=True)
        for target in runs:
            for name in runs[target]:
                res[target][name] = summary(runs[target][name])
        res["ratio"] = {t: {w[0]: res[t][w[0]]["per_sec"] / res["xfs"][w[0]]["per_sec"] for w in WORKLOADS}
                        for t in ("nasgw", "nasgw_wb")}
    finally:
        if wb and is_mounted(wb):
            subprocess.run(["fusermount3", "-u", wb])
        if wbp is not None:
            try:
                wbp.wait(timeout=30)
            except subprocess.TimeoutExpired:
                wbp.kill()
                wbp.wait()
        if wb and os.path.isdir(wb):
            os.rmdir(wb)
        if os.path.ismount(mnt):
            subprocess.run(["umount", mnt])
        if os.path.isdir(mnt):
            os.rmdir(mnt)
        if dev:
            subprocess.run(["losetup", "-d", dev])
        if os.path.exists(img):
            os.remove(img)
        if node is not None:
            node.close()
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    if a.smoke:
        bad = [(t, w) for t in targets for w in WORKLOADS if res[t].get(w[0], {}).get("per_sec", 0) <= 0]
        if bad:
            print("FAIL: no writes in %s" % bad)
            return 1
        print("smoke ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
