#!/usr/bin/env python3
"""What snapshots cost: `nasgw-bench snapshots` takes N snapshots under a
random-overwrite load, then deletes them in random order; this runs it,
summarises create latency and how deletion time follows the bytes each
deletion frees (and not how many snapshots the volume has), and charts it.

    python3 bench/snapshot_bench.py --build build/release --snapshots 10000 \\
        --out snap.json --chart docs/img/snapshot-delete.png

--smoke: a short run that checks the harness and the invariants (every byte
back after the last deletion, fsck clean) rather than the figures.
"""
import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import nasgwlab  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return 0
    return xs[min(len(xs) - 1, int(math.ceil(p / 100.0 * len(xs))) - 1 if p > 0 else 0)]


def fit(xs, ys):
    """Least squares y = a + b x, and Pearson's r."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx if sxx else 0.0
    r = sxy / math.sqrt(sxx * syy) if sxx and syy else 0.0
    return my - b * mx, b, r


def summarise(lines, args):
    creates = [l["ns"] for l in lines if l["op"] == "create"]
    deletes = [l for l in lines if l["op"] == "delete"]
    end = [l for l in lines if l["op"] == "end"][0]
    freed = [d["freed"] for d in deletes]
    ms = [d["ns"] / 1e6 for d in deletes]
    left = [d["snapshots"] for d in deletes]
    a, b, r_freed = fit(freed, ms)
    _, _, r_left = fit(left, ms)
    # Deletions that free nothing, while many snapshots remain against
    # when few do: the cost of the range scan alone.
    n = len(deletes)
    zero_many = [d["ns"] / 1e6 for d in deletes[: n // 2] if d["freed"] == 0]
    zero_few = [d["ns"] / 1e6 for d in deletes[n // 2:] if d["freed"] == 0]
    return {
        "args": vars(args),
        "create_ms": {"p50": pct(creates, 50) / 1e6, "p99": pct(creates, 99) / 1e6, "max": max(creates) / 1e6},
        "delete": {
            "count": n,
            "ms_p50": pct(ms, 50), "ms_p99": pct(ms, 99), "ms_max": max(ms),
            "fit_ms": {"intercept": a, "per_mib": b * (1 << 20)},
            "r_time_freed": r_freed, "r_time_snapshots_left": r_left,
            "free_nothing_ms_p50_many_left": pct(zero_many, 50), "free_nothing_ms_p50_few_left": pct(zero_few, 50),
            "freed_total": sum(freed),
        },
        "end": end,
        "points": [[d["snapshots"], d["freed"], d["ns"]] for d in deletes],
    }


def chart(res, path):
    mpl = nasgwlab.matplotlib_or_redraw(__file__, res, path)
    if mpl is None:
        return
    import matplotlib.pyplot as plt
    pts = res["points"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    sc = ax1.scatter([p[1] / (1 << 20) for p in pts], [p[2] / 1e6 for p in pts], c=[p[0] for p in pts], s=4,
                     cmap="viridis")
    fig.colorbar(sc, ax=ax1, label="snapshots the volume had")
    f = res["delete"]["fit_ms"]
    xs = [0, max(p[1] for p in pts) / (1 << 20)]
    ax1.plot(xs, [f["intercept"] + f["per_mib"] * x for x in xs], "r-", lw=1,
             label="fit: %.2f ms + %.2f ms/MiB (r=%.2f)" % (f["intercept"], f["per_mib"],
                                                             res["delete"]["r_time_freed"]))
    ax1.set_xlabel("MiB the deletion freed")
    ax1.set_ylabel("deletion time (ms)")
    ax1.legend(loc="upper left")
    ax1.set_title("deletion time follows what it frees")
    ax2.scatter([p[0] for p in pts], [p[2] / 1e6 for p in pts], s=4, c="gray")
    ax2.set_xlabel("snapshots the volume had (deleted in random order)")
    ax2.set_ylabel("deletion time (ms)")
    ax2.set_title("not how many snapshots there are (r=%.2f)" % res["delete"]["r_time_snapshots_left"])
    fig.suptitle("nasgw: %d snapshots taken under random 16 KiB overwrites, deleted in random order (Release, "
                 "in-memory LUNs)" % res["delete"]["count"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", help="the build tree with bench/nasgw-bench")
    ap.add_argument("--snapshots", type=int, default=10000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--file-mib", type=int, default=16)
    ap.add_argument("--writes", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--chart")
    ap.add_argument("--chart-from", help="draw --chart from this result JSON (and nothing else)")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.chart_from:
        with open(a.chart_from) as f:
            chart(json.load(f), a.chart)
        return 0
    if a.smoke:
        a.snapshots, a.files, a.file_mib, a.writes = 60, 4, 4, 8
    cmd = [os.path.join(a.build, "bench", "nasgw-bench"), "snapshots", "--snapshots", str(a.snapshots),
           "--files", str(a.files), "--file-mib", str(a.file_mib), "--writes", str(a.writes), "--seed", str(a.seed),
           "--lun-mib", "256" if a.smoke else "4096"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=7200)
    if p.returncode != 0:
        print("FAIL: nasgw-bench snapshots exited %d:\n%s" % (p.returncode, p.stderr[-3000:]))
        return 1
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    res = summarise(lines, a)
    end, d = res["end"], res["delete"]
    print("creates: p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (res["create_ms"]["p50"], res["create_ms"]["p99"],
                                                             res["create_ms"]["max"]))
    print("deletes: %d, p50 %.2f ms, p99 %.2f ms; time = %.2f ms + %.2f ms/MiB freed, r(time, freed) = %.2f, "
          "r(time, snapshots left) = %.2f; freeing nothing: p50 %.2f ms with many left, %.2f ms with few" % (
              d["count"], d["ms_p50"], d["ms_p99"], d["fit_ms"]["intercept"], d["fit_ms"]["per_mib"],
              d["r_time_freed"], d["r_time_snapshots_left"], d["free_nothing_ms_p50_many_left"],
              d["free_nothing_ms_p50_few_left"]))
    ok = True
    if d["count"] != a.snapshots:
        print("FAIL: %d deletions for %d snapshots" % (d["count"], a.snapshots))
        ok = False
    if end["fsck_problems"] != 0:
        print("FAIL: fsck found %d problems after the deletions" % end["fsck_problems"])
        ok = False
    if end["free_after"] - end["free_with_snapshots"] != d["freed_total"]:
        print("FAIL: the deletions said they freed %d bytes, free space grew by %d" % (
            d["freed_total"], end["free_after"] - end["free_with_snapshots"]))
        ok = False
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f)
    if a.chart and not a.smoke:
        chart(res, a.chart)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
