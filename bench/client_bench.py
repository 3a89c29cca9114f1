#!/usr/bin/env python3
"""The head path's cost: the same workloads through fsal/client -> nasgwd
and through the in-process fs API, on the same lab LUNs, alternating, in one
run. Release build required (`make release`).

  python3 bench/client_bench.py [--runs 3] [--seconds 10] [--threads 4] [--out client.json]

Reports getattr round-trip latency (p50/p99) and 8K random 70/30 IOPS for
both, the medians over the runs, and the ratio client/in-process.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from nasgwlab import Node, SANLAB, sh  # noqa: E402


def js(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--getattr-ops", type=int, default=20000)
    ap.add_argument("--file-mib", type=int, default=256)
    ap.add_argument("--smoke", action="store_true", help="one short run: checks the harness, not the figures")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.smoke:
        a.runs, a.seconds, a.getattr_ops, a.file_mib = 1, 1, 500, 16
    b = a.build
    bench = os.path.join(b, "bench", "nasgw-bench")
    bins = {"nasgwd": os.path.join(b, "daemon", "nasgwd"), "cli": os.path.join(b, "cli", "nasgw")}
    rr = ["--test", "randrw", "--file-mib", str(a.file_mib), "--threads", str(a.threads), "--seconds",
          str(a.seconds)]
    ga = ["--test", "getattr", "--ops", str(a.getattr_ops)]
    lab = json.loads(sh([SANLAB, "start", "cb%d" % os.getpid(), "--luns", "2", "--size", "2G",
                         "--owner-pid", str(os.getpid())]).stdout)
    urls = [x["url"] for x in lab["luns"]]
    lun_args = sum([["--lun", u] for u in urls], [])
    node = Node(bins, urls=urls, tag="cbench")
    res = {"runs": a.runs, "seconds": a.seconds, "threads": a.threads, "fs": [], "client": [], "uds": []}
    try:
        for i in range(a.runs):
            order = ["fs", "client"] if i % 2 == 0 else ["client", "fs"]
            for target in order:
                if target == "fs":
                    # nasgw-bench fs formats the LUNs itself (64 MiB groups, 128K records).
                    r = {"getattr": js([bench, "fs"] + lun_args + ga), "randrw": js([bench, "fs"] + lun_args + rr)}
                else:
                    node.start()
                    node.cli("reserve", "format", "--name", "bench", "--ag-size", "64M", "--force")
                    node.cli("volume", "create", "bench", "--record-size", "128K")
                    sock = ["--socket", node.head_socket, "--volume", "bench"]
                    r = {"getattr": js([bench, "client"] + sock + ga), "randrw": js([bench, "client"] + sock + rr)}
                    node.stop()
                res[target].append(r)
                if target == "client":
                    res["uds"].append(js([bench, "uds", "--ops", str(a.getattr_ops)]))
                print("run %d %-6s getattr p50 %.1f us p99 %.1f us; randrw %.0f IOPS p50 %.0f us p99 %.0f us" % (
                    i, target, r["getattr"]["p50_us"], r["getattr"]["p99_us"], r["randrw"]["iops"],
                    r["randrw"]["lat_p50_us"], r["randrw"]["lat_p99_us"]), flush=True)
    finally:
        node.close()
        subprocess.run([SANLAB, "stop", lab["name"]], stdout=subprocess.DEVNULL)

    def med(target, test, key):
        return statistics.median(r[test][key] for r in res[target])

    summary = {}
    for t in ("fs", "client"):
        summary[t] = {"getattr_p50_us": med(t, "getattr", "p50_us"), "getattr_p99_us": med(t, "getattr", "p99_us"),
                      "randrw_iops": med(t, "randrw", "iops"), "randrw_p50_us": med(t, "randrw", "lat_p50_us"),
                      "randrw_p99_us": med(t, "randrw", "lat_p99_us")}
    summary["uds_pingpong_p50_us"] = statistics.median(r["p50_us"] for r in res["uds"])
    summary["uds_pingpong_p99_us"] = statistics.median(r["p99_us"] for r in res["uds"])
    summary["randrw_ratio_client_over_fs"] = summary["client"]["randrw_iops"] / summary["fs"]["randrw_iops"]
    res["median"] = summary
    print(json.dumps(summary, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    ok = all(summary[t]["randrw_iops"] > 0 and summary[t]["getattr_p50_us"] > 0 for t in ("fs", "client"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
