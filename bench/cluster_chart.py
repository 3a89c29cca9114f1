#!/usr/bin/python3
"""Draws the controller pair's outage chart (docs/benchmarks.md §13) from
cluster_lab.py --json files: for every trial, the time from the failure to
the partner online and to the first operation a client got served.

    bench/cluster_chart.py --kill K.json --nfs N.json --out docs/img/cluster-outage.png
    bench/cluster_chart.py --nfs N.json --throughput-out docs/img/cluster-nfs-throughput.png

--throughput-out draws the NFS client's replies per second around each
failover (cluster_lab.py nfs records every reply's time): one thin line a
trial, the median over the trials bold.
"""
import argparse
import json
import statistics


def load(path, key):
    if not path:
        return []
    with open(path) as f:
        return json.load(f).get(key, [])


def throughput(plt, nfs, out, before=5.0, after=15.0, bin_s=0.5):
    rows = [n for n in nfs if n.get("replies_s") and n.get("failure", "panic") == "panic"]
    if not rows:
        raise SystemExit("no trial with reply times (cluster_lab.py nfs --json, after the replies_s field)")
    edges = [-before + i * bin_s for i in range(int((before + after) / bin_s) + 1)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    series = []
    for n in rows:
        counts = [0] * (len(edges) - 1)
        for t in n["replies_s"]:
            k = int((t + before) // bin_s)
            if 0 <= k < len(counts):
                counts[k] += 1
        rate = [c / bin_s for c in counts]
        series.append(rate)
        ax.plot(edges[:-1], rate, color="tab:orange" if n["version"] == "3" else "tab:green", alpha=0.25,
                linewidth=0.8)
    median = [statistics.median(s[k] for s in series) for k in range(len(edges) - 1)]
    ax.plot(edges[:-1], median, color="black", linewidth=2,
            label="median of %d failovers (orange: NFSv3, green: NFSv4.1)" % len(rows))
    ax.axvline(0, color="tab:red", linestyle="--", linewidth=0.8)
    ax.text(0.1, max(median + [1]) * 1.02, "the owner's machine dies", color="tab:red", fontsize=8)
    ax.set_xlabel("seconds from the failure")
    ax.set_ylabel("replies per second (one client, 8 KiB file writes)")
    ax.set_title("NFS through the pair's VIP across a takeover, Debug build, lab bounds")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote %s" % out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kill", help="cluster_lab.py kill --json output")
    ap.add_argument("--nfs", help="cluster_lab.py nfs --json output")
    ap.add_argument("--out")
    ap.add_argument("--throughput-out")
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kill = load(a.kill, "kill")
    nfs = load(a.nfs, "nfs")
    if a.throughput_out:
        throughput(plt, nfs, a.throughput_out)
    if not a.out:
        return
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if kill:
        ax.plot([k["round"] for k in kill], [k["online_s"] for k in kill], ".", color="tab:blue",
                label="SIGKILL of the owner: partner online (median %.2f s)" %
                statistics.median(k["online_s"] for k in kill))
        ax.plot([k["round"] for k in kill], [k["served_s"] for k in kill], "x", color="tab:blue", alpha=0.5,
                label="... first op through the partner's FUSE head (median %.2f s)" %
                statistics.median(k["served_s"] for k in kill))
    for version, color in (("3", "tab:orange"), ("4.1", "tab:green")):
        rows = [(i, n) for i, n in enumerate(nfs) if n["version"] == version and n.get("failure", "panic") == "panic"]
        if rows:
            ax.plot([i for i, _ in rows], [n["client_outage_s"] for _, n in rows], "^", color=color,
                    label="NFSv%s through the VIP, machine dies: client without a reply (median %.2f s)" %
                    (version, statistics.median(n["client_outage_s"] for _, n in rows)))
    lan = [(i, n) for i, n in enumerate(nfs) if n.get("failure") == "lan"]
    if lan:
        ax.plot([i for i, _ in lan], [n["client_outage_s"] for _, n in lan], "s", color="tab:red",
                label="NFSv3 through the VIP, the owner's LAN link down: client without a reply")
    ax.axhline(5, color="grey", linestyle="--", linewidth=0.8)
    ax.text(0, 5.1, "target median 5 s", color="grey", fontsize=8)
    ax.set_xlabel("trial")
    ax.set_ylabel("seconds from the failure")
    ax.set_ylim(0, max(6, ax.get_ylim()[1]))
    ax.set_title("Controller pair failover, lab bounds (lease 1.5 s, network dead 1 s, settle 0.5 s), Debug build")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
