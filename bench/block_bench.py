#!/usr/bin/env python3
"""Block-layer benchmark: nasgw-bench against iscsi-perf on the same LUN.

Starts a lab array (tests/lab/sanlab), fills its LUN with random data, then
  1. random reads at the same request size and queue depth, nasgw-bench and
     libiscsi's iscsi-perf run alternately, N runs each: medians and ratio;
  2. the seed papers' workloads through nasgw-bench: 8K random 70/30 (FS7500),
     8K random 67/33, 256K sequential read, 64K sequential write (mixed SAN).
Prints a table and writes JSON (--out). Build with `make release` first;
`make bench` does both.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SANLAB = os.path.join(HERE, "..", "tests", "lab", "sanlab")

WORKLOADS = [
    # name, workload, bs, rwmix
    ("8k-rand-70/30", "randrw", "8k", 70),
    ("8k-rand-67/33", "randrw", "8k", 67),
    ("256k-seq-read", "seqread", "256k", 100),
    ("64k-seq-write", "seqwrite", "64k", 0),
]


def sh(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def in_lab(lab, cmd):
    return [SANLAB, "exec", lab["name"], "--"] + cmd if lab["mode"] == "netns" else cmd


def fill(path, size):
    with open(path, "r+b") as f:
        chunk = 1 << 20
        for _ in range(size // chunk):
            f.write(os.urandom(chunk))
        f.flush()
        os.fsync(f.fileno())


def run_nasgw(args, lab, url, workload, bs, rwmix, seconds):
    cmd = [args.bench, "block", "--url", url, "--workload", workload, "--bs", bs, "--rwmix", str(rwmix),
           "--qd", str(args.qd), "--clients", str(args.clients), "--seconds", str(seconds),
           "--ramp", str(args.ramp), "--json"]
    return json.loads(sh(in_lab(lab, cmd)))


def run_iscsi_perf(args, lab, url, bs_bytes, seconds):
    # iscsi-perf runs until SIGINT and prints a running average; it counts
    # from login, so give it the same ramp as nasgw-bench on top.
    cmd = ["timeout", "-s", "INT", str(seconds + args.ramp), "iscsi-perf", "-m", str(args.qd),
           "-b", str(bs_bytes // 512), "-r", url]
    out = subprocess.run(in_lab(lab, cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    avgs = re.findall(r"iops average (\d+)", out)
    if not avgs:
        raise SystemExit("iscsi-perf printed no figures:\n" + out)
    return float(avgs[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "release", "bench", "nasgw-bench"))
    ap.add_argument("--mode", default="loopback", choices=["loopback", "netns"])
    ap.add_argument("--rate", help="tc tbf rate on the array link (netns), e.g. 1gbit")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--ramp", type=float, default=1)
    ap.add_argument("--qd", type=int, default=32)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="one short run of everything, with sanity checks")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.seconds, args.ramp = 1, 1, 0.2

    start = [SANLAB, "start", "bench%d" % os.getpid(), "--size", args.size, "--mode", args.mode,
             "--owner-pid", str(os.getpid())]
    if args.rate:
        start += ["--rate", args.rate]
    lab = json.loads(sh(start))
    lab["mode"] = args.mode
    try:
        url = lab["luns"][0]["url"]
        fill(lab["luns"][0]["file"], lab["luns"][0]["size"])
        results = {"mode": args.mode, "rate": args.rate, "qd": args.qd, "clients": args.clients,
                   "seconds": args.seconds, "runs": args.runs, "size": args.size}

        # 1. Side by side with iscsi-perf, alternating, random 8K reads.
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(run_nasgw(args, lab, url, "randread", "8k", 100, args.seconds)["iops"])
            theirs.append(run_iscsi_perf(args, lab, url, 8192, args.seconds))
        ratio = statistics.median(ours) / statistics.median(theirs)
        results["randread_vs_iscsi_perf"] = {
            "bs": 8192, "nasgw_iops": ours, "iscsi_perf_iops": theirs,
            "nasgw_median": statistics.median(ours), "iscsi_perf_median": statistics.median(theirs),
            "ratio": ratio}

        # 2. The seeds' workloads.
        rows = []
        for name, workload, bs, rwmix in WORKLOADS:
            runs = [run_nasgw(args, lab, url, workload, bs, rwmix, args.seconds) for _ in range(args.runs)]
            med = lambda k: statistics.median(r[k] for r in runs)
            rows.append({"name": name, "workload": workload, "bs": bs, "rwmix_read": rwmix,
                         "iops": med("iops"), "mbps": med("mbps"), "lat_p50_us": med("lat_p50_us"),
                         "lat_p99_us": med("lat_p99_us"), "runs": runs})
        results["workloads"] = rows
    finally:
        subprocess.run([SANLAB, "stop", lab["name"]], stdout=subprocess.DEVNULL)

    r = results["randread_vs_iscsi_perf"]
    print("random 8K read, qd %d: nasgw-bench %.0f IOPS vs iscsi-perf %.0f IOPS (medians of %d): ratio %.3f"
          % (args.qd, r["nasgw_median"], r["iscsi_perf_median"], args.runs, r["ratio"]))
    print("%-15s %10s %9s %9s %9s" % ("workload", "IOPS", "MB/s", "p50 us", "p99 us"))
    for row in results["workloads"]:
        print("%-15s %10.0f %9.1f %9.0f %9.0f" % (row["name"], row["iops"], row["mbps"], row["lat_p50_us"],
                                                  row["lat_p99_us"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)

    if args.smoke:
        bad = [row["name"] for row in results["workloads"] if not row["iops"] > 0 or not row["lat_p99_us"] > 0]
        if bad or not r["nasgw_median"] > 0 or not r["iscsi_perf_median"] > 0:
            print("smoke: implausible figures for %s" % (bad or "randread"), file=sys.stderr)
            return 1
        mixed = results["workloads"][0]["runs"][0]
        if not (mixed["read"]["ops"] > mixed["write"]["ops"] > 0):
            print("smoke: a 70/30 mix must do both, mostly reads: %s" % mixed, file=sys.stderr)
            return 1
        print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
