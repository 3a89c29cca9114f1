#!/usr/bin/env python3
"""Head forwarding, measured: what the hop through the node that does not
own the reserve costs an NFS client (docs/cluster.md, "Forwarding").

The lab is cluster_lab's spread pair (Lab(build, nfs=True, forward=True,
vips=(VIP, VIP2))): A owns the reserve and holds VIP 198.18.1.50; B stands
by, holds VIP2 198.18.1.51, publishes A's exports to its own ganesha and
relays its heads' connections to A over the interconnect. fio's nfs engine
(libnfs, NFSv3) runs in the LAN's client namespace: --clients jobs, each its
own file of --file-mib MiB (laid out once before the rounds), 8K random I/O
with 70% reads, --iodepth in flight per job, the stock ganesha config
(fio's UNSTABLE WRITEs answered from nasgwd's cache: the hop is most of
what differs).

Variants, interleaved within each of --runs rounds (the first rotating),
medians reported:
  direct    through VIP: A's ganesha, A's nasgwd
  relayed   through VIP2: B's ganesha, B's nasgwd relaying to A's over TCP
            on the interconnect, A's nasgwd executing
Both reach the same files in A's cache; before each measurement the files
are read once through that variant's address. Each variant's state is
checked before and after (A online with VIP, B standby with VIP2 and its
heads relayed); a row whose state changed is left out of the medians.

Reported per variant: total IOPS (the jobs' I/O over the span they all ran,
nfs_bench's concurrent_iops), read and write p50/p99 latency (us), and
relayed against direct (ratio of the medians). Both nodes share this
machine's two cores: the relay's CPU is not free here as on a partner.

  python3 bench/forward_bench.py --build build/release --runs 5 --out /tmp/forward-bench.json
  python3 bench/forward_bench.py --build build/debug --smoke

Needs root, corosync, fio with the nfs engine (deploy/build-fio.sh, run on
demand), <build>/daemon/nasgwd, cli/nasgw, fsal/ganesha/libfsalnasgw.so.
"""
import argparse
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
from nfs_bench import BUILD_FIO, LOG_MS, concurrent_window, fio_jobfile, parse_fio, sh, write_json  # noqa: E402
from cluster_lab import VIP, VIP2, Lab, cluster, spread_ok, state, wait_for  # noqa: E402

VARIANTS = {"direct": VIP, "relayed": VIP2}
EXPORT = "vol1"
KEYS = ("iops", "read_p50_us", "read_p99_us", "write_p50_us", "write_p99_us")
STATE_TIMEOUT_S = 60


def log(msg):
    print(msg, flush=True)


class ForwardBench:
    def __init__(self, a, lab):
        self.a, self.lab = a, lab
        self.A, self.B = lab.nodes
        self.clients = {v: lab.client(addr) for v, addr in VARIANTS.items()}
        self.dir = "/tmp/nasgw-forwardbench-%d" % os.getpid()
        os.makedirs(self.dir, exist_ok=True)
        self.fio = None
        self.res = {"config": dict(vars(a)), "rows": []}

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def state_ok(self):
        """A online with VIP, B standby with VIP2, relaying its heads."""
        return spread_ok(self.lab) and state(self.A) == "online" and \
            "relayed to the partner" in cluster(self.B).get("forwarding", "")

    def setup(self):
        a, _ = self.lab.start_pair()
        a.cli("export", "add", EXPORT, "--no-root-squash")
        self.lab.start_ganesha()
        wait_for(self.state_ok, STATE_TIMEOUT_S, "the VIPs spread, B relaying")
        for v, c in self.clients.items():
            wait_for(lambda: c.nfs_ls(EXPORT, check=False).returncode == 0, STATE_TIMEOUT_S,
                     "the export answering through %s (%s)" % (VARIANTS[v], v))

    def run_fio(self, variant, glob, tag, timeout, window=False):
        job = os.path.join(self.dir, "fio-%s.job" % tag)
        out = os.path.join(self.dir, "fio-%s.json" % tag)
        logs = os.path.join(self.dir, "log-%s" % tag)
        glob = dict(glob, ioengine="nfs", nfs_url="nfs://%s/%s" % (VARIANTS[variant], EXPORT),
                    filesize="%dk" % int(self.a.file_mib * 1024))
        if window:
            glob = dict(glob, write_iops_log=logs, log_avg_msec=LOG_MS, log_unix_epoch=1)
        jobs = [("c%d" % i, {"filename": "fwdbench-c%d" % i}) for i in range(1, self.a.clients + 1)]
        fio_jobfile(job, glob, jobs)
        if os.path.exists(out):
            os.remove(out)
        p = self.clients[variant].run([self.fio, "--output-format=json", "--output=" + out, job], check=False,
                                      timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("fio %s exit %d: %s%s" % (tag, p.returncode, p.stdout[-1500:], p.stderr[-1500:]))
        res = parse_fio(out)
        if window:
            res["iops"] = concurrent_window(logs, len(jobs))["iops"]
        return res

    def run(self):
        a = self.a
        self.fio = a.fio or sh(["bash", BUILD_FIO], timeout=1800).stdout.strip().splitlines()[-1]
        self.res["fio"] = sh([self.fio, "--version"]).stdout.strip()
        self.setup()
        self.run_fio("direct", {"rw": "write", "bs": "256k", "iodepth": 1, "group_reporting": 1}, "layout", 1800)
        names = list(VARIANTS)
        for r in range(a.runs):
            order = names[r % len(names):] + names[:r % len(names)]
            for v in order:
                if not self.state_ok():
                    raise RuntimeError("round %d %s: the pair is not in its state: %s" % (
                        r, v, [(n.s["tag"], state(n), cluster(n).get("vips_held")) for n in self.lab.nodes]))
                self.run_fio(v, {"rw": "read", "bs": "256k", "iodepth": 1, "group_reporting": 1},
                             "prime-%d-%s" % (r, v), 900)
                glob = {"rw": "randrw", "rwmixread": 70, "bs": "8k", "iodepth": a.iodepth, "time_based": 1,
                        "runtime": a.seconds, "ramp_time": a.ramp, "group_reporting": 1,
                        "unified_rw_reporting": "both", "lat_percentiles": 1}
                m = self.run_fio(v, glob, "%d-%s" % (r, v), a.seconds + a.ramp + 120, window=True)
                row = {"round": r, "variant": v, "state_ok": self.state_ok()}
                row.update({k: m.get(k) for k in KEYS})
                self.res["rows"].append(row)
                log("round %d %-8s %8.0f IOPS  read p50/p99 %6.0f/%6.0f us  write p50/p99 %6.0f/%6.0f us%s" % (
                    r, v, row["iops"], row["read_p50_us"], row["read_p99_us"], row["write_p50_us"],
                    row["write_p99_us"], "" if row["state_ok"] else "  (state changed: left out)"))
                write_json(a.out, self.res)
        self.res["medians"] = medians(self.res["rows"])
        write_json(a.out, self.res)


def medians(rows):
    out = {}
    for v in VARIANTS:
        good = [r for r in rows if r["variant"] == v and r["state_ok"]]
        out[v] = {k: statistics.median(r[k] for r in good) for k in KEYS} if good else {}
        out[v]["rounds"] = len(good)
    d, f = out.get("direct", {}), out.get("relayed", {})
    out["relayed_vs_direct"] = {k: (f[k] / d[k] if d.get(k) and f.get(k) is not None else None) for k in KEYS}
    return out


def table(res):
    m = res.get("medians") or {}
    lines = ["", "medians over %s rounds: 8K random 70/30 over NFSv3, %d jobs x iodepth %d" % (
        res["config"]["runs"], res["config"]["clients"], res["config"]["iodepth"]),
        "%-10s %9s %10s %10s %10s %10s" % ("variant", "IOPS", "read p50", "read p99", "write p50", "write p99")]
    for v in list(VARIANTS) + ["relayed_vs_direct"]:
        x = m.get(v) or {}
        if v == "relayed_vs_direct":
            lines.append("%-10s %9s %10s %10s %10s %10s" % (("relayed/direct",) + tuple(
                "x%.2f" % x[k] if x.get(k) else "-" for k in KEYS)))
        else:
            lines.append("%-10s %9.0f %10.0f %10.0f %10.0f %10.0f" % ((v,) + tuple(x.get(k) or 0 for k in KEYS)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--ramp", type=float, default=2)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--iodepth", type=int, default=4)
    ap.add_argument("--file-mib", type=float, default=64)
    ap.add_argument("--fio", help="fio with the nfs engine (default: deploy/build-fio.sh)")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--smoke", action="store_true", help="check the harness: 1 round, 3 s per variant")
    a = ap.parse_args()
    if a.smoke:
        a.runs, a.seconds, a.ramp, a.file_mib = 1, 3, 1, 16
    build = os.path.abspath(a.build)
    missing = [p for p in ("daemon/nasgwd", "cli/nasgw", "fsal/ganesha/libfsalnasgw.so")
               if not os.path.exists(os.path.join(build, p))]
    if missing:
        log("FAILED: not built: %s" % ", ".join(missing))
        return 1
    t0 = time.monotonic()
    lab = Lab(build, nfs=True, forward=True, vips=(VIP, VIP2))
    b = None
    try:
        b = ForwardBench(a, lab)
        b.res["build"] = build
        b.run()
    except Exception as e:
        log("FAILED: %s" % str(e)[-1500:])
        return 1
    finally:
        lab.close()
        if b is not None:
            b.close()
    log(table(b.res))
    log("wall time %.0f s%s" % (time.monotonic() - t0, "; JSON: %s" % a.out if a.out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
