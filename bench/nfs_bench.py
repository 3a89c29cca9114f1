#!/usr/bin/env python3
"""NFS benchmark: file against block, the FS7500 paper's setting, in one run.

Targets, all on the same lab array (one tgtd, LUN files on the same disk):
  nasgw    NFS clients -> ganesha.nfsd with FSAL_NASGW -> nasgwd on LUNs 1-2
  vfs      NFS clients -> Debian's ganesha.nfsd with FSAL_VFS -> XFS on a loop
           device whose sparse backing file sits beside the LUN files (the
           local-disk peer; it does not cross the array link)
  san-vfs  NFS clients -> the same stock FSAL_VFS -> XFS on a loop device
           over LUN 4 of the same array, which nasgw-lun-fuse (in the
           controller namespace, over the project's block layer) exposes as
           one file: a Linux NAS head on the same SAN, through the same
           (shaped) array link as nasgw
  block    fio's libiscsi engine straight on LUN 3, each client its own LBA
           region (the SAN a block client would see)
Workloads: the FS7500 file workload scaled to this machine: per client a
directory tree three wide and two deep with 16 files in each leaf, 8K random
I/O 70% reads; plus 256K sequential read and 64K sequential write; and a
metadata workload (meta: per client, create, stat and remove --meta-files
empty files in its own tree, tests/tools/nasgw-nfs-meta). Clients are
stepped (1, 2, 4, 8, 16); a client is one fio job with its own file set (its
own NFS connection) or its own LBA region. Two settings of the array link:
unlimited, and rate-limited with sanlab's tbf so that the array is
spindle-bound (see --rate). Targets run interleaved within every step,
--runs times; medians are reported. Every step reports p50/p99 latency and
the bytes that crossed the array link per client byte. Output: a table, JSON
(--out) and a PNG chart (--chart).

  python3 bench/nfs_bench.py --build build/release --out nfs.json
  python3 bench/nfs_bench.py --quick --build build/debug     # smoke: 1 and 2 clients, a second each

--snapshots is another mode: the nasgw target alone, the 8K random 70/30
workload at one client count (--clients, default 4), unlimited link, in
--runs rounds (default 5) of three variants run interleaved (the first
rotating): `none` (no snapshot of the volume), `one` (one snapshot taken
after the layout, just before the measurement: every block the run
overwrites is shared with it) and `hundred` (--snap-keep, 100, snapshots
taken back to back before the run, and one every --snap-every, 3, s during
it by a thread calling the CLI, the oldest deleted beyond 100; --snap-pace
rate, the default: one due every 3 s, the next at once when a create, which
flushes the write-back cache, outlasts that; gap: 3 s of pause after each).
Before each variant the previous one's snapshots are deleted and the file
sets laid out again, so every variant starts from freshly written files,
and the array link is let go quiet. Reported per
variant: write IOPS and total IOPS, fio's write p50/p99 latency, and the
ratio of write IOPS to the same round's `none`; medians over the rounds.

  python3 bench/nfs_bench.py --snapshots --build build/release --out snap-nfs.json   # 11-13 min
  python3 bench/nfs_bench.py --snapshots --quick --build build/release               # smoke, under 1 min

Needs root, fio with the nfs and libiscsi engines (deploy/build-fio.sh, run
on demand), for the nasgw target <build>/fsal/ganesha/libfsalnasgw.so,
<build>/daemon/nasgwd and <build>/cli/nasgw, for san-vfs
<build>/bench/nasgw-lun-fuse, for meta <build>/tests/tools/nasgw-nfs-meta
(each skipped, with a SKIP line, if absent; --quick fails instead).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import nfslab  # noqa: E402
import nasgwlab  # noqa: E402
from nasgwlab import Node  # noqa: E402

SANLAB = os.path.join(ROOT, "tests", "lab", "sanlab")
BUILD_FIO = os.path.join(ROOT, "deploy", "build-fio.sh")

WORKLOADS = {
    # name: (fio rw, bs, rwmixread, NFS file service, label)
    "randrw": ("randrw", "8k", 70, "random", "8K random 70/30"),      # over the client's file tree
    "seqread": ("read", "256k", 100, None, "256K sequential read"),     # through the client's stream file
    "seqwrite": ("write", "64k", 0, None, "64K sequential write"),
}
META_PHASES = ("create", "stat", "remove")   # the meta workload (nasgw-nfs-meta), in order
ALL_WORKLOADS = tuple(WORKLOADS) + ("meta",)
TARGETS = ("nasgw", "vfs", "san-vfs", "block")
WIDTH, DEPTH, FILES_PER_LEAF = 3, 2, 16   # the FS7500 paper's Vdbench file set, per client
VOLUME = "bench"
PSEUDO = {"vfs": "/vfs", "nasgw": "/nasgw", "san-vfs": "/sanvfs"}
EXPORT_ID = {"vfs": 1, "nasgw": 2, "san-vfs": 3}
LUN_OF = {"block": 3, "san-vfs": 4}   # nasgw: LUNs 1-2
SAN_LUNS = 4
SANVFS_STATE = "/run/nasgw-bench/sanvfs.d"   # the same-SAN peer's pieces, for gc after a crash
# The array link is quiet when it moves less than this; after a step the
# harness waits for that (bounded by --quiesce-max) so that one target's
# write-back does not run into the next target's step.
QUIET_BYTES_PER_S = 1_000_000
MEDIAN_KEYS = ("iops", "mbps", "p50_us", "p99_us", "read_iops", "write_iops", "san_read_mb", "san_write_mb",
               "san_peak_read_mbps", "san_peak_write_mbps",
               "client_mb", "lan_mb", "san_window_read_mb", "san_window_write_mb", "san_per_client",
               "san_per_client_window", "drain_s", "drain_san_read_mb", "drain_san_write_mb")


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


# ---- the array link's byte counters -----------------------------------------------

class LinkCounters:
    """One side of a link: the bytes an interface sent and received, read
    from /proc/<pid>/net/dev of a process in its namespace (the array's eth0
    through tgtd: sent = reads, received = writes; the NFS server's lan0
    through ganesha), and a sampler that keeps
    (time, sent, received) every SAMPLE_S while a step runs, so the bytes of
    any window (fio's measured span, one phase of the meta workload) can be
    taken out afterwards."""
    SAMPLE_S = 0.1

    def __init__(self, tgtd_pid, dev="eth0"):
        self.path = "/proc/%d/net/dev" % tgtd_pid
        self.dev = dev
        self.samples = []
        self._stop = threading.Event()
        self._thread = None

    def read(self):
        with open(self.path) as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == self.dev:
                    v = rest.split()
                    return int(v[8]), int(v[0])   # tx (the array sent: reads), rx (writes)
        raise RuntimeError("no %s in %s" % (self.dev, self.path))

    def start(self):
        self.samples = [(time.time(),) + self.read()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        # A sampling period, not a wait for anything.
        while not self._stop.wait(self.SAMPLE_S):
            try:
                self.samples.append((time.time(),) + self.read())
            except (OSError, RuntimeError):
                return

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.samples.append((time.time(),) + self.read())

    def _at(self, t):
        s = self.samples
        if t <= s[0][0]:
            return s[0][1:]
        for a, b in zip(s, s[1:]):
            if a[0] <= t <= b[0]:
                f = (t - a[0]) / (b[0] - a[0]) if b[0] > a[0] else 1.0
                return tuple(x + f * (y - x) for x, y in zip(a[1:], b[1:]))
        return s[-1][1:]

    def window(self, t0, t1):
        """(bytes sent, bytes received) between Unix times t0 and t1,
        interpolated between samples."""
        a, b = self._at(t0), self._at(t1)
        return b[0] - a[0], b[1] - a[1]

    def peak(self, span=1.0):
        """The highest rate each way (bytes/s) over any `span` seconds of the
        samples (the whole sampling if shorter): a shaped link caps it."""
        s = self.samples
        best = [0.0, 0.0]
        j = 0
        for i in range(len(s)):
            while j < len(s) - 1 and s[j][0] - s[i][0] < span:
                j += 1
            dt = s[j][0] - s[i][0]
            if dt <= 0 or (dt < span and i > 0):
                break
            for k in (0, 1):
                best[k] = max(best[k], (s[j][k + 1] - s[i][k + 1]) / dt)
        return tuple(best)

    QUIET_INTERVAL_S = 0.25

    def wait_quiet(self, timeout):
        """Polls the counters until the link has moved less than
        QUIET_BYTES_PER_S over QUIET_INTERVAL_S (a write-back flush after the
        last step has ended), or `timeout` s. Returns (seconds waited,
        bytes sent, bytes received, quiet)."""
        t0 = time.monotonic()
        first = prev = self.read()
        while True:
            time.sleep(self.QUIET_INTERVAL_S)   # the measuring interval, not a wait for an event
            cur = self.read()
            quiet = (cur[0] - prev[0]) + (cur[1] - prev[1]) < QUIET_BYTES_PER_S * self.QUIET_INTERVAL_S
            if quiet or time.monotonic() - t0 > timeout:
                return time.monotonic() - t0, cur[0] - first[0], cur[1] - first[1], quiet
            prev = cur


# ---- the same-SAN peer: FSAL_VFS on XFS on a loop device on a FUSE file on a LUN ---

def _mounted(path):
    return path in nfslab.mounted_paths()


def _loop_backing(dev):
    try:
        with open("/sys/block/%s/loop/backing_file" % os.path.basename(dev)) as f:
            return f.read().strip()
    except OSError:
        return None


def _wait_until(cond, timeout):
    """Polls `cond` (a kernel state we cannot wait on: a loop device's
    detach, another process's exit) until true or `timeout` s; returns it."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return cond()
        time.sleep(0.05)
    return True


def sanvfs_teardown(st, log_fn=None):
    """Undoes what SanVfs.start made, in order: XFS, the loop device (only
    if still backed by our file), the FUSE mount, the FUSE process (by pid,
    checked against its start time). Keeps going past errors; returns them."""
    errors = []
    xfs, mnt, loop = st.get("xfs_mnt"), st.get("fuse_mnt"), st.get("loop")
    if xfs and _mounted(xfs):
        if nfslab.run(["umount", xfs], check=False).returncode != 0:
            errors.append("umount %s failed: lazily detached" % xfs)
            nfslab.run(["umount", "-l", xfs], check=False)
    lun_file = os.path.join(mnt, "lun") if mnt else None
    if loop and lun_file and _loop_backing(loop) == lun_file:
        p = nfslab.run(["losetup", "-d", loop], check=False)
        if p.returncode != 0:
            errors.append("losetup -d %s: %s" % (loop, p.stderr.strip()))
        # Detach completes when the last opener lets go.
        if not _wait_until(lambda: _loop_backing(loop) != lun_file, 30):
            errors.append("%s still backed by %s after 30 s" % (loop, lun_file))
    if mnt and _mounted(mnt):
        if nfslab.run(["fusermount3", "-u", mnt], check=False).returncode != 0:
            errors.append("fusermount3 -u %s failed: lazily detached" % mnt)
            nfslab.run(["umount", "-l", mnt], check=False)
    pid, start = st.get("fuse_pid"), st.get("fuse_start")
    if pid:
        # It ends by itself once its mount is gone; then SIGTERM, SIGKILL.
        if not _wait_until(lambda: not nfslab.alive(pid, start), 20):
            try:
                note = nfslab.stop_pid(pid, start, 10, "nasgw-lun-fuse")
                errors.append(note or "nasgw-lun-fuse pid %d outlived its mount: stopped" % pid)
            except nfslab.NfsLabError as e:
                errors.append(str(e))
        nfslab.reap(pid)
    if log_fn and errors:
        log_fn("san-vfs teardown: " + "; ".join(errors))
    return errors


def sanvfs_gc():
    """Tears down the same-SAN peers of runs that died (their NFS labs first,
    so ganesha, whose mount namespace holds the XFS mount, is gone)."""
    if not os.path.isdir(SANVFS_STATE):
        return []
    removed = []
    nfslab.gc()
    for n in sorted(os.listdir(SANVFS_STATE)):
        path = os.path.join(SANVFS_STATE, n)
        try:
            with open(path) as f:
                st = json.load(f)
        except (OSError, ValueError):
            os.remove(path)
            continue
        if nfslab.alive(st.get("owner_pid"), st.get("owner_start")):
            continue
        errs = sanvfs_teardown(st)
        os.remove(path)
        removed.append("san-vfs %s%s" % (n, (" (" + "; ".join(errs) + ")") if errs else ""))
    return removed


class SanVfs:
    """The same-SAN peer's storage, as a Linux NAS head on that SAN would
    have it: nasgw-lun-fuse in the controller's network namespace exposes
    one LUN of the lab array as a file (no cache in FUSE: direct_io), a loop
    device with direct I/O sits on that file (so the only cache is XFS's
    page cache, as on an iSCSI disk), XFS on the loop device. Its state is
    kept in SANVFS_STATE (and its mounts and loop device in the NFS lab's
    state) before each piece is made, so a crashed run's leftovers are
    cleaned by the next (sanvfs_gc, nfslab.gc)."""

    def __init__(self, lab, host_ns, url, lunfuse, name):
        self.lab, self.host_ns, self.url, self.lunfuse = lab, host_ns, url, lunfuse
        self.fuse_mnt = os.path.join(lab.dir, "sanvfs-lun")
        self.xfs_mnt = os.path.join(lab.dir, "sanvfs")
        self.lun_file = os.path.join(self.fuse_mnt, "lun")
        self.err_path = os.path.join(lab.dir, "lunfuse.err")
        self.state_path = os.path.join(SANVFS_STATE, name + ".json")
        me = os.getpid()
        self.st = {"owner_pid": me, "owner_start": nfslab.proc_start_time(me), "fuse_mnt": self.fuse_mnt,
                   "xfs_mnt": self.xfs_mnt, "fuse_pid": None, "fuse_start": None, "loop": None}
        self.proc = None
        self.dio = None
        self.stats = None

    def _save(self):
        os.makedirs(SANVFS_STATE, exist_ok=True)
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.st, f)
        os.replace(tmp, self.state_path)

    def _lab_record(self, key, value):
        self.lab.st[key].append(value)
        self.lab.save()

    def start(self):
        os.makedirs(self.fuse_mnt, exist_ok=True)
        os.makedirs(self.xfs_mnt, exist_ok=True)
        self._save()
        self._lab_record("mounts", self.fuse_mnt)
        err = open(self.err_path, "wb")
        # nsenter --net only: the FUSE mount stays in our mount namespace
        # (ip netns exec would make a new one and hide it); nsenter execs, so
        # the pid is the program's.
        self.proc = subprocess.Popen(
            ["nsenter", "--net=/run/netns/" + self.host_ns, "--", self.lunfuse, "--url", self.url,
             "--initiator", "iqn.2026-11.org.nasgw:nfsbench-sanvfs", self.fuse_mnt],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        err.close()
        self.st["fuse_pid"], self.st["fuse_start"] = self.proc.pid, nfslab.proc_start_time(self.proc.pid)
        self._save()
        # It prints "ready ..." once mounted (or exits): a blocking read with a
        # deadline enforced by killing it.
        timer = threading.Timer(60, lambda: self.proc.poll() is None and self.proc.kill())
        timer.start()
        try:
            line = self.proc.stdout.readline().decode(errors="replace")
        finally:
            timer.cancel()
        if not line.startswith("ready "):
            rc = self.proc.poll()
            raise RuntimeError("nasgw-lun-fuse did not mount %s (%s): %s" % (
                self.url, "exit %s" % rc if rc is not None else "no answer", self.err_tail()))
        # A loop device with direct I/O (the file is FUSE direct_io, so the
        # loop device's page cache would be the only cache otherwise).
        p = nfslab.run(["losetup", "--find", "--show", "--direct-io=on", self.lun_file], check=False)
        if p.returncode != 0:
            raise RuntimeError("losetup --direct-io=on over FUSE: %s" % p.stderr.strip())
        self.st["loop"] = p.stdout.strip()
        self._save()
        self._lab_record("loops", self.st["loop"])
        try:
            with open("/sys/block/%s/loop/dio" % os.path.basename(self.st["loop"])) as f:
                self.dio = f.read().strip() == "1"
        except OSError:
            self.dio = None
        nfslab.run(["mkfs.xfs", "-q", "-f", self.st["loop"]], timeout=600)
        self._lab_record("mounts", self.xfs_mnt)
        nfslab.run(["mount", self.st["loop"], self.xfs_mnt])
        return self.xfs_mnt

    def sync(self):
        """syncfs: every dirty page and the log out to the LUN."""
        nfslab.run(["sync", "-f", self.xfs_mnt], timeout=1800)

    def err_tail(self, n=1500):
        try:
            with open(self.err_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        """After ganesha and rpcbind are gone (their mount namespace holds
        the XFS mount). Returns the teardown's errors; self.stats gets the
        program's own I/O counts."""
        errors = sanvfs_teardown(self.st)
        if self.proc:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            if self.proc.stdout:
                self.proc.stdout.close()
        for line in reversed(self.err_tail(4000).splitlines()):
            if line.startswith("{"):
                try:
                    self.stats = json.loads(line)
                    self.stats["exit"] = self.proc.returncode if self.proc else None
                except ValueError:
                    pass
                break
        # What is gone leaves the NFS lab's list (a loop device number may be
        # someone else's by the time the lab closes); what is not stays for it.
        loop = self.st.get("loop")
        for key, v, gone in (("mounts", self.xfs_mnt, not _mounted(self.xfs_mnt)),
                             ("mounts", self.fuse_mnt, not _mounted(self.fuse_mnt)),
                             ("loops", loop, loop and _loop_backing(loop) != self.lun_file)):
            if gone and v in self.lab.st.get(key, []):
                self.lab.st[key].remove(v)
        self.lab.save()
        if not errors:
            try:
                os.remove(self.state_path)
            except FileNotFoundError:
                pass
        return errors


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
    return {"iops": ios / ((max(ends) - min(starts)) / 1000.0), "ios": ios,
            "t0": min(starts) / 1000.0, "t1": max(ends) / 1000.0,   # Unix times (log_unix_epoch)
            "start_skew_s": (max(starts) - min(starts)) / 1000.0,
            "overlap_s": max(0, min(ends) - max(starts)) / 1000.0}


def write_json(path, obj):
    """`obj` as JSON at `path` (nothing when it is empty), replaced whole."""
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1)
        os.replace(tmp, path)


def concurrent_window(logs, njobs):
    """concurrent_iops over the jobs' iops logs at `logs`, the logs then
    removed; a RuntimeError when fio wrote none."""
    w = concurrent_iops(logs, njobs)
    for k in range(1, njobs + 1):
        try:
            os.remove("%s_iops.%d.log" % (logs, k))
        except OSError:
            pass
    if w is None:
        raise RuntimeError("fio wrote no iops samples")
    return w


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
        # Per direction (--snapshots reports writes): completion latency
        # (clat, submission to completion) where fio gave its percentiles,
        # else the total latency's.
        **{k % d: v for d in ("read", "write") for k, v in dir_percentiles(job[d]).items()},
    }


def dir_percentiles(d):
    """p50/p99 (us) of one direction of a fio job, and which latency they
    are of (clat or lat)."""
    for kind in ("clat_ns", "lat_ns"):
        pct = d.get(kind, {}).get("percentile")
        if pct:
            return {"%s_p50_us": pct.get("50.000000", 0) / 1000.0, "%s_p99_us": pct.get("99.000000", 0) / 1000.0,
                    "%s_latency": kind[:-3]}
    return {}


class Bench:
    def __init__(self, a):
        self.a = a
        self.fio = None
        self.node = None
        self.res = {"config": {k: v for k, v in vars(a).items()}, "settings": []}

    # ---- one link setting
    def setting(self, name, rate):
        a = self.a
        pid = os.getpid()
        out = {"name": name, "rate": rate, "targets": {}, "runs": [], "medians": {}}
        self.res["settings"].append(out)
        lab_name = "nfsb%d%s" % (pid, "r" if rate else "u")
        self.rate = rate
        # LUNs 1-2: nasgw's reserve, 3: block, 4: san-vfs (thin: made whatever is measured).
        start = [SANLAB, "start", lab_name, "--mode", "netns", "--luns", str(SAN_LUNS), "--size", a.lun_size,
                 "--owner-pid", str(pid)]
        if rate:
            start += ["--rate", rate]
        san = json.loads(sh(start).stdout)
        node = lab = None
        self.sanvfs = None
        self.peer_dirs = {}
        try:
            host = san["ns_host"]
            lab = nfslab.Lab(name=lab_name, clients=1, server_ns=host)
            self.lab, self.host, self.san = lab, host, san
            self.counters = LinkCounters(san["tgtd_pid"])
            targets = [t for t in a.targets if t != "block"]
            exports, plugins, socket = [], {}, None
            if "vfs" in targets:
                xfs = lab.make_xfs(a.xfs_size)
                os.makedirs(os.path.join(xfs, "export"))
                exports.append(nfslab.vfs_export(EXPORT_ID["vfs"], os.path.join(xfs, "export"), PSEUDO["vfs"]))
                self.peer_dirs["vfs"] = os.path.join(xfs, "export")
                out["targets"]["vfs"] = {"path": "FSAL_VFS on XFS on loop (%s)" % xfs}
            if "san-vfs" in targets:
                # Before ganesha starts: its mount namespace is a copy of ours
                # taken then (mounts do not propagate into it later).
                url = san["luns"][LUN_OF["san-vfs"] - 1]["url"]
                out["targets"]["san-vfs"] = {"path": "FSAL_VFS on XFS on loop on nasgw-lun-fuse on %s" % url}
                try:
                    self.sanvfs = SanVfs(lab, host, url, self.bins["lunfuse"], lab_name)
                    xfs = self.sanvfs.start()
                    os.makedirs(os.path.join(xfs, "export"))
                    self.peer_dirs["san-vfs"] = os.path.join(xfs, "export")
                    exports.append(nfslab.vfs_export(EXPORT_ID["san-vfs"], os.path.join(xfs, "export"),
                                                     PSEUDO["san-vfs"]))
                    out["targets"]["san-vfs"]["path"] = "FSAL_VFS on XFS on loop (direct I/O %s) on nasgw-lun-fuse " \
                        "on %s" % ({True: "on", False: "OFF"}.get(self.sanvfs.dio, "?"), url)
                    out["targets"]["san-vfs"]["loop_dio"] = self.sanvfs.dio
                except Exception as e:
                    log("FAILED: [%s] target san-vfs: %s" % (name, str(e)[-1500:]))
                    out["targets"]["san-vfs"]["error"] = "setup: %s" % str(e)[-3000:]
                    targets.remove("san-vfs")
            if "nasgw" in targets:
                # nasgwd in the controller namespace, where the array is.
                node = Node({"nasgwd": self.bins["nasgwd"], "cli": self.bins["cli"]},
                            urls=[l["url"] for l in san["luns"][:2]], tag="nfsbench", netns=host, metrics=True)
                node.start(nasgw_config(a))
                self.node = node
                node.cli("reserve", "format", "--name", "bench", "--ag-size", a.ag_size, "--force")
                create = ["volume", "create", VOLUME]
                if a.record_kib:
                    create += ["--record-size", "%dK" % a.record_kib]
                node.cli(*create)
                exports.append(nfslab.nasgw_export(EXPORT_ID["nasgw"], VOLUME, PSEUDO["nasgw"]))
                plugins["nasgw"], socket = self.bins["fsal"], node.head_socket
                out["targets"]["nasgw"] = {"path": "FSAL_NASGW -> nasgwd (volume %s)" % VOLUME,
                                           "config": nasgw_config(a)}
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
            # The NFS server's side of the LAN (ganesha lives in the controller
            # namespace): what the clients moved, headers included.
            self.lan = LinkCounters(lab.server.pid, dev="lan0") if lab.server and lab.server.pid else None
            if "block" in a.targets:
                out["targets"]["block"] = {"path": "fio libiscsi on %s" % san["luns"][LUN_OF["block"] - 1]["url"]}
                targets.append("block")
            for t in list(targets):
                t0 = time.monotonic()
                try:
                    san0 = self.san_bytes()
                    laid = self.layout(t)
                    layout_s = time.monotonic() - t0
                    drain = self.drain(t)
                    san1 = self.san_bytes()
                    info = out["targets"][t]
                    info["layout_s"] = round(layout_s, 1)
                    # What laying out cost on the array link, write-back flushed.
                    info["layout_client_mb"] = laid / 1e6
                    info["layout_san_read_mb"] = (san1[0] - san0[0]) / 1e6
                    info["layout_san_write_mb"] = (san1[1] - san0[1]) / 1e6
                    info["layout_drain_s"] = round(drain["drain_s"], 1)
                    if laid:
                        log("[%s] %s: laid out %d clients x %d files x %s MiB in %.1f s (then %.1f s until the array "
                            "link was quiet); client %.0f MB, array link %.0f/%.0f MB r/w" % (
                                name, t, max(a.clients), files_per_client(), a.file_mib, layout_s, drain["drain_s"],
                                laid / 1e6, info["layout_san_read_mb"], info["layout_san_write_mb"]))
                except Exception as e:
                    log("FAILED: [%s] target %s: layout: %s" % (name, t, str(e)[-1500:]))
                    out["targets"][t]["error"] = "layout: %s" % str(e)[-3000:]
                    targets.remove(t)
            out["measured"] = list(targets)
            if a.snapshots:
                self.snap_matrix(out, targets)
            else:
                self.matrix(out, targets)
        finally:
            errors = []
            sanvfs = self.sanvfs

            def stop_sanvfs():
                if sanvfs:
                    errs = sanvfs.stop()
                    if sanvfs.stats is not None and "san-vfs" in out["targets"]:
                        out["targets"]["san-vfs"]["lun_fuse"] = sanvfs.stats
                        if sanvfs.stats.get("errors"):
                            out["targets"]["san-vfs"]["error"] = "nasgw-lun-fuse: %d I/O errors" % \
                                sanvfs.stats["errors"]
                    if errs:
                        raise RuntimeError("; ".join(errs))

            # ganesha and rpcbind first: their mount namespace holds the XFS
            # mounts; then the same-SAN peer's stack, top down.
            for what, fn in (("ganesha", lambda: lab and lab.server and lab.server.stop()),
                             ("san-vfs", stop_sanvfs),
                             ("nasgwd", lambda: node and node.close()),
                             ("nfslab", lambda: lab and lab.close()),
                             ("sanlab", lambda: sh([SANLAB, "stop", lab_name], check=False))):
                try:
                    fn()
                except Exception as e:  # keep tearing down
                    errors.append("%s: %s" % (what, e))
            self.sanvfs = None
            if errors:
                log("teardown: " + "; ".join(errors))
                out["teardown_errors"] = errors

    def drop_cache(self, t):
        """--cold-peers: the peer's file data out of the page cache (synced
        first), so its reads go to its disk, as for a working set larger
        than the head's memory. Only its own files: POSIX_FADV_DONTNEED on
        each, no global drop_caches."""
        root = self.peer_dirs[t]
        nfslab.run(["sync", "-f", root], timeout=1800)
        for d, _, names in os.walk(root):
            for nm in names:
                fd = os.open(os.path.join(d, nm), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)

    def drain(self, t):
        """After a step or a layout: the same-SAN peer writes its dirty pages
        and log out (syncfs), then the array link must go quiet (any
        target's write-back), so the next step starts on an idle link.
        Returns what that took: seconds, MB each way."""
        t0 = time.monotonic()
        san0 = self.counters.read()
        if t == "san-vfs" and self.sanvfs:
            self.sanvfs.sync()
        waited, _, _, quiet = self.counters.wait_quiet(self.a.quiesce_max)
        san1 = self.counters.read()
        return {"drain_s": time.monotonic() - t0, "drain_san_read_mb": (san1[0] - san0[0]) / 1e6,
                "drain_san_write_mb": (san1[1] - san0[1]) / 1e6, "drain_quiet": quiet}

    def san_bytes(self):
        """Bytes the array has sent and received on its link so far."""
        return self.counters.read()

    # ---- targets
    def nfs_global(self, t):
        return {"ioengine": "nfs", "nfs_url": "nfs://%s%s" % (self.lab.server_addr, PSEUDO[t]),
                "filesize": "%dk" % int(self.a.file_mib * 1024)}

    def block_global(self):
        url = self.san["luns"][LUN_OF["block"] - 1]["url"].replace(":", "\\:")   # fio splits file names on ':'
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
            w = concurrent_window(logs, len(jobs))
            bs = nfslab.parse_size(glob["bs"])
            res["iops_fio"], res["mbps_fio"] = res["iops"], res["mbps"]
            res["iops"], res["mbps"] = w["iops"], w["iops"] * bs / 1e6
            res["window"] = (w["t0"], w["t1"])
            res["window_s"] = w["t1"] - w["t0"]
            res["client_mb"] = w["ios"] * bs / 1e6
            res["start_skew_s"], res["overlap_s"] = w["start_skew_s"], w["overlap_s"]
            # Less than half the run with every client going: the step did not
            # measure N concurrent clients; said so in the output.
            res["overlap_short"] = w["overlap_s"] < 0.5 * float(glob["runtime"])
        return res

    def layout(self, t):
        """Every client's file set (or LBA region) written once, sequentially:
        the nfs engine creates files only on pure-write jobs and drops queued
        writes at close, hence iodepth 1 there. Returns the bytes written.
        (The meta workload makes its own trees.)"""
        n = max(self.a.clients)
        fio_wls = [w for w in self.a.workloads if w in WORKLOADS]
        if not fio_wls:
            return 0
        if t == "block":
            glob = dict(self.block_global(), rw="write", bs="1m", iodepth=8, group_reporting=1)
            self.run_fio(t, glob, [("c%d" % i, self.block_job(i)) for i in range(1, n + 1)], "layout-block", 3600)
            return n * self.region()
        dirs = [d for i in range(1, n + 1) for d in leaf_dirs(i)]
        self.lab.client(1).nfsrs("for d in ARGS['dirs']:\n    client.mkdir(d, parents=True, exist_ok=True)",
                                 PSEUDO[t].lstrip("/"), version="3", args={"dirs": dirs}, timeout=600)
        glob = dict(self.nfs_global(t), rw="write", bs="256k", iodepth=1, file_service_type="sequential",
                    group_reporting=1)
        jobs = []
        if "randrw" in fio_wls:
            jobs += [("c%d" % i, {"filename": ":".join(client_files(i))}) for i in range(1, n + 1)]
        if set(fio_wls) & {"seqread", "seqwrite"}:
            jobs += [("s%d" % i, {"filename": client_stream(i), "filesize": self.region()}) for i in range(1, n + 1)]
        self.run_fio(t, glob, jobs, "layout-" + t, 3600)
        return len(jobs) * self.region()

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
        # Plus, behind a shaped link, the time to flush the clients' whole data
        # set through it: a write-back peer's dirty pages go out when fio
        # closes the files (COMMIT), after the measured time.
        limit = a.seconds + a.ramp + 120
        if self.rate and t != "block" and rw != "read":
            limit += n * self.region() / rate_bytes_per_s(self.rate)
        return self.run_fio(t, glob, jobs, "%s-%s-%d" % (t, wl, n), limit, window=True)

    def measure_meta(self, t, n, tag):
        """The metadata workload: n clients (threads with their own
        connections, in client 1's namespace like fio's jobs), each in its
        own tree under a directory of this step, --iodepth requests in
        flight. Per phase: ops/s over all clients, latency, and the array
        link's bytes during the phase."""
        a = self.a
        url = "nfs://%s%s" % (self.lab.server_addr, PSEUDO[t])
        cmd = [self.bins["meta"], "--url", url, "--dir", tag, "--clients", str(n), "--files", str(a.meta_files),
               "--depth", str(a.iodepth), "--timeout-s", "60"]
        # Bounded: 30 ms an operation per client at worst, plus start-up.
        p = self.lab.client(1).run(cmd, check=False, timeout=120 + 3 * a.meta_files * 0.03)
        try:
            res = json.loads(p.stdout)
        except ValueError:
            res = None
        if p.returncode != 0 or res is None:
            raise RuntimeError("nasgw-nfs-meta exit %d: %s%s" % (p.returncode, p.stdout[-1000:], p.stderr[-1500:]))
        phases = {ph: dict(res["phases"][ph]) for ph in META_PHASES}
        return {"phases": phases, "files_per_client": a.meta_files,
                # The row's headline: the slowest phase's p99 (for the checks and the log).
                "p99_us": max(phases[ph]["p99_us"] for ph in META_PHASES)}

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
                        if wl == "meta" and t == "block":
                            continue   # no files on a raw LUN
                        row = {"target": t, "workload": wl, "clients": n, "run": r + 1}
                        try:
                            if a.cold_peers and t in ("vfs", "san-vfs"):
                                self.drop_cache(t)
                            san0, t0 = self.san_bytes(), time.monotonic()
                            lan0 = self.lan.read() if t != "block" else None
                            self.counters.start()
                            try:
                                if wl == "meta":
                                    row.update(self.measure_meta(t, n, "meta-%s-r%d-n%d" % (t.replace("-", ""),
                                                                                            r + 1, n)))
                                else:
                                    row.update(self.measure(t, wl, n))
                            finally:
                                self.counters.stop()
                            peak = self.counters.peak()
                            row["san_peak_read_mbps"], row["san_peak_write_mbps"] = peak[0] / 1e6, peak[1] / 1e6
                            san1, wall = self.san_bytes(), time.monotonic() - t0
                            lan1 = self.lan.read() if t != "block" else None
                            # What crossed the array link during the whole run (ramp and
                            # setup included): MB the array sent (reads) and received (writes).
                            row["wall_s"] = round(wall, 2)
                            row["san_read_mb"] = (san1[0] - san0[0]) / 1e6
                            row["san_write_mb"] = (san1[1] - san0[1]) / 1e6
                            if wl == "meta":
                                # ... and during each phase: SAN KB per operation.
                                for x in row["phases"].values():
                                    rd, wr = self.counters.window(x["start_unix"], x["end_unix"])
                                    x["san_read_mb"], x["san_write_mb"] = rd / 1e6, wr / 1e6
                                    x["san_kb_per_op"] = (rd + wr) / 1e3 / x["ops"] if x["ops"] else None
                            else:
                                # ... and during the measured span only, against the
                                # clients' bytes in that span: SAN bytes per client byte.
                                rd, wr = self.counters.window(*row.pop("window"))
                                row["san_window_read_mb"], row["san_window_write_mb"] = rd / 1e6, wr / 1e6
                                row["san_per_client_window"] = ((rd + wr) / 1e6 / row["client_mb"]
                                                                if row["client_mb"] > 0 else None)
                            # Write-back still going (the peer's dirty pages, later
                            # nasgw's cache) must not run into the next step.
                            row.update(self.drain(t))
                            self.san_per_client(row, lan0, lan1)
                            self.log_row(out, row)
                        except Exception as e:
                            row["error"] = str(e)[-3000:]
                            if t != "block" and self.lab.server:
                                srv = self.lab.server
                                up = srv.pid and nfslab.alive(srv.pid, srv.st.get("ganesha_start"))
                                row["error"] += "\n--- ganesha %s; log tail:\n%s" % (
                                    "running" if up else "NOT RUNNING", srv.log_tail(1500))
                            if t == "san-vfs" and self.sanvfs:
                                row["error"] += "\n--- nasgw-lun-fuse:\n%s" % self.sanvfs.err_tail(800)
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
                    if not rows:
                        continue
                    if wl == "meta":
                        flat = [dict({"%s_%s" % (ph, key): x["phases"][ph][key] for ph in META_PHASES
                                      for key in ("ops_per_s", "p50_us", "p99_us", "san_kb_per_op")},
                                     san_kb_per_op=x.get("san_kb_per_op"), drain_s=x.get("drain_s")) for x in rows]
                    else:
                        flat = rows
                    keys = sorted({key for x in flat for key in x if key in MEDIAN_KEYS or wl == "meta"})
                    m = {}
                    for key in keys:
                        vals = [x[key] for x in flat if isinstance(x.get(key), (int, float))]
                        m[key] = statistics.median(vals) if vals else None
                    m["runs"] = len(rows)
                    if wl != "meta":
                        m["overlap_short"] = sum(bool(x.get("overlap_short")) for x in rows)
                    out["medians"][t][wl][str(n)] = m
        self.save()

    @staticmethod
    def san_per_client(row, lan0, lan1):
        """SAN bytes per client byte. NFS targets: everything that crossed
        the array link from the run's start until the link was quiet after
        it (a write-back flush at the end of the run or after it included)
        over everything the clients moved on the LAN in the run (NFS payload
        and headers, counted at the server's interface). block: its clients
        are on the array link, so the measured span's SAN bytes over fio's
        bytes (~1 plus iSCSI's headers: a check of the accounting).
        meta: SAN KB per operation, the same way."""
        san = row["san_read_mb"] + row["san_write_mb"] + row["drain_san_read_mb"] + row["drain_san_write_mb"]
        if lan0 is not None:
            row["lan_mb"] = ((lan1[0] - lan0[0]) + (lan1[1] - lan0[1])) / 1e6
        if row["workload"] == "meta":
            ops = sum(x["ops"] for x in row["phases"].values())
            row["san_kb_per_op"] = san * 1e3 / ops if ops else None
        elif row["target"] == "block":
            row["san_per_client"] = row.get("san_per_client_window")
        else:
            row["san_per_client"] = san / row["lan_mb"] if row["lan_mb"] > 0 else None

    def log_row(self, out, row):
        head = "[%s] run %d %-8s %-7s %2d clients:" % (out["name"], row["run"], row["workload"], row["target"],
                                                      row["clients"])
        drain = ("  then %.1f s until the link was quiet (%.0f/%.0f MB r/w)%s" % (
            row["drain_s"], row["drain_san_read_mb"], row["drain_san_write_mb"],
            "" if row["drain_quiet"] else " NOT QUIET") if row["drain_s"] > 1 or not row["drain_quiet"] else "")
        if row["workload"] == "meta":
            log(head + "".join("  %s %6.0f/s p50 %6.0f us p99 %6.0f us SAN %s KB/op" % (
                ph, x["ops_per_s"], x["p50_us"], x["p99_us"],
                "%.1f" % x["san_kb_per_op"] if x["san_kb_per_op"] is not None else "-")
                for ph, x in row["phases"].items()) + drain)
            return
        log("%s %8.0f IOPS %8.1f MB/s p50 %8.0f us p99 %8.0f us  SAN %.0f/%.0f MB r/w, %s per client byte%s%s" % (
            head, row["iops"], row["mbps"], row["p50_us"], row["p99_us"], row["san_read_mb"], row["san_write_mb"],
            "%.2f" % row["san_per_client"] if row.get("san_per_client") is not None else "-",
            ("  clients started %.1f s apart, ran together %.1f s (fio alone: %.0f IOPS)"
             % (row["start_skew_s"], row["overlap_s"], row["iops_fio"])) if row.get("overlap_short") else "", drain))

    # ---- --snapshots: 8K random 70/30 with 0, 1 and ~100 snapshots of the volume
    def snap_list(self):
        return [x["name"] for x in self.node.cli("snapshot", "list", VOLUME, json_out=True).get("snapshots", [])]

    def snap_create(self, name):
        t0 = time.monotonic()
        self.node.cli("snapshot", "create", VOLUME, name)
        return time.monotonic() - t0

    def snap_delete(self, name):
        t0 = time.monotonic()
        self.node.cli("snapshot", "delete", VOLUME, name)
        return time.monotonic() - t0

    def snap_clear(self):
        """Deletes every snapshot of the volume (the previous variant's).
        Returns (how many, seconds)."""
        t0 = time.monotonic()
        names = self.snap_list()
        for nm in names:
            self.snap_delete(nm)
        left = self.snap_list()
        if left:
            raise RuntimeError("snapshots left after deleting them all: %s" % left[:5])
        return len(names), time.monotonic() - t0

    def snap_matrix(self, out, targets):
        """Rounds of the three variants, interleaved (the first rotating each
        round), on the nasgw target, the randrw workload, one client count.
        Before every variant: the previous one's snapshots deleted, the file
        sets laid out again (the first variant of the run uses the setup's
        layout), the array link quiet. Then the variant's snapshots: none;
        one (taken now, so every block the run overwrites is shared with it);
        or --snap-keep made back to back, plus one every --snap-every s during
        the measurement, the oldest deleted beyond --snap-keep."""
        a = self.a
        if targets != ["nasgw"]:
            raise RuntimeError("--snapshots measures the nasgw target only; it did not start (%s)" %
                               out["targets"].get("nasgw", {}).get("error", "?"))
        n = a.clients[0]
        out["snap_variants"] = list(SNAP_VARIANTS)
        first = True
        for r in range(a.runs):
            order = SNAP_VARIANTS[r % 3:] + SNAP_VARIANTS[:r % 3]
            for v in order:
                row = {"target": "nasgw", "workload": "randrw", "clients": n, "run": r + 1, "variant": v}
                try:
                    row["cleared_snapshots"], row["clear_s"] = self.snap_clear()
                    if not first:
                        t0 = time.monotonic()
                        self.layout("nasgw")
                        row["relayout_s"] = round(time.monotonic() - t0, 2)
                    first = False
                    row["pre_drain"] = self.drain("nasgw")
                    creates = []
                    if v == "one":
                        creates.append(self.snap_create("one-r%d" % (r + 1)))
                    elif v == "hundred":
                        for i in range(a.snap_keep):
                            creates.append(self.snap_create("pre-r%d-%03d" % (r + 1, i)))
                    row["pre_snapshots"] = len(self.snap_list())
                    row["pre_create_ms"] = sorted(1000 * x for x in creates)
                    ticker = SnapTicker(self, "tick-r%d" % (r + 1), a.snap_every, a.snap_keep, self.snap_list(),
                                        a.snap_pace) if v == "hundred" else None
                    perf = None
                    if a.perf and r == 0:
                        perf = self.perf_start(v)
                    san0 = self.san_bytes()
                    self.counters.start()
                    if ticker:
                        ticker.start()
                    try:
                        row.update(self.measure("nasgw", "randrw", n))
                    finally:
                        if ticker:
                            ticker.stop()
                        self.counters.stop()
                        if perf:
                            row["perf"] = self.perf_finish(perf)
                    san1 = self.san_bytes()
                    row.pop("window", None)
                    row["san_read_mb"] = (san1[0] - san0[0]) / 1e6
                    row["san_write_mb"] = (san1[1] - san0[1]) / 1e6
                    # fio's write IOPS summed over jobs; the headline is the
                    # span's IOPS (as the other modes') times fio's write share.
                    row["write_iops_fio"] = row["write_iops"]
                    ios = row["read_ios"] + row["write_ios"]
                    row["write_iops"] = row["iops"] * row["write_ios"] / ios if ios else 0.0
                    if ticker:
                        row["ticks"] = ticker.events
                        row["tick_errors"] = ticker.errors
                        row["snapshots_taken"] = sum(1 for e in ticker.events if e["what"] == "create")
                        row["snapshots_deleted"] = sum(1 for e in ticker.events if e["what"] == "delete")
                    row["post_snapshots"] = len(self.snap_list())
                    row.update(self.drain("nasgw"))
                    self.snap_log_row(row)
                except Exception as e:
                    row["error"] = str(e)[-3000:]
                    if self.lab.server:
                        srv = self.lab.server
                        up = srv.pid and nfslab.alive(srv.pid, srv.st.get("ganesha_start"))
                        row["error"] += "\n--- ganesha %s; log tail:\n%s" % ("running" if up else "NOT RUNNING",
                                                                            srv.log_tail(1500))
                    if self.node:
                        row["error"] += "\n--- nasgwd log tail:\n%s" % self.node.log_tail(1500)
                    log("FAILED: run %d %s: %s" % (r + 1, v, str(e)[-800:]))
                out["runs"].append(row)
                self.save()
        try:
            out["final_cleared_snapshots"], _ = self.snap_clear()
        except Exception as e:
            out["final_clear_error"] = str(e)[-1000:]
        out["medians"] = snap_medians(out["runs"])
        self.save()

    def perf_start(self, variant):
        """perf record -g of nasgwd for --perf s from the measurement's start
        (--perf: profile round 1's variants; a separate run from the one whose
        figures are reported, perf costs CPU on this 2-core machine)."""
        base = os.path.splitext(self.a.out)[0] if self.a.out else os.path.join(self.lab.dir, "snap")
        data = "%s-perf-%s.data" % (base, variant)
        p = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-g", "-o", data, "-p", str(self.node.s["daemon_pid"]), "--",
                              "sleep", str(self.a.perf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        return p, data

    def perf_finish(self, perf):
        p, data = perf
        try:
            _, err = p.communicate(timeout=self.a.perf + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        tops = {}
        for kind in ("self", "children"):
            rep = sh(["perf", "report", "--stdio", "--no-children" if kind == "self" else "--children", "-g", "none",
                      "--percent-limit", "0.7", "-i", data], check=False, timeout=600)
            tops[kind] = [ln for ln in rep.stdout.splitlines() if ln.strip() and not ln.startswith("#")][:40]
        log("perf (%s), self:\n%s" % (data, "\n".join(tops["self"][:25])))
        return {"data": data, "exit": p.returncode, "stderr": err[-500:], "top": tops["self"],
                "top_children": tops["children"]}

    def snap_log_row(self, row):
        extra = ""
        if row["variant"] == "hundred":
            c = [e["ms"] for e in row["ticks"] if e["what"] == "create"]
            extra = "  %d snapshots taken during it (create p50 %.0f ms, max %.0f ms), %d deleted%s" % (
                row["snapshots_taken"], statistics.median(c) if c else 0, max(c) if c else 0,
                row["snapshots_deleted"], ", %d errors" % len(row["tick_errors"]) if row["tick_errors"] else "")
        log("run %d %-7s %d snapshot(s): write %6.0f IOPS (total %6.0f) write p50 %6.0f us p99 %7.0f us; "
            "relayout %s s; SAN %.0f/%.0f MB r/w%s" % (
                row["run"], row["variant"], row["pre_snapshots"], row["write_iops"], row["iops"],
                row.get("write_p50_us", 0), row.get("write_p99_us", 0), row.get("relayout_s", "-"),
                row["san_read_mb"], row["san_write_mb"], extra))

    def save(self):
        write_json(self.a.out, self.res)


# ---- --snapshots ------------------------------------------------------------------

SNAP_VARIANTS = ("none", "one", "hundred")
SNAP_MEDIAN_KEYS = ("write_iops", "iops", "write_iops_fio", "read_iops", "write_p50_us", "write_p99_us",
                    "read_p50_us", "read_p99_us", "ratio", "ratio_total", "san_read_mb", "san_write_mb",
                    "drain_s", "relayout_s", "clear_s", "snapshots_taken", "tick_create_ms", "tick_delete_ms",
                    "pre_create_ms_p50")


class SnapTicker:
    """The `hundred` variant's snapshotter: a thread that takes a snapshot
    with the CLI and deletes the oldest while more than `keep` exist (names:
    the ones there before, oldest first, then its own). pace "rate": one is
    due every `every` s from the start; when a create (which flushes the
    write-back cache) and its delete outlast that, the next starts as soon as
    they end (no catching up on missed ones). pace "gap": `every` s of pause
    after each create and delete. Records each call's time; errors are
    recorded and it goes on."""

    def __init__(self, bench, prefix, every, keep, names, pace="rate"):
        self.bench, self.prefix, self.every, self.keep, self.pace = bench, prefix, every, keep, pace
        self.names = list(names)
        self.events, self.errors = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join()

    def _call(self, what, fn, name):
        t = time.time()
        try:
            s = fn(name)
            self.events.append({"what": what, "name": name, "t": t, "ms": s * 1000})
            return True
        except Exception as e:
            self.errors.append("%s %s: %s" % (what, name, str(e)[-300:]))
            return False

    def _run(self):
        i = 0
        due = time.monotonic() + self.every
        # The schedule's period, not a wait for an event.
        while not self._stop.wait(max(0.0, due - time.monotonic()) if self.pace == "rate" else self.every):
            due = max(due + self.every, time.monotonic())
            name = "%s-%04d" % (self.prefix, i)
            i += 1
            if self._call("create", self.bench.snap_create, name):
                self.names.append(name)
            while len(self.names) > self.keep and not self._stop.is_set():
                if not self._call("delete", self.bench.snap_delete, self.names[0]):
                    break
                self.names.pop(0)


def snap_medians(runs):
    """Per variant, medians over the rounds; the ratio is each round's
    variant against that round's `none`."""
    none = {x["run"]: x for x in runs if x["variant"] == "none" and "error" not in x}
    med = {}
    for v in SNAP_VARIANTS:
        rows = [x for x in runs if x["variant"] == v and "error" not in x]
        for x in rows:
            base = none.get(x["run"])
            if base and base["write_iops"] > 0:
                x["ratio"] = x["write_iops"] / base["write_iops"]
                x["ratio_total"] = x["iops"] / base["iops"]
            ticks = x.get("ticks") or []
            for what in ("create", "delete"):
                ms = [e["ms"] for e in ticks if e["what"] == what]
                if ms:
                    x["tick_%s_ms" % what] = statistics.median(ms)
            if x.get("pre_create_ms"):
                x["pre_create_ms_p50"] = statistics.median(x["pre_create_ms"])
        if not rows:
            continue
        m = {}
        for key in SNAP_MEDIAN_KEYS:
            vals = [x[key] for x in rows if isinstance(x.get(key), (int, float))]
            if vals:
                m[key] = statistics.median(vals)
                if key in ("write_iops", "ratio"):
                    m[key + "_min"], m[key + "_max"] = min(vals), max(vals)
        m["runs"] = len(rows)
        m["latency"] = rows[0].get("write_latency")
        m["snapshots_present"] = statistics.median([x["pre_snapshots"] for x in rows])
        med[v] = m
    return med


def snap_table(res):
    s = res["settings"][0] if res["settings"] else {"medians": {}, "runs": []}
    cfg = res["config"]
    lines = ["== 8K random 70/30 over NFS (nasgw), %d clients, iodepth %d, %d round(s) of %s s, variants "
             "interleaved" % (cfg["clients"][0], cfg["iodepth"], cfg["runs"], cfg["seconds"]),
             "%-8s %5s %5s %13s %19s %13s %9s %9s %9s %9s" % (
                 "variant", "snaps", "runs", "write IOPS", "(min-max)", "total IOPS", "ratio", "ratio min",
                 "w p50 ms", "w p99 ms")]
    for v in SNAP_VARIANTS:
        m = s["medians"].get(v)
        if not m:
            lines.append("%-8s %s" % (v, "not measured"))
            continue
        lines.append("%-8s %5s %5d %13.0f %19s %13.0f %9s %9s %9.2f %9.2f" % (
            v, "%g" % m["snapshots_present"], m["runs"], m["write_iops"],
            "(%.0f-%.0f)" % (m["write_iops_min"], m["write_iops_max"]), m["iops"],
            "%.3f" % m["ratio"] if "ratio" in m else "-", "%.3f" % m["ratio_min"] if "ratio_min" in m else "-",
            m.get("write_p50_us", 0) / 1000, m.get("write_p99_us", 0) / 1000))
    h = s["medians"].get("hundred")
    if h and "snapshots_taken" in h:
        lines.append("hundred: %g snapshots taken during each measurement (median; pace %s, every %g s), create "
                     "p50 %.0f ms, delete of the oldest p50 %.0f ms (CLI wall time)" % (
                         h["snapshots_taken"], cfg.get("snap_pace", "gap"), cfg.get("snap_every", 3),
                         h.get("tick_create_ms", 0), h.get("tick_delete_ms", 0)))
    lines.append("write IOPS: the clients' I/O over the span from the first one's start to the last one's end "
                 "times fio's write share; ratio: write IOPS over the same round's `none`, median over rounds; "
                 "w p50/p99: fio's write %s latency percentiles (all clients)." % (
                     (s["medians"].get("none") or {}).get("latency") or "completion"))
    return "\n".join(lines)


def snap_problems(res):
    bad = []
    for s in res["settings"]:
        for e in s.get("teardown_errors", []):
            bad.append("teardown: %s" % e[:300])
        if "error" in s["targets"].get("nasgw", {}):
            bad.append("nasgw: %s" % s["targets"]["nasgw"]["error"][:300])
        if s.get("final_clear_error"):
            bad.append("deleting the snapshots at the end: %s" % s["final_clear_error"][:300])
        want = {"none": 0, "one": 1, "hundred": res["config"]["snap_keep"]}
        for v in SNAP_VARIANTS:
            if not any(x["variant"] == v and "error" not in x for x in s["runs"]):
                bad.append("%s: not measured" % v)
        for x in s["runs"]:
            where = "run %d %s" % (x["run"], x["variant"])
            if "error" in x:
                bad.append("%s: %s" % (where, x["error"][:300]))
                continue
            if x["pre_snapshots"] != want[x["variant"]]:
                bad.append("%s: %d snapshots before the measurement, expected %d" % (
                    where, x["pre_snapshots"], want[x["variant"]]))
            if not x["read_ios"] > x["write_ios"] > 0:
                bad.append("%s: a 70/30 mix must do both, mostly reads" % where)
            if not 0 < x.get("write_p50_us", 0) <= x.get("write_p99_us", 0):
                bad.append("%s: implausible write latency %s/%s" % (where, x.get("write_p50_us"),
                                                                     x.get("write_p99_us")))
            if x["variant"] == "hundred":
                if x.get("tick_errors"):
                    bad.append("%s: snapshotter: %s" % (where, x["tick_errors"][:3]))
                if not x.get("snapshots_taken"):
                    bad.append("%s: no snapshot taken during the measurement" % where)
                if not want["hundred"] <= x["post_snapshots"] <= want["hundred"] + 1:
                    bad.append("%s: %d snapshots after it, expected ~%d" % (where, x["post_snapshots"],
                                                                             want["hundred"]))
            elif x["post_snapshots"] != want[x["variant"]]:
                bad.append("%s: %d snapshots after it, expected %d" % (where, x["post_snapshots"],
                                                                        want[x["variant"]]))
    return bad


# ---- report -----------------------------------------------------------------------

def table(res):
    lines = []
    cw = 42
    for s in res["settings"]:
        lines.append("== array link: %s" % s["name"])
        for t, info in s["targets"].items():
            lines.append("   %-7s %s%s" % (t, info.get("path", ""), ("  ERROR " + info["error"][:200]) if "error" in info
                                                else ""))
        lines.append("%-22s %7s  %s" % ("workload", "clients", "  ".join(
            "%-*s" % (cw, "%s: IOPS MB/s p50/p99 ms SAN/cl" % t) for t in s["medians"])))
        wls = res["config"]["workloads"]
        for wl in wls:
            for n in res["config"]["clients"]:
                if wl == "meta":
                    for ph in META_PHASES:
                        cells = []
                        for t in s["medians"]:
                            m = s["medians"][t].get(wl, {}).get(str(n))
                            if m and m.get(ph + "_ops_per_s") is not None:
                                kb = m.get(ph + "_san_kb_per_op")
                                cells.append("%-*s" % (cw, "%8.0f %7s %6.2f/%-7.2f %6s" % (
                                    m[ph + "_ops_per_s"], "-", m[ph + "_p50_us"] / 1000, m[ph + "_p99_us"] / 1000,
                                    "%.1fK" % kb if kb is not None else "-")))
                            else:
                                cells.append("%-*s" % (cw, "-"))
                        lines.append("%-22s %7d  %s" % ("meta %s (ops/s)" % ph, n, "  ".join(cells)))
                    continue
                cells = []
                for t in s["medians"]:
                    m = s["medians"][t].get(wl, {}).get(str(n))
                    spc = m.get("san_per_client") if m else None
                    cells.append("%-*s" % (cw, "%8.0f %7.1f %6.2f/%-7.2f %6s%s" % (
                        m["iops"], m["mbps"], m["p50_us"] / 1000, m["p99_us"] / 1000,
                        "%.2f" % spc if spc is not None else "-",
                        "*" if m.get("overlap_short") else "") if m else "-"))
                lines.append("%-22s %7d  %s" % (WORKLOADS[wl][4], n, "  ".join(cells)))
    lines.append("IOPS and MB/s: all the clients' I/O over the span from the first one's start to the last one's "
                 "end; p50/p99: fio's, each client over its own run. SAN/cl: bytes across the array link (both "
                 "ways) per byte the clients moved, over that span. * = in some run the clients ran together "
                 "for less than half of it. meta rows: operations/s over all clients, p50/p99 per operation, "
                 "SAN KB per operation.")
    return "\n".join(lines)


def chart(res, path):
    if nasgwlab.matplotlib_or_redraw(__file__, res, path) is None:
        return
    import matplotlib.pyplot as plt
    settings = res["settings"]
    wls = res["config"]["workloads"]
    rows = []
    if "randrw" in wls:
        rows += [("randrw", "iops", "8K random 70/30: IOPS"), ("randrw", "p99_us", "8K random 70/30: p99 latency (ms)")]
    for wl in ("seqread", "seqwrite"):
        if wl in wls:
            rows.append((wl, "mbps", "%s: MB/s" % WORKLOADS[wl][4]))
    if "meta" in wls:
        rows += [("meta", "%s_ops_per_s" % ph, "metadata: %s/s" % ph) for ph in META_PHASES]
    if not rows or not settings:
        return
    fig, axes = plt.subplots(len(rows), len(settings), figsize=(5.5 * len(settings), 3.2 * len(rows)),
                             squeeze=False)
    styles = {"nasgw": ("tab:blue", "o"), "vfs": ("tab:green", "s"), "san-vfs": ("tab:orange", "D"),
              "block": ("tab:red", "^")}
    for col, s in enumerate(settings):
        for row, (wl, key, label) in enumerate(rows):
            ax = axes[row][col]
            drawn = 0
            for t, med in s["medians"].items():
                pts = sorted((int(n), m[key]) for n, m in med.get(wl, {}).items() if m.get(key) is not None)
                if not pts:
                    continue
                drawn += 1
                xs = [p[0] for p in pts]
                ys = [p[1] / 1000 if key == "p99_us" else p[1] for p in pts]
                color, marker = styles.get(t, (None, "x"))
                ax.plot(xs, ys, marker=marker, color=color, label=t)
            if not drawn:
                ax.set_title(label, fontsize=9)
                ax.text(0.5, 0.5, "not measured on this link", ha="center", va="center", transform=ax.transAxes)
                ax.set_axis_off()
                continue
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
    """Errors and figures that cannot be right. A step that did not run,
    errors, a link that never went quiet, and bytes on the array link that
    do not fit the target: block moves its clients' bytes (plus iSCSI's
    headers), the local-disk peer nothing, the same-SAN peer and nasgw at
    least what was laid out (once flushed), nothing beyond a shaped link's
    rate. The local-disk peer's allowance is the link's idle rate over its
    run, plus a tenth of its bytes."""
    bad = []
    cfg = res["config"]

    def idle_mb(row):
        """What the link may carry while it counts as quiet, over the run
        and its drain (nobody's traffic: renewals, heartbeats, a trickle of
        another target's write-back)."""
        return QUIET_BYTES_PER_S * (row.get("wall_s", 0) + row.get("drain_s", 0)) / 1e6
    for s in res["settings"]:
        rate = rate_bytes_per_s(s["rate"]) / 1e6 if s.get("rate") else None
        for e in s.get("teardown_errors", []):
            bad.append("%s: teardown: %s" % (s["name"], e[:300]))
        for t, info in s["targets"].items():
            if "error" in info:
                bad.append("%s/%s: %s" % (s["name"], t, info["error"][:300]))
                continue
            if info.get("layout_client_mb"):
                moved = info["layout_san_write_mb"] / info["layout_client_mb"]
                lo, hi = (0, 0.1) if t == "vfs" else (0.9, 100)
                if not lo <= moved <= hi:
                    bad.append("%s/%s: laying out %.0f MB wrote %.0f MB across the array link (expected %s-%s x)"
                               % (s["name"], t, info["layout_client_mb"], info["layout_san_write_mb"], lo, hi))
            for wl in cfg["workloads"]:
                if wl == "meta" and t == "block":
                    continue
                for n in cfg["clients"]:
                    if not any(r["target"] == t and r["workload"] == wl and r["clients"] == n for r in s["runs"]):
                        bad.append("%s/%s/%s/%d: not measured" % (s["name"], t, wl, n))
        for row in s["runs"]:
            t = row["target"]
            where = "%s/%s/%s/%d" % (s["name"], t, row["workload"], row["clients"])
            if "error" in row:
                bad.append("%s: %s" % (where, row["error"][:300]))
                continue
            if not row.get("drain_quiet", True):
                bad.append("%s: the array link was not quiet %.0f s after the step" % (where, row["drain_s"]))
            if row["workload"] == "meta":
                want = row["clients"] * row["files_per_client"]
                for ph, x in row["phases"].items():
                    if x["ops"] != want or x["errors"] or not (x["ops_per_s"] > 0 and 0 < x["p50_us"] <= x["p99_us"]):
                        bad.append("%s: %s: implausible %s (expected %d operations)" % (where, ph, x, want))
                # nasgw's namespace changes are durable when answered.
                if t == "nasgw" and not row["phases"]["create"]["san_write_mb"] > 0:
                    bad.append("%s: creates wrote nothing to the array" % where)
                continue
            if not (row["iops"] > 0 and 0 < row["p50_us"] <= row["p99_us"]):
                bad.append("%s: implausible %s" % (where, row))
                continue
            if row["workload"] == "randrw" and not row["read_ios"] > row["write_ios"] > 0:
                bad.append("%s: a 70/30 mix must do both, mostly reads: %s" % (where, row))
            spc = row.get("san_per_client")
            if spc is None:
                bad.append("%s: no SAN bytes per client byte" % where)
            elif t == "block" and not 0.8 <= spc <= 1.6:
                bad.append("%s: block moved %.2f SAN bytes per client byte (expected ~1.05)" % (where, spc))
            elif t == "vfs" and spc * row["lan_mb"] > 0.1 * row["lan_mb"] + idle_mb(row):
                # It has no path to the array: what crossed the link is the
                # others' background (below the rate that counts as quiet,
                # as the drain allowed it), never near a byte per byte.
                bad.append("%s: the local-disk peer moved %.2f SAN bytes per client byte (%.1f MB; the link's idle "
                           "allowance over the run and drain %.1f MB)" % (where, spc, spc * row["lan_mb"], idle_mb(row)))
            if t in ("san-vfs", "nasgw") and row["workload"] != "seqread" and \
                    not row["san_write_mb"] + row["drain_san_write_mb"] > 0:
                bad.append("%s: clients wrote, nothing reached the array" % where)
            if rate:
                for way in ("read", "write"):
                    mbps = row["san_peak_%s_mbps" % way]
                    if mbps > 1.15 * rate:
                        bad.append("%s: %.1f MB/s of %ss across a %.1f MB/s link" % (where, mbps, way, rate))
    return bad


def nasgw_config(a):
    """The bench nasgwd's extra TOML: --nasgw-config, with the memory budget
    (--nasgw-memory-mib) in its [cache] section unless that sets one."""
    text = a.nasgw_config.replace("\\n", "\n")
    if a.nasgw_memory_mib and "memory_mib" not in text:
        line = "memory_mib = %d" % a.nasgw_memory_mib
        if re.search(r"^\[cache\]\s*$", text, re.M):
            text = re.sub(r"^\[cache\]\s*$", "[cache]\n" + line, text, count=1, flags=re.M)
        else:
            text = "[cache]\n%s\n%s" % (line, text)
    return text + ("\n" if text and not text.endswith("\n") else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"),
                    help="build dir with daemon/nasgwd, cli/nasgw, fsal/ganesha/libfsalnasgw.so")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--workloads", default=",".join(ALL_WORKLOADS))
    ap.add_argument("--clients", default=None, help="client steps (default 1,2,4,8,16; --snapshots: 4)")
    ap.add_argument("--file-mib", type=float, default=1.0,
                    help="size of each file (%d per client)" % files_per_client())
    ap.add_argument("--iodepth", type=int, default=4, help="I/Os (meta: requests) in flight per client")
    ap.add_argument("--meta-files", type=int, default=2000, help="meta: empty files each client creates, "
                    "stats and removes")
    ap.add_argument("--seconds", type=float, default=None, help="per step (default 10; --snapshots: 20)")
    ap.add_argument("--ramp", type=float, default=2)
    ap.add_argument("--runs", type=int, default=None, help="rounds (default 3; --snapshots: 5)")
    ap.add_argument("--rate", default="150mbit",
                    help="tbf rate of the shaped array link ('none': unlimited only)")
    ap.add_argument("--links", default="unlimited,shaped", help="which link settings to run")
    ap.add_argument("--lun-size", default="8G", help="each lab LUN (thin); san-vfs holds all the clients' "
                    "files and streams on one")
    ap.add_argument("--xfs-size", default="8G")
    ap.add_argument("--ag-size", default="64M")
    ap.add_argument("--record-kib", type=int, default=0, help="nasgw volume record size (default: nasgw's)")
    ap.add_argument("--nasgw-memory-mib", type=int, default=6144,
                    help="nasgwd's memory budget ([cache] memory_mib; 0: nasgwd's default, 2048). The peers' "
                    "page cache takes what it likes of this machine's memory; a NAS head is given its "
                    "node's memory the same way")
    ap.add_argument("--nasgw-config", default="",
                    help="TOML appended to the bench nasgwd's config (\\n for a new line), e.g. "
                    "'[cache]\\nmemory_mib = 8192'")
    ap.add_argument("--quiesce-max", type=float, default=600,
                    help="after each step, wait at most this long for the array link to go quiet")
    ap.add_argument("--cold-peers", action="store_true",
                    help="before each step, drop the vfs and san-vfs peers' file data from the page cache "
                    "(their reads then go to their disks: a working set larger than the head's RAM)")
    ap.add_argument("--lun-fuse", help="nasgw-lun-fuse (default: <build>/bench/nasgw-lun-fuse)")
    ap.add_argument("--meta-tool", help="nasgw-nfs-meta (default: <build>/tests/tools/nasgw-nfs-meta)")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--chart", help="PNG chart (default: --out with .png)")
    ap.add_argument("--fio", help="fio with the nfs and libiscsi engines (default: deploy/build-fio.sh)")
    ap.add_argument("--chart-from", help=argparse.SUPPRESS)   # draw the chart of a results JSON, nothing else
    ap.add_argument("--snapshots", action="store_true",
                    help="the snapshot mode: nasgw only, 8K random 70/30 at one client count (--clients), "
                    "unlimited link; per round, interleaved: no snapshot, one taken after the layout, "
                    "--snap-keep present plus one every --snap-every s during the run (oldest deleted)")
    ap.add_argument("--snap-keep", type=int, default=100, help="--snapshots: snapshots of the `hundred` variant")
    ap.add_argument("--snap-every", type=float, default=3.0, help="--snapshots: seconds between snapshots "
                    "during the `hundred` measurement")
    ap.add_argument("--snap-pace", choices=("rate", "gap"), default="rate",
                    help="--snapshots: rate: a snapshot due every --snap-every s (one that outlasts it is "
                    "followed at once by the next); gap: --snap-every s of pause after each")
    ap.add_argument("--perf", type=float, default=0, help="--snapshots: perf record -g nasgwd for this many "
                    "seconds during each variant of round 1 (a profiling run; not for the figures)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke: 1 and 2 clients, 1 s per run, 128 KiB files, 100 meta files, one run, "
                    "with sanity checks; every target and workload must run")
    a = ap.parse_args()
    if a.chart_from:
        with open(a.chart_from) as f:
            chart(json.load(f), a.chart)
        return 0
    if a.snapshots:
        a.clients = a.clients or "4"
        a.seconds, a.runs = a.seconds or 20, a.runs or 5
        if a.quick:   # smoke: one round of 4 s on 256 KiB files, 20 snapshots for `hundred`
            a.seconds, a.ramp, a.runs, a.file_mib, a.snap_keep, a.snap_every = 4, 1, 1, 0.25, 20, 1
        a.targets, a.workloads, a.links, a.rate = "nasgw", "randrw", "unlimited", "none"
        if "," in a.clients:
            ap.error("--snapshots: one client count")
    else:
        a.clients = a.clients or "1,2,4,8,16"
        a.seconds, a.runs = a.seconds or 10, a.runs or 3
    if a.quick and not a.snapshots:
        a.clients, a.seconds, a.ramp, a.runs, a.file_mib, a.meta_files = "1,2", 1, 0.25, 1, 0.125, 100
    a.targets = [t for t in a.targets.split(",") if t]
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.clients = [int(c) for c in str(a.clients).split(",")]
    a.links = [l for l in a.links.split(",") if l]
    for t in a.targets:
        if t not in TARGETS:
            ap.error("unknown target %r" % t)
    for w in a.workloads:
        if w not in ALL_WORKLOADS:
            ap.error("unknown workload %r" % w)
    data_mib = files_per_client() * a.file_mib * max(a.clients)
    if data_mib > nfslab.parse_size(a.lun_size) / (1 << 20):
        ap.error("the clients' data (%d x %d files x %s MiB) does not fit a %s LUN" % (
            max(a.clients), files_per_client(), a.file_mib, a.lun_size))
    # san-vfs keeps the file sets and the streams on one LUN, with XFS's room.
    if "san-vfs" in a.targets and 2 * data_mib * 1.1 > nfslab.parse_size(a.lun_size) / (1 << 20):
        ap.error("san-vfs: the clients' files and streams (2 x %.0f MiB) do not fit a %s LUN (--lun-size)" % (
            data_mib, a.lun_size))
    if os.geteuid() != 0:
        print("nfs_bench: must run as root (namespaces, tgtd, ganesha)", file=sys.stderr)
        return 2
    if a.rate and a.rate != "none":
        try:
            rate_bytes_per_s(a.rate)
        except ValueError as e:
            ap.error(str(e))
    if a.out and not a.chart and not a.snapshots:
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
            b.res.setdefault("skipped", {})["nasgw"] = "not built: %s" % ", ".join(missing)
    # The same-SAN peer and the metadata workload need their tools: skipped
    # without them, except in --quick, which must run everything.
    b.bins["lunfuse"] = os.path.abspath(a.lun_fuse or os.path.join(build, "bench", "nasgw-lun-fuse"))
    b.bins["meta"] = os.path.abspath(a.meta_tool or os.path.join(build, "tests", "tools", "nasgw-nfs-meta"))
    for what, key, sel in (("target san-vfs", "lunfuse", a.targets), ("workload meta", "meta", a.workloads)):
        item = what.split()[1]
        if item in sel and not os.path.isfile(b.bins[key]):
            if a.quick:
                log("FAILED: %s: %s is not built" % (what, b.bins[key]))
                return 1
            log("SKIP: %s: not built: %s" % (what, b.bins[key]))
            sel.remove(item)
            b.res.setdefault("skipped", {})[item] = "not built: %s" % b.bins[key]
    if not a.targets:
        log("nothing to measure")
        return 1
    b.fio = a.fio or sh(["bash", BUILD_FIO], timeout=1800).stdout.strip().splitlines()[-1]
    b.res["fio"] = sh([b.fio, "--version"]).stdout.strip()
    g = sh(["git", "-C", ROOT, "describe", "--always", "--dirty"], check=False)
    b.res["git"] = g.stdout.strip() if g.returncode == 0 else None   # what the build was made from (roughly)
    b.res["started"] = time.strftime("%Y-%m-%d %H:%M:%S")

    for x in sanvfs_gc():
        log("gc: %s (a crashed run's)" % x)
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
    log(snap_table(b.res) if a.snapshots else table(b.res))
    if a.chart:
        try:
            chart(b.res, a.chart)
            log("chart: %s" % a.chart)
        except Exception as e:
            log("chart failed: %s" % e)

    bad = snap_problems(b.res) if a.snapshots else smoke_problems(b.res)
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
