#!/usr/bin/env python3
"""SMB benchmark: nasgw's SMB head against stock Samba on XFS, in one run.

Targets, served by one Debian smbd in the lab's server namespace, with the
same stacked modules (acl_xattr streams_xattr) and the same options:
  nasgw   share "nas": vfs_nasgw -> nasgwd -> lab LUNs (tgtd)
  stock   share "stock": Samba's vfs_default -> XFS on a loop device (direct
          I/O) whose sparse backing file sits in the lab's directory, on
          the same disk as the LUN files: the local-disk peer

Clients: nasgw-smb-load (bench/smb_load.c, libsmbclient) in a client
namespace, one process and one SMB connection per client, each on its own
file, one request at a time. Workloads, as issue 13 and the NFS benchmark
(docs/benchmarks.md, section 7): 8K random 70% reads, 256K sequential read,
64K sequential write; clients stepped 1, 2, 4, 8, 16. Targets run
interleaved within every step, --runs times; medians are reported with the
ratio nasgw / stock, p50 and p99. Then, to say where nasgw's time goes,
one client runs each workload once more on nasgw while nasgwd's metrics
are read before and after: its mean time per READ and WRITE (decode to
reply sent) and its intent-log record writes, against the client's mean
per request; the rest is smbd, vfs_nasgw and the head socket. Output: a
table, JSON (--out), a PNG chart (--chart).

  python3 bench/smb_bench.py --build build/release --out smb.json --chart smb.png
  python3 bench/smb_bench.py --build build/debug --quick     # smoke: 1 and 2 clients, a second each

Needs root, <build>/bench/nasgw-smb-load, <build>/fsal/samba/nasgw.so,
<build>/daemon/nasgwd and <build>/cli/nasgw.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402
import smblab  # noqa: E402

WORKLOADS = {"randrw": "8K random 70/30", "seqread": "256K sequential read", "seqwrite": "64K sequential write"}
TARGETS = {"nasgw": "nas", "stock": "stock"}   # target: share
STACK = "acl_xattr streams_xattr"
KEYS = ("iops", "mbps", "p50_us", "p99_us")


def log(msg):
    print(msg, flush=True)


def run_load(client, load, srv, user, share, workload, clients, seconds, file_mb, prepare=False):
    argv = [load, "--share", "//%s/%s" % (srv.addr, share), "--user", user.name, "--password", user.password,
            "--workload", workload, "--clients", str(clients), "--seconds", str(seconds), "--file-mb",
            str(file_mb), "--prefix", "c"]
    if prepare:
        argv.append("--prepare-only")
    p = client.run(argv, check=False, timeout=seconds + 600)
    if p.returncode != 0:
        raise RuntimeError("nasgw-smb-load on %s failed (%d): %s" % (share, p.returncode, p.stderr[-2000:]))
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if not prepare and (r["ops"] <= 0 or r["errors"] != 0 or r["p99_us"] < r["p50_us"]):
        raise RuntimeError("nasgw-smb-load on %s: implausible result %r" % (share, r))
    return r


# Head operations nasgwd counts under the latency kind "meta" (every op but
# read, write and fsync), by their names in nasgw_volume_ops_total.
META_OPS = ("getattr", "lookup", "setattr", "access", "open", "release", "getxattr", "setxattr", "listxattr",
            "lock", "unlock", "testlock", "share", "lease", "statfs", "readdir", "findcaseless", "create", "seek",
            "fallocate")


def where_time_goes(client, load, srv, user, node, wls, seconds, file_mb):
    """One client per workload on nasgw, nasgwd's metrics read around it:
    {workload: {client_ms, nasgwd: {kind: {ms, n}}, meta_ops: {op: n}, log_writes, log_write_ms}}
    (log_write_ms: the median record write since nasgwd started)."""
    out = {}

    def snap():
        d = {}
        for kind in ("read", "write", "fsync", "meta"):
            d[kind] = (node.metric("nasgw_volume_latency_seconds_sum", kind=kind),
                       node.metric("nasgw_volume_latency_seconds_count", kind=kind))
        d["log"] = node.metric("nasgw_log_records_total")
        for op in META_OPS:
            d["op:" + op] = node.metric("nasgw_volume_ops_total", op=op)
        return d

    for wl in wls:
        before = snap()
        r = run_load(client, load, srv, user, TARGETS["nasgw"], wl, 1, seconds, file_mb)
        after = snap()
        w = {"client_ms": seconds * 1000.0 / r["ops"], "nasgwd": {}}
        for kind in ("read", "write", "fsync", "meta"):
            ds, dn = after[kind][0] - before[kind][0], after[kind][1] - before[kind][1]
            w["nasgwd"][kind] = {"ms": ds * 1000 / dn if dn else 0.0, "n": int(dn)}
        # records written in the run; their write time is the median since
        # nasgwd started (the log keeps quantiles, not sums)
        # which requests the "meta" kind is, by op
        w["meta_ops"] = {op: int(after["op:" + op] - before["op:" + op]) for op in META_OPS
                         if after["op:" + op] - before["op:" + op]}
        w["log_writes"] = int(after["log"] - before["log"])
        w["log_write_ms"] = node.metric("nasgw_log_write_latency_seconds", quantile="0.5") * 1000
        out[wl] = w
    return out


def medians(samples):
    return {k: statistics.median(s[k] for s in samples) for k in KEYS}


def table(res):
    lines = []
    for wl in res["config"]["workloads"]:
        lines.append("\n%s" % WORKLOADS[wl])
        lines.append("%8s | %-28s | %-28s | %s" % ("clients", "nasgw  IOPS  MB/s  p50/p99 ms", "stock  IOPS  MB/s  p50/p99 ms",
                                                   "nasgw/stock"))
        for n in res["config"]["clients"]:
            row = []
            for t in TARGETS:
                m = res["medians"][t][wl][str(n)]
                row.append("%7.0f %6.1f %6.2f/%-6.2f" % (m["iops"], m["mbps"], m["p50_us"] / 1000, m["p99_us"] / 1000))
            a, b = res["medians"]["nasgw"][wl][str(n)], res["medians"]["stock"][wl][str(n)]
            ratio = a["iops"] / b["iops"] if b["iops"] else float("nan")
            lines.append("%8d | %-28s | %-28s | %.2f" % (n, row[0], row[1], ratio))
    return "\n".join(lines)


def chart(res, path):
    if nasgwlab.matplotlib_or_redraw(__file__, res, path) is None:
        return
    import matplotlib.pyplot as plt
    wls = res["config"]["workloads"]
    rows = [(wl, "iops" if wl == "randrw" else "mbps") for wl in wls] + [("randrw", "p99_us")] * ("randrw" in wls)
    fig, axes = plt.subplots(1, len(rows), figsize=(4.8 * len(rows), 3.6), squeeze=False)
    for col, (wl, key) in enumerate(rows):
        ax = axes[0][col]
        for t, (color, marker) in {"nasgw": ("tab:blue", "o"), "stock": ("tab:green", "s")}.items():
            pts = sorted((int(n), m[key]) for n, m in res["medians"][t][wl].items())
            ax.plot([p[0] for p in pts], [p[1] / 1000 if key == "p99_us" else p[1] for p in pts], marker=marker,
                    color=color, label="nasgw (vfs_nasgw)" if t == "nasgw" else "stock smbd on XFS")
        ax.set_xscale("log", base=2)
        ax.set_xticks(res["config"]["clients"])
        ax.set_xticklabels([str(c) for c in res["config"]["clients"]])
        ax.set_xlabel("SMB clients")
        ax.set_title("%s: %s" % (WORKLOADS[wl], {"iops": "IOPS", "mbps": "MB/s", "p99_us": "p99 (ms)"}[key]),
                     fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("SMB, medians of %d runs (%s)" % (res["config"]["runs"], res["config"]["build"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build")
    ap.add_argument("--clients", default="1,2,4,8,16")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--file-mb", type=int, default=64, help="each client's file (MiB)")
    ap.add_argument("--quick", action="store_true", help="smoke: 1 and 2 clients, 1 s, 1 run, 8 MiB files")
    ap.add_argument("--out")
    ap.add_argument("--chart")
    ap.add_argument("--chart-from", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.chart_from:
        with open(a.chart_from) as f:
            chart(json.load(f), a.chart)
        return 0
    if not a.build:
        ap.error("--build is required")
    if a.quick:
        a.clients, a.runs, a.seconds, a.file_mb = "1,2", 1, 1, 8
    steps = [int(x) for x in a.clients.split(",")]
    wls = a.workloads.split(",")
    if any(w not in WORKLOADS for w in wls) or any(n < 1 or n > 64 for n in steps):
        ap.error("workloads are %s; clients 1..64" % ",".join(WORKLOADS))
    b = os.path.abspath(a.build)
    load = b + "/bench/nasgw-smb-load"
    bins = {"nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw", "fuse": b + "/fsal/fuse/nasgw-fuse"}
    for p in [load] + list(bins.values()):
        if not os.path.exists(p):
            log("smb_bench: %s is not built" % p)
            return 1
    lab = node = None
    rc = 1
    try:
        smblab.install_module(b)
        lab = nfslab.Lab(clients=1)
        user = smblab.User("nasgw-bench-%d" % os.getpid())
        srv = smblab.Smbd(lab, [], users=[user])
        shares_file = os.path.join(srv.dir, "nasgw-shares.conf")
        srv.global_options["include"] = shares_file
        srv.make_dirs()
        # LUNs big enough for 16 clients' files of every workload.
        lun_gb = max(2, (max(steps) * a.file_mb * 2) // 1024 + 2)
        node = nasgwlab.Node(bins=bins, luns=2, size="%dG" % lun_gb, tag="smbbench", metrics=True)
        node.start("[smb]\nshares_file = %s\n" % nasgwlab.toml_str(shares_file))
        node.format()
        node.mount()
        srv.write_config()
        srv.add_users()
        os.makedirs(os.path.join(node.mount_path, "b"))
        os.chown(os.path.join(node.mount_path, "b"), user.uid, user.gid)
        node.cli("share", "add", "vol1/b", "--name", "nas")
        xfs = lab.make_xfs("%dG" % (2 * lun_gb))
        os.makedirs(xfs + "/b")
        os.chown(xfs + "/b", user.uid, user.gid)
        srv.shares = [smblab.path_share("stock", xfs + "/b", **{"vfs objects": STACK})]
        srv.start()
        c = lab.client(1)
        log("smb_bench: %s, clients %s, workloads %s, %d run(s) of %d s, %d MiB per client" % (
            b, steps, wls, a.runs, a.seconds, a.file_mb))
        for t, share in TARGETS.items():
            run_load(c, load, srv, user, share, "randrw", max(steps), 1, a.file_mb, prepare=True)
        samples = {t: {wl: {n: [] for n in steps} for wl in wls} for t in TARGETS}
        for r in range(a.runs):
            for n in steps:
                for wl in wls:
                    for t, share in TARGETS.items():   # interleaved within the step
                        s = run_load(c, load, srv, user, share, wl, n, a.seconds, a.file_mb)
                        samples[t][wl][n].append(s)
                        log("run %d %-8s %2d clients %-5s %8.0f IOPS %7.1f MB/s p50 %6.2f ms p99 %6.2f ms" % (
                            r + 1, wl, n, t, s["iops"], s["mbps"], s["p50_us"] / 1000, s["p99_us"] / 1000))
        res = {"config": {"clients": steps, "workloads": wls, "runs": a.runs, "seconds": a.seconds,
                          "file_mb": a.file_mb, "build": os.path.basename(b), "stack": STACK,
                          "date": time.strftime("%Y-%m-%d %H:%M")},
               "samples": {t: {wl: {str(n): v for n, v in d.items()} for wl, d in w.items()}
                           for t, w in samples.items()},
               "medians": {t: {wl: {str(n): medians(v) for n, v in d.items()} for wl, d in w.items()}
                           for t, w in samples.items()}}
        res["where"] = where_time_goes(c, load, srv, user, node, wls, a.seconds, a.file_mb)
        log(table(res))
        for wl, w in res["where"].items():
            log("%s, 1 client on nasgw: %.3f ms per request at the client; in nasgwd %s; intent-log records "
                "%d (median write %.3f ms)" % (WORKLOADS[wl], w["client_ms"],
                                            ", ".join("%s %.3f ms (%d)" % (k, v["ms"], v["n"])
                                                      for k, v in w["nasgwd"].items() if v["n"]),
                                            w["log_writes"], w["log_write_ms"]))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
        if a.chart:
            chart(res, a.chart)
        rc = 0
    finally:
        rc = nasgwlab.finish([] if rc == 0 else ["benchmark failed"], node=node, lab=lab)
    return rc


if __name__ == "__main__":
    sys.exit(main())
