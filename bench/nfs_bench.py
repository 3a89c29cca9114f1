#!/usr/bin/env python3
"""NFS benchmark: file against block, the FS7500 paper's setting, in one run.

Targets, all on the same lab array (one tgtd, LUN files on the same disk):
  nasgw  NFS clients -> ganesha.nfsd with FSAL_NASGW -> nasgwd on LUNs 1-2
  vfs    NFS clients -> Debian's ganesha.nfsd with FSAL_VFS -> XFS on a loop
         device whose sparse backing file sits beside the LUN files (the
         stock path; it does not cross the array link)
  block  fio's libiscsi engine straight on LUN 3, each client its own LBA
         region (the SAN a block client would see)
Workloads: the FS7500 file workload scaled to this machine: per client a
directory tree three wide and two deep with 16 files in each leaf, 8K random
I/O 70% reads; plus 256K sequential read and 64K sequential write. Clients
are stepped (1, 2, 4, 8, 16); a client is one fio job with its own file set
(its own NFS connection) or its own LBA region. Two settings of the array
link: unlimited, and rate-limited with sanlab's tbf so that the array is
spindle-bound (see --rate). Targets run interleaved within every step,
--runs times; medians are reported. Output: a table, JSON (--out) and a PNG
chart (--chart).

  python3 bench/nfs_bench.py --build build/release --out nfs.json
  python3 bench/nfs_bench.py --quick --build build/debug     # smoke: 1 and 2 clients, a few seconds

Needs root, fio with the nfs and libiscsi engines (deploy/build-fio.sh, run
on demand), and for the nasgw target <build>/fsal/ganesha/libfsalnasgw.so,
<build>/daemon/nasgwd and <build>/cli/nasgw (skipped, with a SKIP line, if
absent).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import nfslab  # noqa: E402
from nasgwlab import Node  # noqa: E402

SANLAB = os.path.join(ROOT, "tests", "lab", "sanlab")
BUILD_FIO = os.path.join(ROOT, "deploy", "build-fio.sh")

WORKLOADS = {
    # name: (fio rw, bs, rwmixread, NFS file service, label)
    "randrw": ("randrw", "8k", 70, "random", "8K random 70/30"),      # over the client's file tree
    "seqread": ("read", "256k", 100, None, "256K sequential read"),     # through the client's stream file
    "seqwrite": ("write", "64k", 0, None, "64K sequential write"),
}
TARGETS = ("nasgw", "vfs", "block")
WIDTH, DEPTH, FILES_PER_LEAF = 3, 2, 16   # the FS7500 paper's Vdbench file set, per client
VOLUME = "bench"
PSEUDO = {"vfs": "/vfs", "nasgw": "/nasgw"}


def log(msg):
    print(msg, flush=True)


def sh(cmd, check=True, timeout=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout[-2000:],
                                                     p.stderr[-3000:]))
    return p


def leaf_dirs(client):
    dirs = [""]
    for _ in range(DEPTH):
        dirs = ["%s/d%d" % (d, w) for d in dirs for w in range(1, WIDTH + 1)]
    return ["c%d%s" % (client, d) for d in dirs]


def client_files(client):
    return ["%s/f%02d" % (d, f) for d in leaf_dirs(client) for f in range(FILES_PER_LEAF)]


def files_per_client():
    return WIDTH ** DEPTH * FILES_PER_LEAF


def client_stream(client):
    """The file a client's sequential workloads stream through: as many bytes
    as its tree, one large file as a streaming client would read or write.
    (It also keeps the sequential runs off fio's file switching, where the
    unpatched nfs engine crashed; see deploy/build-fio.sh.)"""
    return "c%d/stream" % client


def rate_bytes_per_s(rate):
    """A tc rate ("150mbit", "1gbit", "500kbit"; decimal units, as tc's) in bytes/s."""
    for suffix, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1)):
        if rate.endswith(suffix):
            return float(rate[:-len(suffix)]) * mult / 8
    raise ValueError("unsupported rate %r (use kbit, mbit or gbit)" % rate)


# ---- fio ------------------------------------------------------------------------

def fio_jobfile(path, glob, jobs):
    with open(path, "w") as f:
        f.write("[global]\n")
        for k, v in glob.items():
            f.write("%s=%s\n" % (k, v))
        for name, opts in jobs:
            f.write("[%s]\n" % name)
            for k, v in opts.items():
                f.write("%s=%s\n" % (k, v))


LOG_MS = 250   # fio's iops log interval


def concurrent_iops(prefix, njobs):
    """What the target delivered to the step's clients: all their I/O over
    the span from the first client's start to the last one's end.

    fio's group figures divide each job's I/O by its own run time, as if the
    jobs had run together; a client whose mount and open took seconds (an
    NFS server busy serving the others) runs partly alone, and their sum
    overstates what the target delivered (seen: twice the array link's
    rate). The per-job iops logs, time-stamped, give the span, how far apart
    the clients started and how long they all ran together."""
    jobs = []
    for k in range(1, njobs + 1):
        samples = {}
        with open("%s_iops.%d.log" % (prefix, k)) as f:
            for line in f:
                parts = [x.strip() for x in line.split(",")]
                if len(parts) >= 3:
                    t = int(parts[0])
                    samples[t] = samples.get(t, 0) + int(parts[1])   # read + write
        if not samples:
            return None
        jobs.append(sorted(samples.items()))
    starts = [j[0][0] - LOG_MS for j in jobs]
    ends = [j[-1][0] for j in jobs]
    ios = sum(v * LOG_MS / 1000.0 for j in jobs for _, v in j)
    return {"iops": ios / ((max(ends) - min(starts)) / 1000.0),
            "start_skew_s": (max(starts) - min(starts)) / 1000.0,
            "overlap_s": max(0, min(ends) - max(starts)) / 1000.0}


def parse_fio(path):
    with open(path) as f:
        text = f.read()
    j = json.loads(text[text.index("{"):])   # fio may print notes first
    jobs = j["jobs"]
    errors = [x["error"] for x in jobs if x.get("error")]
    if errors:
        raise RuntimeError("fio job errors %s" % errors)
    job = jobs[0]   # group_reporting: one entry for the group
    mixed = job.get("mixed") or job["read"]
    pct = mixed["lat_ns"].get("percentile", {})
    return {
        "iops": mixed["iops"], "mbps": mixed["bw_bytes"] / 1e6,
        "p50_us": pct.get("50.000000", 0) / 1000.0, "p99_us": pct.get("99.000000", 0) / 1000.0,
        "read_iops": job["read"]["iops"], "write_iops": job["write"]["iops"],
        "read_ios": job["read"]["total_ios"], "write_ios": job["write"]["total_ios"],
    }


class Bench:
    def __init__(self, a):
        self.a = a
        self.fio = None
        self.res = {"config": {k: v for k, v in vars(a).items()}, "settings": []}

    # ---- one link setting
    def setting(self, name, rate):
        a = self.a
        pid = os.getpid()
        out = {"name": name, "rate": rate, "targets": {}, "runs": [], "medians": {}}
        self.res["settings"].append(out)
        lab_name = "nfsb%d%s" % (pid, "r" if rate else "u")
        start = [SANLAB, "start", lab_name, "--mode", "netns", "--luns", "3", "--size", a.lun_size,
                 "--owner-pid", str(pid)]
        if rate:
            start += ["--rate", rate]
        san = json.loads(sh(start).stdout)
        node = lab = None
        try:
            host = san["ns_host"]
            lab = nfslab.Lab(name=lab_name, clients=1, server_ns=host)
            self.lab, self.host, self.san = lab, host, san
            targets = [t for t in a.targets if t != "block"]
            exports, plugins, socket = [], {}, None
            if "vfs" in targets:
                xfs = lab.make_xfs(a.xfs_size)
                os.makedirs(os.path.join(xfs, "export"))
                exports.append(nfslab.vfs_export(1, os.path.join(xfs, "export"), PSEUDO["vfs"]))
                out["targets"]["vfs"] = {"path": "FSAL_VFS on XFS on loop (%s)" % xfs}
            if "nasgw" in targets:
                # nasgwd in the controller namespace, where the array is.
                node = Node({"nasgwd": self.bins["nasgwd"], "cli": self.bins["cli"]},
                            urls=[l["url"] for l in san["luns"][:2]], tag="nfsbench", netns=host)
                node.start()
                node.cli("reserve", "format", "--name", "bench", "--ag-size", a.ag_size, "--force")
                create = ["volume", "create", VOLUME]
                if a.record_kib:
                    create += ["--record-size", "%dK" % a.record_kib]
                node.cli(*create)
                exports.append(nfslab.nasgw_export(2, VOLUME, PSEUDO["nasgw"]))
                plugins["nasgw"], socket = self.bins["fsal"], node.head_socket
                out["targets"]["nasgw"] = {"path": "FSAL_NASGW -> nasgwd (volume %s)" % VOLUME}
            if targets:
                cfg = nfslab.GaneshaConfig(exports=exports, plugins=plugins, nasgw_socket=socket)
                try:
                    lab.start_server(cfg)
                except nfslab.NfsLabError as e:
                    if "nasgw" not in targets:
                        raise
                    # FSAL_NASGW is young: measure the others, report why it is out.
                    log("FAILED: target nasgw: ganesha would not start with FSAL_NASGW: %s" % str(e)[-1500:])
                    out["targets"]["nasgw"]["error"] = "ganesha start: %s" % str(e)[-3000:]
                    targets.remove("nasgw")
                    lab.server.stop() if lab.server else None
                    cfg = nfslab.GaneshaConfig(exports=[x for x in exports if "NASGW" not in x])
                    lab.start_server(cfg)
            if "block" in a.targets:
                out["targets"]["block"] = {"path": "fio libiscsi on %s" % san["luns"][2]["url"]}
                targets.append("block")
            for t in list(targets):
                t0 = time.monotonic()
                try:
                    self.layout(t)
                    out["targets"][t]["layout_s"] = round(time.monotonic() - t0, 1)
                    log("[%s] %s: laid out %d clients x %d files x %s MiB in %.1f s" % (
                        name, t, max(a.clients), files_per_client(), a.file_mib, time.monotonic() - t0))
                except Exception as e:
                    log("FAILED: [%s] target %s: layout: %s" % (name, t, str(e)[-1500:]))
                    out["targets"][t]["error"] = "layout: %s" % str(e)[-3000:]
                    targets.remove(t)
            out["measured"] = list(targets)
            self.matrix(out, targets)
        finally:
            errors = []
            for what, fn in (("ganesha", lambda: lab and lab.server and lab.server.stop()),
                             ("nasgwd", lambda: node and node.close()),
                             ("nfslab", lambda: lab and lab.close()),
                             ("sanlab", lambda: sh([SANLAB, "stop", lab_name], check=False))):
                try:
                    fn()
                except Exception as e:  # keep tearing down
                    errors.append("%s: %s" % (what, e))
            if errors:
                log("teardown: " + "; ".join(errors))

    def san_bytes(self):
        """Bytes the array has sent and received on its link so far."""
        p = sh(["ip", "-n", self.san["ns_array"], "-j", "-s", "link", "show", "dev", "eth0"])
        st = json.loads(p.stdout)[0]["stats64"]
        return st["tx"]["bytes"], st["rx"]["bytes"]

    # ---- targets
    def nfs_global(self, t):
        return {"ioengine": "nfs", "nfs_url": "nfs://%s%s" % (self.lab.server_addr, PSEUDO[t]),
                "filesize": "%dk" % int(self.a.file_mib * 1024)}

    def block_global(self):
        url = self.san["luns"][2]["url"].replace(":", "\\:")   # fio splits file names on ':'
        return {"ioengine": "libiscsi", "filename": url}

    def region(self):
        return files_per_client() * int(self.a.file_mib * 1024) * 1024

    def block_job(self, i):
        return {"offset": (i - 1) * self.region(), "size": self.region(),
                "initiator": "iqn.2026-11.org.nasgw:nfsbench-c%d" % i}   # one session each

    def run_fio(self, t, glob, jobs, tag, timeout, window=False):
        job = os.path.join(self.lab.dir, "fio-%s.job" % tag)
        out = os.path.join(self.lab.dir, "fio-%s.json" % tag)
        logs = os.path.join(self.lab.dir, "log-%s" % tag)
        if window:
            glob = dict(glob, write_iops_log=logs, log_avg_msec=LOG_MS, log_unix_epoch=1)
        fio_jobfile(job, glob, jobs)
        if os.path.exists(out):
            os.remove(out)
        cmd = [self.fio, "--output-format=json", "--output=" + out, job]
        if t == "block":
            p = sh(["ip", "netns", "exec", self.host] + cmd, check=False, timeout=timeout)
        else:
            p = self.lab.client(1).run(cmd, check=False, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("fio exit %d: %s%s" % (p.returncode, p.stdout[-1500:], p.stderr[-1500:]))
        res = parse_fio(out)
        if window:
            w = concurrent_iops(logs, len(jobs))
            for k in range(1, len(jobs) + 1):
                try:
                    os.remove("%s_iops.%d.log" % (logs, k))
                except OSError:
                    pass
            if w is None:
                raise RuntimeError("fio wrote no iops samples")
            bs = nfslab.parse_size(glob["bs"])
            res["iops_fio"], res["mbps_fio"] = res["iops"], res["mbps"]
            res["iops"], res["mbps"] = w["iops"], w["iops"] * bs / 1e6
            res["start_skew_s"], res["overlap_s"] = w["start_skew_s"], w["overlap_s"]
            # Less than half the run with every client going: the step did not
            # measure N concurrent clients; said so in the output.
            res["overlap_short"] = w["overlap_s"] < 0.5 * float(glob["runtime"])
        return res

    def layout(self, t):
        """Every client's file set (or LBA region) written once, sequentially:
        the nfs engine creates files only on pure-write jobs and drops queued
        writes at close, hence iodepth 1 there."""
        n = max(self.a.clients)
        if t == "block":
            glob = dict(self.block_global(), rw="write", bs="1m", iodepth=8, group_reporting=1)
            self.run_fio(t, glob, [("c%d" % i, self.block_job(i)) for i in range(1, n + 1)], "layout-block", 3600)
            return
        dirs = [d for i in range(1, n + 1) for d in leaf_dirs(i)]
        self.lab.client(1).nfsrs("for d in ARGS['dirs']:\n    client.mkdir(d, parents=True, exist_ok=True)",
                                 PSEUDO[t].lstrip("/"), version="3", args={"dirs": dirs}, timeout=600)
        glob = dict(self.nfs_global(t), rw="write", bs="256k", iodepth=1, file_service_type="sequential",
                    group_reporting=1)
        jobs = []
        if "randrw" in self.a.workloads:
            jobs += [("c%d" % i, {"filename": ":".join(client_files(i))}) for i in range(1, n + 1)]
        if set(self.a.workloads) & {"seqread", "seqwrite"}:
            jobs += [("s%d" % i, {"filename": client_stream(i), "filesize": self.region()}) for i in range(1, n + 1)]
        self.run_fio(t, glob, jobs, "layout-" + t, 3600)

    def measure(self, t, wl, n):
        rw, bs, mix, service, _ = WORKLOADS[wl]
        a = self.a
        common = {"rw": rw, "bs": bs, "iodepth": a.iodepth, "time_based": 1, "runtime": a.seconds,
                  "ramp_time": a.ramp, "group_reporting": 1, "unified_rw_reporting": "both",
                  "lat_percentiles": 1}
        if rw == "randrw":
            common["rwmixread"] = mix
        if t == "block":
            glob = dict(self.block_global(), **common)
            jobs = [("c%d" % i, self.block_job(i)) for i in range(1, n + 1)]
        elif rw == "randrw":
            glob = dict(self.nfs_global(t), file_service_type=service, **common)
            jobs = [("c%d" % i, {"filename": ":".join(client_files(i))}) for i in range(1, n + 1)]
        else:
            glob = dict(self.nfs_global(t), **common)
            jobs = [("c%d" % i, {"filename": client_stream(i), "filesize": self.region()}) for i in range(1, n + 1)]
        # A run that outlives its time by two minutes is hung: killed, reported.
        return self.run_fio(t, glob, jobs, "%s-%s-%d" % (t, wl, n), a.seconds + a.ramp + 120, window=True)

    def matrix(self, out, targets):
        a = self.a
        k = 0
        for r in range(a.runs):
            for wl in a.workloads:
                for n in a.clients:
                    # Interleaved: every step runs each target once, the first
                    # one rotating, so drift on a noisy machine hits all alike.
                    order = targets[k % len(targets):] + targets[:k % len(targets)] if targets else []
                    k += 1
                    for t in order:
                        row = {"target": t, "workload": wl, "clients": n, "run": r + 1}
                        try:
                            san0, t0 = self.san_bytes(), time.monotonic()
                            row.update(self.measure(t, wl, n))
                            san1, wall = self.san_bytes(), time.monotonic() - t0
                            # What crossed the array link during the whole fio run (ramp and
                            # setup included): MB the array sent (reads) and received (writes).
                            row["wall_s"] = round(wall, 2)
                            row["san_read_mb"] = (san1[0] - san0[0]) / 1e6
                            row["san_write_mb"] = (san1[1] - san0[1]) / 1e6
                            log("[%s] run %d %-8s %-5s %2d clients: %8.0f IOPS %8.1f MB/s p50 %8.0f us p99 %8.0f us"
                                "  SAN %.0f/%.0f MB r/w%s"
                                % (out["name"], r + 1, wl, t, n, row["iops"], row["mbps"], row["p50_us"],
                                   row["p99_us"], row["san_read_mb"], row["san_write_mb"],
                                   ("  clients started %.1f s apart, ran together %.1f s (fio alone: %.0f IOPS)"
                                    % (row["start_skew_s"], row["overlap_s"], row["iops_fio"]))
                                   if row.get("overlap_short") else ""))
                        except Exception as e:
                            row["error"] = str(e)[-3000:]
                            if t != "block" and self.lab.server:
                                srv = self.lab.server
                                up = srv.pid and nfslab.alive(srv.pid, srv.st.get("ganesha_start"))
                                row["error"] += "\n--- ganesha %s; log tail:\n%s" % (
                                    "running" if up else "NOT RUNNING", srv.log_tail(1500))
                            log("FAILED: [%s] run %d %s %s %d clients: %s" % (out["name"], r + 1, wl, t, n,
                                                                             str(e)[-800:]))
                        out["runs"].append(row)
                        self.save()
        for t in targets:
            out["medians"][t] = {}
            for wl in a.workloads:
                out["medians"][t][wl] = {}
                for n in a.clients:
                    rows = [x for x in out["runs"] if x["target"] == t and x["workload"] == wl
                            and x["clients"] == n and "error" not in x]
                    if rows:
                        out["medians"][t][wl][str(n)] = {
                            key: statistics.median(x[key] for x in rows)
                            for key in ("iops", "mbps", "p50_us", "p99_us", "read_iops", "write_iops")}
                        out["medians"][t][wl][str(n)]["runs"] = len(rows)
                        out["medians"][t][wl][str(n)]["overlap_short"] = sum(bool(x.get("overlap_short")) for x in rows)
        self.save()

    def save(self):
        if self.a.out:
            tmp = self.a.out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.res, f, indent=1)
            os.replace(tmp, self.a.out)


# ---- report -----------------------------------------------------------------------

def table(res):
    lines = []
    for s in res["settings"]:
        lines.append("== array link: %s" % s["name"])
        for t, info in s["targets"].items():
            lines.append("   %-6s %s%s" % (t, info.get("path", ""), ("  ERROR " + info["error"][:200]) if "error" in info
                                               else ""))
        lines.append("%-22s %7s  %s" % ("workload", "clients", "  ".join(
            "%-33s" % ("%s: IOPS MB/s p50/p99 ms" % t) for t in s["medians"])))
        wls = res["config"]["workloads"]
        for wl in wls:
            for n in res["config"]["clients"]:
                cells = []
                for t in s["medians"]:
                    m = s["medians"][t].get(wl, {}).get(str(n))
                    cells.append("%-33s" % ("%8.0f %7.1f %6.2f/%-7.2f%s" % (
                        m["iops"], m["mbps"], m["p50_us"] / 1000, m["p99_us"] / 1000,
                        "*" if m.get("overlap_short") else "") if m else "-"))
                lines.append("%-22s %7d  %s" % (WORKLOADS[wl][4], n, "  ".join(cells)))
    lines.append("IOPS and MB/s: all the clients' I/O over the span from the first one's start to the last one's "
                 "end; p50/p99: fio's, each client over its own run. * = in some run the clients ran together "
                 "for less than half of it.")
    return "\n".join(lines)


def chart(res, path):
    try:
        import matplotlib
    except ImportError:
        # python3-matplotlib is Debian's: draw with Debian's interpreter when
        # this one (e.g. a pyenv python3 first on PATH) lacks it.
        if os.path.realpath(sys.executable) == os.path.realpath("/usr/bin/python3"):
            raise
        tmp = path + ".json"
        with open(tmp, "w") as f:
            json.dump(res, f)
        try:
            sh(["/usr/bin/python3", os.path.abspath(__file__), "--chart-from", tmp, "--chart", path])
        finally:
            os.remove(tmp)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    settings = res["settings"]
    wls = res["config"]["workloads"]
    rows = []
    if "randrw" in wls:
        rows += [("randrw", "iops", "8K random 70/30: IOPS"), ("randrw", "p99_us", "8K random 70/30: p99 latency (ms)")]
    for wl in ("seqread", "seqwrite"):
        if wl in wls:
            rows.append((wl, "mbps", "%s: MB/s" % WORKLOADS[wl][4]))
    if not rows or not settings:
        return
    fig, axes = plt.subplots(len(rows), len(settings), figsize=(5.5 * len(settings), 3.2 * len(rows)),
                             squeeze=False)
    styles = {"nasgw": ("tab:blue", "o"), "vfs": ("tab:green", "s"), "block": ("tab:red", "^")}
    for col, s in enumerate(settings):
        for row, (wl, key, label) in enumerate(rows):
            ax = axes[row][col]
            for t, med in s["medians"].items():
                pts = sorted((int(n), m[key]) for n, m in med.get(wl, {}).items())
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                ys = [p[1] / 1000 if key == "p99_us" else p[1] for p in pts]
                color, marker = styles.get(t, (None, "x"))
                ax.plot(xs, ys, marker=marker, color=color, label=t)
            ax.set_xscale("log", base=2)
            ax.set_xticks(res["config"]["clients"])
            ax.set_xticklabels([str(c) for c in res["config"]["clients"]])
            ax.set_xlabel("clients")
            ax.set_title("%s\narray link: %s" % (label, s["name"]) if row == 0 else label, fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.set_yscale("log")   # the targets lie orders of magnitude apart
            if key == "p99_us":
                ax.axhline(20, color="grey", linestyle=":", linewidth=1)   # the paper's 20 ms response-time bar
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---- checks of the smoke run ---------------------------------------------------------

def smoke_problems(res):
    bad = []
    for s in res["settings"]:
        for t, info in s["targets"].items():
            if "error" in info:
                bad.append("%s/%s: %s" % (s["name"], t, info["error"][:300]))
        for row in s["runs"]:
            where = "%s/%s/%s/%d" % (s["name"], row["target"], row["workload"], row["clients"])
            if "error" in row:
                bad.append("%s: %s" % (where, row["error"][:300]))
            elif not (row["iops"] > 0 and row["p99_us"] > 0):
                bad.append("%s: implausible %s" % (where, row))
            elif row["workload"] == "randrw" and not row["read_ios"] > row["write_ios"] > 0:
                bad.append("%s: a 70/30 mix must do both, mostly reads: %s" % (where, row))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"),
                    help="build dir with daemon/nasgwd, cli/nasgw, fsal/ganesha/libfsalnasgw.so")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--clients", default="1,2,4,8,16", help="client steps")
    ap.add_argument("--file-mib", type=float, default=1.0,
                    help="size of each file (%d per client)" % files_per_client())
    ap.add_argument("--iodepth", type=int, default=4, help="I/Os in flight per client")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--ramp", type=float, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", default="150mbit",
                    help="tbf rate of the shaped array link ('none': unlimited only)")
    ap.add_argument("--links", default="unlimited,shaped", help="which link settings to run")
    ap.add_argument("--lun-size", default="4G")
    ap.add_argument("--xfs-size", default="8G")
    ap.add_argument("--ag-size", default="64M")
    ap.add_argument("--record-kib", type=int, default=0, help="nasgw volume record size (default: nasgw's)")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--chart", help="PNG chart (default: --out with .png)")
    ap.add_argument("--fio", help="fio with the nfs and libiscsi engines (default: deploy/build-fio.sh)")
    ap.add_argument("--chart-from", help=argparse.SUPPRESS)   # draw the chart of a results JSON, nothing else
    ap.add_argument("--quick", action="store_true",
                    help="smoke: 1 and 2 clients, 2 s per run, 256 KiB files, one run, with sanity checks")
    a = ap.parse_args()
    if a.chart_from:
        with open(a.chart_from) as f:
            chart(json.load(f), a.chart)
        return 0
    if a.quick:
        a.clients, a.seconds, a.ramp, a.runs, a.file_mib = "1,2", 2, 0.5, 1, 0.25
    a.targets = [t for t in a.targets.split(",") if t]
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.clients = [int(c) for c in str(a.clients).split(",")]
    a.links = [l for l in a.links.split(",") if l]
    for t in a.targets:
        if t not in TARGETS:
            ap.error("unknown target %r" % t)
    for w in a.workloads:
        if w not in WORKLOADS:
            ap.error("unknown workload %r" % w)
    if (files_per_client() * a.file_mib * max(a.clients)) > nfslab.parse_size(a.lun_size) / (1 << 20):
        ap.error("the clients' data (%d x %d files x %s MiB) does not fit a %s LUN" % (
            max(a.clients), files_per_client(), a.file_mib, a.lun_size))
    if os.geteuid() != 0:
        print("nfs_bench: must run as root (namespaces, tgtd, ganesha)", file=sys.stderr)
        return 2
    if a.rate and a.rate != "none":
        try:
            rate_bytes_per_s(a.rate)
        except ValueError as e:
            ap.error(str(e))
    if a.out and not a.chart:
        a.chart = os.path.splitext(a.out)[0] + ".png"

    b = Bench(a)
    build = os.path.abspath(a.build)
    b.bins = {"nasgwd": os.path.join(build, "daemon", "nasgwd"), "cli": os.path.join(build, "cli", "nasgw"),
              "fsal": os.path.join(build, "fsal", "ganesha", "libfsalnasgw.so")}
    if "nasgw" in a.targets:
        missing = [p for p in b.bins.values() if not os.path.isfile(p)]
        if missing:
            log("SKIP: target nasgw: not built: %s (FSAL_NASGW is built to <build>/fsal/ganesha/); "
                "measuring %s" % (", ".join(missing), ", ".join(t for t in a.targets if t != "nasgw")))
            a.targets.remove("nasgw")
            b.res["skipped"] = {"nasgw": "not built: %s" % ", ".join(missing)}
    if not a.targets:
        log("nothing to measure")
        return 1
    b.fio = a.fio or sh(["bash", BUILD_FIO], timeout=1800).stdout.strip().splitlines()[-1]
    b.res["fio"] = sh([b.fio, "--version"]).stdout.strip()
    g = sh(["git", "-C", ROOT, "describe", "--always", "--dirty"], check=False)
    b.res["git"] = g.stdout.strip() if g.returncode == 0 else None   # what the build was made from (roughly)
    b.res["started"] = time.strftime("%Y-%m-%d %H:%M:%S")

    settings = []
    if "unlimited" in a.links:
        settings.append(("unlimited", None))
    if "shaped" in a.links and a.rate and a.rate != "none":
        settings.append(("tbf %s" % a.rate, a.rate))
    for name, rate in settings:
        log("== array link: %s; targets %s; clients %s; workloads %s; %d run(s) of %ss" % (
            name, ",".join(a.targets), a.clients, ",".join(a.workloads), a.runs, a.seconds))
        b.setting(name, rate)
    b.res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    b.save()
    log(table(b.res))
    if a.chart:
        try:
            chart(b.res, a.chart)
            log("chart: %s" % a.chart)
        except Exception as e:
            log("chart failed: %s" % e)

    bad = smoke_problems(b.res)
    if a.quick:
        for x in bad:
            log("FAILED: %s" % x)
        if bad:
            return 1
        log("1 passed, 0 failed")
        return 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
