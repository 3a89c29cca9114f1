#!/usr/bin/env python3
"""File-system benchmark: the fs API, the FUSE mount and ext4 on a loop device
(same disk as the tgtd LUN files), plus the raw block layer on the same LUNs,
in one run. Release build required (`make release`).

  python3 bench/fs_bench.py [--files 100000] [--runs 3] [--seconds 10] [--out fs.json]
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
from nasgwlab import Node  # noqa: E402
SANLAB = os.path.join(ROOT, "tests", "lab", "sanlab")
REL = os.path.join(ROOT, "build", "release")
BENCH = os.path.join(REL, "bench", "nasgw-bench")
BINS = {"fuse": os.path.join(REL, "fsal", "fuse", "nasgw-fuse"), "nasgwd": os.path.join(REL, "daemon", "nasgwd"),
        "cli": os.path.join(REL, "cli", "nasgw")}


def sh(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr[-3000:]))
    return p.stdout


def js(cmd):
    return json.loads(sh(cmd).strip().splitlines()[-1])


def lab(size, luns):
    return json.loads(sh([SANLAB, "start", "fsb%d" % os.getpid(), "--luns", str(luns), "--size", size,
                          "--owner-pid", str(os.getpid())]))


def mounted(path):
    with open("/proc/mounts") as f:
        return any(l.split()[1] == path for l in f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--out")
    a = ap.parse_args()
    res = {"files": a.files, "runs": a.runs, "seconds": a.seconds, "threads": a.threads}
    rr = ["--test", "randrw", "--file-mib", "256", "--threads", str(a.threads), "--seconds", str(a.seconds)]

    def save():
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)

    def med(cmds):
        runs = [js(c) for c in cmds]
        save()
        return {"iops": statistics.median(r["iops"] for r in runs),
                "p50_us": statistics.median(r["lat_p50_us"] for r in runs),
                "p99_us": statistics.median(r["lat_p99_us"] for r in runs), "runs": [r["iops"] for r in runs]}

    def posix(mnt, name):
        """The metadata and randrw workloads in a mounted directory."""
        os.makedirs(mnt + "/m")
        res[name + "_meta"] = js([BENCH, "posix", "--dir", mnt + "/m", "--test", "meta", "--files", str(a.files)])
        rs = []
        for i in range(a.runs):
            os.makedirs(mnt + "/r%d" % i)
            rs.append([BENCH, "posix", "--dir", mnt + "/r%d" % i] + rr)
        res[name + "_randrw"] = med(rs)

    l = lab("2G", 2)
    urls = [x["url"] for x in l["luns"]]
    lun_args = sum([["--lun", u] for u in urls], [])
    try:
        # Raw block, same LUN, same queue depth as the file threads.
        res["block_randrw"] = med([[BENCH, "block", "--url", urls[0], "--workload", "randrw", "--bs", "8k",
                                    "--rwmix", "70", "--qd", str(a.threads), "--seconds", str(a.seconds), "--json"]
                                   for _ in range(a.runs)])
        # fs API: record sizes (the default is picked from this).
        for rk in (8, 32, 128):
            res["fs_randrw_record%dk" % rk] = med([[BENCH, "fs"] + lun_args + rr + ["--record-kib", str(rk)]
                                                   for _ in range(a.runs)])
        res["fs_meta"] = js([BENCH, "fs"] + lun_args + ["--test", "meta", "--files", str(a.files)])
        # FUSE -> fsal/client -> nasgwd on the same LUNs.
        node = Node(BINS, urls=urls, tag="fsbench")
        try:
            node.start()
            node.cli("reserve", "format", "--name", "bench", "--ag-size", "64M", "--force")
            node.cli("volume", "create", "b")
            node.mount("b")
            posix(node.mount_path, "fuse")
        finally:
            node.close()
    finally:
        subprocess.run([SANLAB, "stop", l["name"]], stdout=subprocess.DEVNULL)

    # ext4 on a loop device whose file sits on the same disk as the LUN files.
    img = "/var/tmp/nasgw-ext4-%d.img" % os.getpid()
    mnt = "/tmp/nasgw-ext4-%d" % os.getpid()
    with open(img, "wb") as f:
        f.truncate(4 << 30)
    dev = sh(["losetup", "--find", "--show", img]).strip()
    try:
        sh(["mkfs.ext4", "-q", "-F", dev])
        os.makedirs(mnt, exist_ok=True)
        sh(["mount", dev, mnt])
        try:
            posix(mnt, "ext4")
        finally:
            subprocess.run(["umount", mnt])
            os.rmdir(mnt)
    finally:
        subprocess.run(["losetup", "-d", dev])
        os.remove(img)

    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
