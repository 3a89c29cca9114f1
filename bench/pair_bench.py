#!/usr/bin/env python3
"""The controller pair's cache mirror, measured: 8K random 70/30 over NFS with
the pair healthy (stable writes and namespace changes acknowledged once the
partner's memory holds them) against the single-node SAN intent log and
against degraded mode, in one run.

The lab is tests/integration/cluster_lab.py's (Lab(build, nfs=True)): two
nasgwd nodes in two host namespaces on one tgtd array, Corosync and the
mirror (mirror_listen / mirror_peer, port 7410) on their interconnect,
ganesha.nfsd with FSAL_NASGW on each node, the clients' LAN with the pair's
VIP (198.18.1.50). A formats the reserve and owns it, exports vol1; B stands
by. fio's nfs engine (libnfs, NFSv3) runs in the LAN's client namespace
against nfs://VIP/vol1: --clients jobs, each its own file of --file-mib MiB
(laid out once, sequentially, before the rounds; the volume is
Lab.start_pair's vol1, record size 64K), 8K random I/O with 70% reads,
--iodepth in flight per job.

Stable writes: fio's nfs engine opens its files without O_SYNC, so libnfs
sends UNSTABLE WRITEs (libnfs: stable = is_sync ? FILE_SYNC : UNSTABLE), and
FSAL_NASGW's default (NFSv3_Unstable = true) answers those from nasgwd's
cache: neither the intent log nor the mirror is waited for, and the three
variants would measure one path. So by default (--writes file_sync) each
node's ganesha runs with NFSv3_Unstable = false (nfslab's config plus that
option): every v3 WRITE is made FILE_SYNC by the FSAL, i.e. in nasgwd a
logged stable write of 8 KiB, answered once the intent log record is on the
array, or, healthy, once the partner holds it. --writes unstable keeps the
stock config (a control: the mirror should make no difference there).

--writes commit measures COMMITs instead (stock ganesha config): no fio;
each measurement runs nasgw-nfs-commit (tests/tools/nfs_commit.c) in the
client namespace: --clients threads, each with its own NFS connection and
file of --file-mib MiB (default 4; laid out and committed before, checked
read back and removed after), writing 8 KiB UNSTABLE at a random offset and
sending a COMMIT, one round after the other. A COMMIT of a little dirty
data is logged (DataCache::Commit), so healthy answers it from the
partner's memory. A fourth variant joins: `inplace`, single with
[cache] log_commits = false (every COMMIT flushes the data to its place
first, as nasgwd did before). Reported: rounds/s, round (WRITE + COMMIT)
and COMMIT p50/p99, and A's COMMITs logged and flushed.

Variants, run interleaved within each of --runs rounds (the first rotating),
medians over the rounds reported:
  healthy   the pair: A owns the reserve, B stands by, A's log streams to B
            (A's `cluster status` mirror: "the partner's memory ...")
  degraded  B's nasgwd stopped (SIGTERM): A answers from the SAN intent log
            (mirror: "the SAN intent log (degraded: ...)", degraded true);
            then B started again and the stream waited for
  single    no mirror configured: B stopped, A restarted with its same
            config minus the mirror_listen / mirror_peer lines (a single
            node with the SAN intent log); then A restarted with the mirror
            config and B started again (this script restarts A; it does not
            use the fallback of a mirror-less pair)
Before every measurement, whatever the variant: the files are read once
through NFS (so A's cache is warm also after single's restart), then A's
SAN link is let go quiet (its write-back of the previous variant). Each
variant's state is checked before and after its measurement (A online and
holding the VIP; the mirror string); a row whose state changed during the
measurement is marked and left out of the medians.

Reported per variant: total IOPS and write IOPS (all the jobs' I/O over the
span from the first job's start to the last one's end, nfs_bench's
concurrent_iops, times fio's write share), fio's write and read p50/p99
latency (us), the bytes A sent to and read from the array during the
measurement, and A's counters over it (nasgwd's metrics endpoint: writes
logged, put in place, put in place because the log was slow, answers the
mirror gave before the array); and healthy's write IOPS and write p50 against single's and
degraded's (ratio of the medians, and the median of the per-round ratios);
the CPU the machine, A's and B's nasgwd used during the measurement (both
nodes share this machine's cores: B's work receiving the stream is not free
here as it is on a partner machine).
Output: a table on stdout, --out JSON (rewritten after every row).

  python3 bench/pair_bench.py --build build/release --runs 5 --out /tmp/pair-bench.json
  python3 bench/pair_bench.py --build build/debug --smoke      # 1 round, 3 s per variant
  python3 bench/pair_bench.py --build build/release --writes commit --runs 5 --seconds 10 --out /tmp/commit.json

Needs root (namespaces, tgtd, ganesha), corosync, fio with the nfs engine
(deploy/build-fio.sh, run on demand), <build>/daemon/nasgwd, cli/nasgw,
fsal/ganesha/libfsalnasgw.so, fsal/fuse/nasgw-fuse.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
from nfs_bench import (BUILD_FIO, LOG_MS, LinkCounters, concurrent_window, fio_jobfile,  # noqa: E402
                       parse_fio, sh, write_json)
from cluster_lab import VIP, Lab, cluster, state, wait_for  # noqa: E402
import nfslab  # noqa: E402

VARIANTS = ("healthy", "degraded", "single")
# --writes commit adds `inplace`: single with [cache] log_commits = false
# (every COMMIT flushes to the place: nasgwd before COMMITs were logged).
COMMIT_VARIANTS = VARIANTS + ("inplace",)
INPLACE_CONFIG = "\n[cache]\nlog_commits = false\n"
EXPORT = "vol1"   # Lab.start_pair's volume, exported as cmd_nfs does (pseudo /vol1)
MIRROR_LINE = re.compile(r"^\s*mirror_(listen|peer)\s*=.*\n?", re.M)
MEDIAN_KEYS = ("iops", "write_iops", "read_iops", "write_p50_us", "write_p99_us", "read_p50_us", "read_p99_us",
               "iops_fio", "write_iops_fio", "san_tx_mb", "san_rx_mb", "start_skew_s", "setup_s", "restore_s",
               "prime_s", "quiet_s", "writes_logged", "writes_stable_in_place", "writes_log_slow", "mirror_acks",
               "commit_p50_us", "commit_p99_us", "commits_logged", "commits_flushed")
STATE_TIMEOUT_S = 60
# A's counters around each measurement (nasgwd's metrics endpoint, inside
# its host namespace): how the writes were answered.
METRICS = ("nasgw_cluster_mirror_acks_total", "nasgw_cache_writes_total", "nasgw_cache_log_slow_writes_total",
           "nasgw_log_records_total", "nasgw_log_entries_total", "nasgw_log_bytes_total", "nasgw_cache_commits_total")
METRICS_GAUGES = ("nasgw_log_write_recent_seconds", "nasgw_log_write_latency_seconds", "nasgw_cluster_mirror_streaming")
METRICS_FETCH = ("import sys, urllib.request\n"
                 "sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:%d/metrics', timeout=10).read().decode())")


class FileSyncGaneshaConfig(nfslab.GaneshaConfig):
    """nfslab's ganesha config with FSAL_NASGW's NFSv3_Unstable = false:
    every NFSv3 WRITE answered FILE_SYNC (a logged write of up to 64 KiB in
    nasgwd: docs/nfs.md). fio's nfs engine opens its files without O_SYNC,
    so libnfs sends UNSTABLE WRITEs, which the default config answers from
    nasgwd's cache, never waiting for the intent log nor the mirror."""

    def render(self, plugins_dir, recovery_root):
        text = super().render(plugins_dir, recovery_root)
        line = "NASGW { Socket = %s; }" % nfslab.conf_str(self.nasgw_socket)
        if line not in text:
            raise RuntimeError("nfslab's ganesha config has no line %r to extend" % line)
        return text.replace(line, "NASGW { Socket = %s; NFSv3_Unstable = false; }" %
                            nfslab.conf_str(self.nasgw_socket))


def start_ganesha(lab, file_sync):
    """Lab.start_ganesha, with FileSyncGaneshaConfig when file_sync."""
    plain = nfslab.GaneshaConfig
    if file_sync:
        nfslab.GaneshaConfig = FileSyncGaneshaConfig
    try:
        lab.start_ganesha()
    finally:
        nfslab.GaneshaConfig = plain


def log(msg):
    print(msg, flush=True)


def mirror(node):
    c = cluster(node)
    return {"mirror": c.get("mirror", ""), "degraded": c.get("degraded"), "state": state(node),
            "vips_held": c.get("vips_held") or []}


def streaming(node):
    return "partner's memory" in cluster(node).get("mirror", "")


class PairBench:
    def __init__(self, a, lab):
        self.a = a
        self.lab = lab
        self.A, self.B = lab.nodes
        # The configs the Lab wrote (mirror on); `single` starts A without the mirror lines.
        self.cfg = [n.s["extra_config"] for n in lab.nodes]
        self.cfg_single = MIRROR_LINE.sub("", self.cfg[0])
        if "mirror_" in self.cfg_single or "mirror_listen" not in self.cfg[0]:
            raise RuntimeError("could not take the mirror lines out of A's config:\n" + self.cfg[0])
        self.client = lab.client()
        for n in lab.nodes:
            n.s["metrics"] = True   # Node.write_config then adds [metrics] listen on 127.0.0.1 (its namespace's)
            n.metrics_port()
            n.save()
        self.dir = "/tmp/nasgw-pairbench-%d" % os.getpid()
        os.makedirs(self.dir, exist_ok=True)
        self.fio = None
        self.res = {"config": {k: v for k, v in vars(a).items()}, "rows": []}

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def save(self):
        write_json(self.a.out, self.res)

    # ---- the pair's states
    def running(self, node):
        return bool(node.s.get("daemon_pid"))

    def nfs_ok(self):
        return self.client.nfs_ls(EXPORT, check=False).returncode == 0

    def wait_serving(self, what):
        """A online, holding the VIP, and the export answering through it."""
        wait_for(lambda: state(self.A) == "online", STATE_TIMEOUT_S, "A online (%s)" % what)
        wait_for(lambda: VIP + "/24" in (cluster(self.A).get("vips_held") or []), STATE_TIMEOUT_S,
                 "A holds the VIP (%s)" % what)
        wait_for(self.nfs_ok, STATE_TIMEOUT_S, "the export answering through the VIP (%s)" % what)

    def setup(self):
        a, b = self.lab.start_pair()
        a.cli("export", "add", EXPORT, "--no-root-squash")
        wait_for(lambda: VIP + "/24" in (cluster(a).get("vips_held") or []), 10, "A holds the VIP")
        start_ganesha(self.lab, self.a.writes == "file_sync")
        self.wait_serving("setup")
        wait_for(lambda: streaming(a), STATE_TIMEOUT_S, "A's mirror streaming to B")

    def restore_pair(self):
        """Back to the healthy pair: A with the mirror config, owning;
        B standing by; A's log streaming to B's memory."""
        t0 = time.monotonic()
        if not self.running(self.A) or self.A.s["extra_config"] != self.cfg[0]:
            if self.running(self.B):
                self.B.stop()     # A restarts first: a running B would take the reserve over
            if self.running(self.A):
                self.A.stop()
            self.A.start(self.cfg[0])
            self.wait_serving("A restarted with the mirror")
        if not self.running(self.B):
            self.B.start(self.cfg[1])
            wait_for(lambda: state(self.B) == "standby", STATE_TIMEOUT_S, "B standby")
        wait_for(lambda: cluster(self.B).get("verdict") == "owner-alive", STATE_TIMEOUT_S, "B hears A")
        wait_for(lambda: streaming(self.A), STATE_TIMEOUT_S, "A's mirror streaming to B")
        self.wait_serving("pair")
        return time.monotonic() - t0

    def enter(self, v):
        """Puts the pair in variant v's state (from the healthy pair) and
        checks it. Returns A's cluster view."""
        if v == "degraded":
            self.B.stop()
            wait_for(lambda: "SAN intent log" in cluster(self.A).get("mirror", ""), STATE_TIMEOUT_S,
                     "A answering from the SAN intent log")
        elif v in ("single", "inplace"):
            self.B.stop()
            self.A.stop()
            self.A.start(self.cfg_single + (INPLACE_CONFIG if v == "inplace" else ""))
        self.wait_serving(v)
        m = mirror(self.A)
        if not self.state_ok(v, m):
            raise RuntimeError("%s: A is not in the variant's state: %s" % (v, m))
        return m

    def state_ok(self, v, m):
        if m["state"] != "online" or VIP + "/24" not in m["vips_held"]:
            return False
        if v == "healthy":
            return "partner's memory" in m["mirror"]
        if v == "degraded":
            return "SAN intent log" in m["mirror"] and m["degraded"] is True
        # single: no mirror configured, so no stream and no degraded-mirror text
        return "partner's memory" not in m["mirror"] and "degraded: no mirror" not in m["mirror"]

    # ---- fio
    def nfs_global(self):
        return {"ioengine": "nfs", "nfs_url": "nfs://%s/%s" % (VIP, EXPORT),
                "filesize": "%dk" % int(self.a.file_mib * 1024)}

    def jobs(self):
        return [("c%d" % i, {"filename": "pairbench-c%d" % i}) for i in range(1, self.a.clients + 1)]

    def run_fio(self, glob, tag, timeout, window=False):
        job = os.path.join(self.dir, "fio-%s.job" % tag)
        out = os.path.join(self.dir, "fio-%s.json" % tag)
        logs = os.path.join(self.dir, "log-%s" % tag)
        if window:
            glob = dict(glob, write_iops_log=logs, log_avg_msec=LOG_MS, log_unix_epoch=1)
        jobs = self.jobs()
        fio_jobfile(job, glob, jobs)
        if os.path.exists(out):
            os.remove(out)
        p = self.client.run([self.fio, "--output-format=json", "--output=" + out, job], check=False,
                            timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("fio %s exit %d: %s%s" % (tag, p.returncode, p.stdout[-1500:], p.stderr[-1500:]))
        res = parse_fio(out)
        if window:
            w = concurrent_window(logs, len(jobs))
            res["iops_fio"], res["write_iops_fio"] = res["iops"], res["write_iops"]
            ios = res["read_ios"] + res["write_ios"]
            res["iops"] = w["iops"]
            res["write_iops"] = w["iops"] * res["write_ios"] / ios if ios else 0.0
            res["read_iops"] = w["iops"] * res["read_ios"] / ios if ios else 0.0
            res["start_skew_s"], res["overlap_s"] = w["start_skew_s"], w["overlap_s"]
        return res

    def layout(self):
        """Each job's file written once, sequentially (the nfs engine creates
        files only on pure-write jobs; iodepth 1, as nfs_bench's layout).
        --writes commit: nasgw-nfs-commit lays out its own files."""
        if self.a.writes == "commit":
            return 0.0
        t0 = time.monotonic()
        self.run_fio(dict(self.nfs_global(), rw="write", bs="256k", iodepth=1, group_reporting=1), "layout", 1800)
        return time.monotonic() - t0

    def prime(self, tag):
        """Every file read once: A's cache warm whatever came before."""
        if self.a.writes == "commit":
            return 0.0
        t0 = time.monotonic()
        self.run_fio(dict(self.nfs_global(), rw="read", bs="256k", iodepth=1, group_reporting=1),
                     "prime-" + tag, 900)
        return time.monotonic() - t0

    def measure_commits(self, tag):
        """--writes commit: nasgw-nfs-commit, --clients threads each writing
        8 KiB UNSTABLE at a random offset of its own file and sending a
        COMMIT, one after the other, for --seconds; its files laid out (and
        committed) before, checked read back after, removed."""
        a = self.a
        p = self.client.run([self.commit_tool, "--url", "nfs://%s/%s" % (VIP, EXPORT), "--prefix", "cb-" + tag,
                             "--clients", str(a.clients), "--seconds", str(a.seconds), "--bytes", "8192",
                             "--file-kib", str(int(a.file_mib * 1024))], check=False, timeout=a.seconds + 600)
        if p.returncode != 0:
            raise RuntimeError("nasgw-nfs-commit %s exit %d: %s%s" % (tag, p.returncode, p.stdout[-1500:],
                                                                     p.stderr[-1500:]))
        r = json.loads(p.stdout)
        # A round is one WRITE and its COMMIT: counted as a write, and the
        # write latency is the round's (what the application waits for).
        return {"iops": r["rounds_per_s"], "write_iops": r["rounds_per_s"], "read_iops": 0.0,
                "write_p50_us": r["round_us"]["p50"], "write_p99_us": r["round_us"]["p99"],
                "commit_p50_us": r["commit_us"]["p50"], "commit_p99_us": r["commit_us"]["p99"],
                "unstable_write_p50_us": r["write_us"]["p50"], "rounds": r["rounds"],
                "write_latency": "nasgw-nfs-commit (WRITE + COMMIT)"}

    def measure(self, tag):
        a = self.a
        if a.writes == "commit":
            return self.measure_commits(tag)
        glob = dict(self.nfs_global(), rw="randrw", rwmixread=70, bs="8k", iodepth=a.iodepth, time_based=1,
                    runtime=a.seconds, ramp_time=a.ramp, group_reporting=1, unified_rw_reporting="both",
                    lat_percentiles=1)
        return self.run_fio(glob, tag, a.seconds + a.ramp + 120, window=True)

    def metrics(self):
        """A's counters and gauges of METRICS / METRICS_GAUGES ({name or
        name{labels}: value}); {} when the endpoint does not answer."""
        p = sh(["ip", "netns", "exec", self.lab.hosts[0], sys.executable, "-c",
                METRICS_FETCH % self.A.metrics_port()], check=False, timeout=30)
        if p.returncode != 0:
            return {}
        out = {}
        for line in p.stdout.splitlines():
            if line.startswith(METRICS + METRICS_GAUGES):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def cpu(self):
        """CPU seconds so far: the machine's busy time (all cores, from
        /proc/stat), A's and B's nasgwd and A's ganesha.nfsd (None for a
        process not running)."""
        tick = os.sysconf("SC_CLK_TCK")
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        out = {"machine_busy": (sum(v) - v[3] - v[4]) / tick, "machine_total": sum(v) / tick}
        pids = {"nasgwd_a": self.A.s.get("daemon_pid"), "nasgwd_b": self.B.s.get("daemon_pid"),
                "ganesha_a": getattr(self.lab.servers[0], "pid", None) if self.lab.servers else None}
        for k, pid in pids.items():
            out[k] = None
            if pid:
                try:
                    with open("/proc/%d/stat" % pid) as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    out[k] = (int(fields[11]) + int(fields[12])) / tick
                except (OSError, IndexError, ValueError):
                    pass
        return out

    def san_counters(self):
        """A's SAN link (its namespace's eth0): tx = what A wrote to the
        array, rx = what it read."""
        return LinkCounters(self.A.s["daemon_pid"], dev="eth0")

    # ---- a round
    def variant(self, r, v):
        row = {"run": r, "variant": v}
        t0 = time.monotonic()
        try:
            try:
                row["before"] = self.enter(v)
                row["setup_s"] = round(time.monotonic() - t0, 2)
                row["prime_s"] = round(self.prime("%s-r%d" % (v, r)), 2)
                counters = self.san_counters()
                row["quiet_s"], _, _, row["quiet"] = counters.wait_quiet(self.a.quiesce_max)
                san0, m0, c0, w0 = counters.read(), self.metrics(), self.cpu(), time.monotonic()
                row.update(self.measure("%s-r%d" % (v, r)))
                san1, m1, c1, w1 = counters.read(), self.metrics(), self.cpu(), time.monotonic()
                # CPU over the measurement (ramp and fio's start included), in cores busy.
                row["cpu_cores"] = {k: (c1[k] - c0[k]) / (w1 - w0) if c1[k] is not None and c0[k] is not None
                                    else None for k in c1 if k != "machine_total"}
                # Counters: what the measurement added; gauges: as it ended.
                row["a_metrics"] = {k: (m1[k] - m0.get(k, 0) if k.startswith(METRICS) else m1[k]) for k in m1}
                am = row["a_metrics"]
                row["writes_logged"] = am.get('nasgw_cache_writes_total{answer="logged"}')
                row["writes_stable_in_place"] = am.get('nasgw_cache_writes_total{answer="stable"}')
                row["writes_log_slow"] = am.get("nasgw_cache_log_slow_writes_total")
                row["mirror_acks"] = am.get("nasgw_cluster_mirror_acks_total")
                row["commits_logged"] = am.get('nasgw_cache_commits_total{answer="logged"}')
                row["commits_flushed"] = am.get('nasgw_cache_commits_total{answer="flushed"}')
                row["san_tx_mb"], row["san_rx_mb"] = (san1[0] - san0[0]) / 1e6, (san1[1] - san0[1]) / 1e6
                row["after"] = mirror(self.A)
                row["state_kept"] = self.state_ok(v, row["after"])
            finally:
                row["restore_s"] = round(self.restore_pair(), 2)
            log("round %d %-8s write %6.0f IOPS (total %6.0f) write p50 %6.0f us p99 %7.0f us, read p50 %6.0f us "
                "p99 %7.0f us; SAN %.0f MB out, %.0f in; writes logged %s, in place %s (log slow %s), mirror "
                "acks %s; CPU cores busy: machine %.2f, nasgwd A %.2f B %s, ganesha A %s; setup %.1f s, restore %.1f s%s" % (
                    r, v, row["write_iops"], row["iops"], row.get("write_p50_us", 0), row.get("write_p99_us", 0),
                    row.get("read_p50_us", 0), row.get("read_p99_us", 0), row["san_tx_mb"], row["san_rx_mb"],
                    num(row["writes_logged"]), num(row["writes_stable_in_place"]), num(row["writes_log_slow"]),
                    num(row["mirror_acks"]), row["cpu_cores"]["machine_busy"], row["cpu_cores"]["nasgwd_a"] or 0,
                    fmt(row["cpu_cores"]["nasgwd_b"]), fmt(row["cpu_cores"]["ganesha_a"]),
                    row["setup_s"], row["restore_s"],
                    "" if row["state_kept"] else "  STATE CHANGED DURING THE RUN: %s" % row["after"]))
        except Exception as e:
            row["error"] = str(e)[-3000:]
            row["wall_s"] = round(time.monotonic() - t0, 2)
            for i, n in enumerate(self.lab.nodes):
                row["error"] += "\n--- node %s log tail:\n%s" % ("AB"[i], n.log_tail(1500))
            log("FAILED: round %d %s: %s" % (r, v, str(e)[-800:]))
            self.res["rows"].append(row)
            self.save()
            raise
        row["wall_s"] = round(time.monotonic() - t0, 2)
        self.res["rows"].append(row)
        self.save()

    def run(self):
        a = self.a
        if a.writes == "commit":
            self.commit_tool = os.path.join(os.path.abspath(a.build), "tests", "tools", "nasgw-nfs-commit")
            if not os.path.isfile(self.commit_tool):
                raise RuntimeError("%s is not built" % self.commit_tool)
        else:
            self.fio = a.fio or sh(["bash", BUILD_FIO], timeout=1800).stdout.strip().splitlines()[-1]
            self.res["fio"] = sh([self.fio, "--version"]).stdout.strip()
        g = sh(["git", "-C", ROOT, "describe", "--always", "--dirty"], check=False)
        self.res["git"] = g.stdout.strip() if g.returncode == 0 else None
        self.res["started"] = time.strftime("%Y-%m-%d %H:%M:%S")
        t0 = time.monotonic()
        self.setup()
        self.res["setup_s"] = round(time.monotonic() - t0, 2)
        self.res["layout_s"] = round(self.layout(), 2)
        log("lab up in %.0f s, %d files of %s MiB laid out in %.0f s; A: %s" % (
            self.res["setup_s"], a.clients, a.file_mib, self.res["layout_s"], mirror(self.A)["mirror"]))
        for r in range(1, a.runs + 1):
            k = (r - 1) % len(VARIANTS)
            for v in VARIANTS[k:] + VARIANTS[:k]:
                self.variant(r, v)
        self.res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        self.res["wall_s"] = round(time.monotonic() - t0, 1)
        self.res["medians"], self.res["ratios"] = medians(self.res["rows"])
        self.save()


def ratio(x, y):
    return x / y if x is not None and y else None


def medians(rows):
    good = [x for x in rows if "error" not in x and x.get("state_kept")]
    med = {}
    for v in VARIANTS:
        rs = [x for x in good if x["variant"] == v]
        if not rs:
            continue
        m = {"runs": len(rs), "write_latency": rs[0].get("write_latency"), "read_latency": rs[0].get("read_latency")}
        for x in rs:
            for k, c in (x.get("cpu_cores") or {}).items():
                x["cpu_" + k] = c
        for key in MEDIAN_KEYS + ("cpu_machine_busy", "cpu_nasgwd_a", "cpu_nasgwd_b", "cpu_ganesha_a"):
            vals = [x[key] for x in rs if isinstance(x.get(key), (int, float))]
            if vals:
                m[key] = statistics.median(vals)
                if key in ("write_iops", "write_p50_us"):
                    m[key + "_min"], m[key + "_max"] = min(vals), max(vals)
        med[v] = m
    ratios = {}
    for top, base in (("healthy", "single"), ("healthy", "degraded"), ("healthy", "inplace"), ("single", "inplace")):
        h, b = med.get(top), med.get(base)
        if not h or not b:
            continue
        per_round = {"write_iops": [], "write_p50_us": [], "iops": []}
        by_run = {x["run"]: x for x in good if x["variant"] == base}
        for x in good:
            if x["variant"] == top and x["run"] in by_run:
                for key in per_round:
                    rr = ratio(x.get(key), by_run[x["run"]].get(key))
                    if rr is not None:
                        per_round[key].append(rr)
        ratios[top + "/" + base] = {
            "write_iops": ratio(h.get("write_iops"), b.get("write_iops")),
            "write_p50_us": ratio(h.get("write_p50_us"), b.get("write_p50_us")),
            "iops": ratio(h.get("iops"), b.get("iops")),
            "per_round_median": {k: statistics.median(v) if v else None for k, v in per_round.items()},
            "per_round": per_round,
        }
    return med, ratios


def table(res):
    cfg = res["config"]
    med = res.get("medians", {})
    if cfg["writes"] == "commit":
        return commit_table(res)
    lines = ["8K random 70/30 over NFSv3 (fio nfs engine; %s), %d jobs x %s MiB, iodepth %d, "
             "%s s per variant, medians of %d rounds" % (
                 "every WRITE answered FILE_SYNC: FSAL_NASGW NFSv3_Unstable = false" if cfg["writes"] == "file_sync"
                 else "UNSTABLE WRITEs answered from nasgwd's cache", cfg["clients"], cfg["file_mib"], cfg["iodepth"],
                 cfg["seconds"], cfg["runs"]),
             "%-9s %4s %9s %9s %13s %13s %13s %13s %11s" % (
                 "variant", "runs", "IOPS", "write IOPS", "write p50 us", "write p99 us", "read p50 us",
                 "read p99 us", "SAN out MB")]
    for v in VARIANTS:
        m = med.get(v)
        if not m:
            lines.append("%-9s    0  (no good run)" % v)
            continue
        lines.append("%-9s %4d %9.0f %10.0f %13.0f %13.0f %13.0f %13.0f %11.0f" % (
            v, m["runs"], m.get("iops", 0), m.get("write_iops", 0), m.get("write_p50_us", 0),
            m.get("write_p99_us", 0), m.get("read_p50_us", 0), m.get("read_p99_us", 0), m.get("san_tx_mb", 0)))
    lines.append("CPU cores busy during the measurement (medians; this machine has %d): " % os.cpu_count() + "; ".join(
        "%s: machine %s, nasgwd A %s, B %s, ganesha A %s" % (
            v, fmt(med[v].get("cpu_machine_busy")), fmt(med[v].get("cpu_nasgwd_a")), fmt(med[v].get("cpu_nasgwd_b")),
            fmt(med[v].get("cpu_ganesha_a"))) for v in VARIANTS if v in med))
    lines.append("A's writes during the measurement (medians): " + "; ".join(
        "%s: logged %s, put in place %s (of which the log slow %s), mirror acks %s" % (
            v, num(med[v].get("writes_logged")), num(med[v].get("writes_stable_in_place")),
            num(med[v].get("writes_log_slow")), num(med[v].get("mirror_acks"))) for v in VARIANTS if v in med))
    lines += ratio_lines(res, "write IOPS", "write p50", total=True)
    lines += left_out(res)
    lat = med.get("healthy", {}).get("write_latency")
    lines.append("IOPS: all jobs' I/O over the span from the first job's start to the last one's end (write IOPS: "
                 "that times fio's write share); latencies: fio's %s percentiles; SAN out: MB A sent to the "
                 "array during the measurement." % (lat or "?"))
    return "\n".join(lines)


def ratio_lines(res, rate, p50, total=False):
    """The table's lines of ratios between variants (medians, and the median
    of the per-round ratios)."""
    out = []
    for k, r in res.get("ratios", {}).items():
        pr = r["per_round_median"]
        out.append("%-17s %s x%s (per-round median x%s), %s x%s (x%s)%s" % (
            k, rate, fmt(r["write_iops"]), fmt(pr["write_iops"]), p50, fmt(r["write_p50_us"]),
            fmt(pr["write_p50_us"]), ", total IOPS x%s" % fmt(r["iops"]) if total else ""))
    return out


def left_out(res):
    """The table's line naming the rows left out of the medians, if any."""
    bad = [x for x in res["rows"] if "error" in x or not x.get("state_kept")]
    if not bad:
        return []
    return ["left out: %s" % ", ".join("round %d %s (%s)" % (x["run"], x["variant"], "error" if "error" in x
                                                            else "state changed") for x in bad)]


def commit_table(res):
    cfg = res["config"]
    med = res.get("medians", {})
    lines = ["8 KiB UNSTABLE WRITE + COMMIT rounds over NFSv3 (nasgw-nfs-commit), %d clients x %s MiB files, one "
             "round at a time each, %s s per variant, medians of %d rounds" % (
                 cfg["clients"], cfg["file_mib"], cfg["seconds"], cfg["runs"]),
             "%-9s %4s %9s %13s %13s %13s %13s %11s %9s %9s" % (
                 "variant", "runs", "rounds/s", "round p50 us", "round p99 us", "COMMIT p50", "COMMIT p99",
                 "SAN out MB", "logged", "flushed")]
    for v in VARIANTS:
        m = med.get(v)
        if not m:
            lines.append("%-9s    0  (no good run)" % v)
            continue
        lines.append("%-9s %4d %9.0f %13.0f %13.0f %13.0f %13.0f %11.0f %9s %9s" % (
            v, m["runs"], m.get("iops", 0), m.get("write_p50_us", 0), m.get("write_p99_us", 0),
            m.get("commit_p50_us", 0), m.get("commit_p99_us", 0), m.get("san_tx_mb", 0),
            num(m.get("commits_logged")), num(m.get("commits_flushed"))))
    lines += ratio_lines(res, "rounds/s", "round p50")
    lines += left_out(res)
    lines.append("logged / flushed: A's COMMITs answered once the data was logged (by the partner's memory when "
                 "healthy) / once it was in place (nasgw_cache_commits_total).")
    return "\n".join(lines)


def num(x):
    return "%.0f" % x if isinstance(x, (int, float)) else "-"


def fmt(x):
    return "%.2f" % x if x is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"),
                    help="build dir with daemon/nasgwd, cli/nasgw, fsal/ganesha/libfsalnasgw.so")
    ap.add_argument("--runs", type=int, default=5, help="rounds of the three variants")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per variant (default 20)")
    ap.add_argument("--ramp", type=float, default=None, help="fio ramp_time before each (default 2)")
    ap.add_argument("--clients", type=int, default=4, help="fio jobs, each its own file and NFS connection")
    ap.add_argument("--iodepth", type=int, default=4, help="I/Os in flight per job")
    ap.add_argument("--file-mib", type=float, default=None, help="each job's file (default 64; --smoke 16)")
    ap.add_argument("--quiesce-max", type=float, default=120,
                    help="before each measurement, wait at most this long for A's SAN link to go quiet")
    ap.add_argument("--writes", choices=("file_sync", "unstable", "commit"), default="file_sync",
                    help="file_sync (default): FSAL_NASGW's NFSv3_Unstable = false, every WRITE of fio's nfs "
                    "engine answered FILE_SYNC (logged, what the mirror acknowledges); unstable: ganesha's "
                    "stock FSAL config, fio's UNSTABLE WRITEs answered from nasgwd's cache; commit: the stock "
                    "config, nasgw-nfs-commit's 8 KiB UNSTABLE WRITE + COMMIT rounds instead of fio "
                    "(--file-mib default 4)")
    ap.add_argument("--fio", help="fio with the nfs engine (default: deploy/build-fio.sh)")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--smoke", action="store_true", help="check the harness: 1 round, 3 s per variant")
    a = ap.parse_args()
    if a.writes == "commit":
        global VARIANTS
        VARIANTS = COMMIT_VARIANTS
    if a.smoke:
        a.runs = 1
        a.seconds = a.seconds or 3
        a.ramp = 1 if a.ramp is None else a.ramp
        a.file_mib = a.file_mib or 16
    a.seconds = a.seconds or 20
    a.ramp = 2 if a.ramp is None else a.ramp
    a.file_mib = a.file_mib or (4 if a.writes == "commit" else 64)
    if os.geteuid() != 0:
        print("pair_bench: must run as root (namespaces, tgtd, ganesha)", file=sys.stderr)
        return 2
    build = os.path.abspath(a.build)
    need = [os.path.join(build, p) for p in ("daemon/nasgwd", "cli/nasgw", "fsal/ganesha/libfsalnasgw.so")]
    missing = [p for p in need if not os.path.isfile(p)]
    if missing:
        log("FAILED: not built: %s" % ", ".join(missing))
        return 1
    t0 = time.monotonic()
    lab = Lab(build, nfs=True)
    b = None
    ok = False
    try:
        b = PairBench(a, lab)
        b.res["build"] = build
        b.run()
        ok = True
    except Exception as e:
        log("FAILED: %s" % str(e)[-1500:])
        if b is not None:
            b.res["error"] = str(e)[-3000:]
            b.res["medians"], b.res["ratios"] = medians(b.res["rows"])
            b.save()
    finally:
        lab.close()
        if b is not None:
            b.close()
    if b is not None:
        log(table(b.res))
    log("wall time %.0f s%s" % (time.monotonic() - t0, "; JSON: %s" % a.out if a.out else ""))
    if not ok:
        return 1
    bad = problems(b.res)
    for x in bad:
        log("FAILED: %s" % x)
    return 1 if bad else 0


def problems(res):
    """What says the run did not measure what it meant to."""
    out = []
    for x in res["rows"]:
        what = "round %d %s" % (x["run"], x["variant"])
        if "error" in x:
            out.append("%s: error" % what)
            continue
        if not x.get("state_kept"):
            out.append("%s: the pair's state changed during the measurement: %s" % (what, x.get("after")))
        acks = x.get("mirror_acks")
        if acks is None:
            out.append("%s: no metrics from A" % what)
        elif x["variant"] == "healthy" and res["config"]["writes"] == "file_sync" and not acks:
            out.append("%s: the mirror acknowledged nothing" % what)
        elif x["variant"] != "healthy" and acks:
            out.append("%s: the mirror acknowledged %d writes" % (what, acks))
        if res["config"]["writes"] == "file_sync" and not x.get("writes_logged"):
            out.append("%s: no write was logged (FILE_SYNC writes expected)" % what)
    if len(res.get("medians", {})) != len(VARIANTS):
        out.append("medians of %d variants only" % len(res.get("medians", {})))
    return out


if __name__ == "__main__":
    sys.exit(main())
