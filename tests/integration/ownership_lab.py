#!/usr/bin/env python3
"""One owner per reserve, on a real SAN (tgtd in a netns lab with two
controller hosts): what an administrator who starts nasgwd twice, copies a
config to the standby, runs fsck on a live reserve or takes a reserve over
would see.

  ownership_lab.py second   ... --trials 50   a second nasgwd on the same LUNs, from the
                                               same host and from a second host namespace,
                                               and both starting at once: never two owners
  ownership_lab.py takeover ...                SIGKILL of the holder, takeover without force
  ownership_lab.py preempt  ...                forced takeover: the holder is fenced and no
                                               write of its lands on the array afterwards
  ownership_lab.py fsck     ... --runs 20      nasgw-fsck against a node under fsync load

Common: --nasgwd BIN --cli BIN --fuse BIN --fsck BIN. Each command starts
its own lab and removes it, also when it fails. Prints one line per check
and "N passed, N failed".
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nasgwlab import SANLAB, Checks, Node, sh  # noqa: E402

READY_TIMEOUT_S = 30


class Lab:
    """A netns lab with two controller hosts and a node on each."""

    def __init__(self, a, luns=3):
        self.a = a
        info = json.loads(sh([SANLAB, "start", "own%d" % os.getpid(), "--mode", "netns", "--luns", str(luns),
                              "--size", "256M", "--hosts", "2", "--owner-pid", str(os.getpid())]).stdout)
        self.name = info["name"]
        self.hosts = info["ns_hosts"]
        urls = [l["url"] for l in info["luns"]]
        bins = {"nasgwd": a.nasgwd, "cli": a.cli, "fuse": a.fuse, "fsck": a.fsck}
        self.node_a = Node(bins, urls=urls, tag="own-a", netns=self.hosts[0])
        self.node_b = Node(bins, urls=urls, tag="own-b", netns=self.hosts[1])
        # B from A's host namespace: a unit started twice on one machine
        # (its own state dir: a copied config on the same host).
        self.node_b_same = Node(bins, urls=urls, tag="own-b2", netns=self.hosts[0])
        self.urls = urls

    def fsck(self, check=True):
        """nasgw-fsck from A's host (the array is reachable only there)."""
        cmd = ["ip", "netns", "exec", self.hosts[0], self.a.fsck,
               "--initiator", "iqn.2026-11.org.nasgw:fsck-%d" % os.getpid()]
        for u in self.urls:
            cmd += ["--lun", u]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        if check and p.returncode != 0:
            raise RuntimeError("nasgw-fsck exit %d: %s%s" % (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        return p

    def close(self):
        for n in (self.node_a, self.node_b, self.node_b_same):
            try:
                n.close()
            except Exception as e:  # the lab must go anyway
                print("close: %s" % e)
        sh([SANLAB, "stop", self.name], check=False)


def reserve(node):
    return node.cli("reserve", "status", json_out=True)["reserve"]


def write_files(root, prefix, n, size=64 << 10):
    """Writes n files with fsync; returns {path: sha256}."""
    out = {}
    for i in range(n):
        data = os.urandom(size)
        path = os.path.join(root, "%s-%03d" % (prefix, i))
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        out[path] = hashlib.sha256(data).hexdigest()
    return out


def verify_files(root_from, root_to, files):
    bad = []
    for path, sha in files.items():
        p = os.path.join(root_to, os.path.relpath(path, root_from))
        try:
            with open(p, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != sha:
                    bad.append(p)
        except OSError as e:
            bad.append("%s: %s" % (p, e))
    return bad


def ok_writes(node):
    """Writes of this node that the array completed, over all its LUNs."""
    luns = node.cli("reserve", "luns", json_out=True)["luns"]
    return sum(l["io"]["write"]["ops"] - l["io"]["write"]["errors"] for l in luns)


def cmd_second(a):
    c = Checks()
    lab = Lab(a)
    A, B, B2 = lab.node_a, lab.node_b, lab.node_b_same
    try:
        A.start()
        A.format()
        A.mount()
        files = write_files(A.mount_path, "a", 20)
        A.unmount()
        r = reserve(A)
        c("the first node owns the reserve", r["state"] == "online" and r["owned_here"], r)
        refused = named = 0
        details = []
        for t in range(a.trials):
            if t % 5 == 4:
                # Both at the same moment, from two hosts: A (stopped
                # cleanly, so the reserve is free) and B.
                A.stop()
                threads = [threading.Thread(target=n.start) for n in (A, B)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                states = sorted(reserve(n)["state"] for n in (A, B))
                if states == ["online", "standby"]:
                    refused += 1
                else:
                    details.append("trial %d (simultaneous): %s" % (t, states))
                loser = A if reserve(A)["state"] == "standby" else B
                winner = B if loser is A else A
                lr = reserve(loser)
                named += 1 if ("lab-own-a" in lr["owner"] or "lab-own-b" in lr["owner"]) else 0
                loser.stop()
                if winner is B:
                    # Hand back to A for the next trials: B stops cleanly.
                    B.stop()
                    A.start()
                continue
            other = B if t % 2 == 0 else B2
            other.start()
            r = reserve(other)
            if r["state"] == "standby":
                refused += 1
            else:
                details.append("trial %d: %s %s" % (t, r["state"], r["reason"]))
            if "node 'lab-own-a'" in r["owner"] and "last renewed" in r["owner"]:
                named += 1
            other.stop()
            ra = reserve(A)
            if not (ra["state"] == "online" and ra["owned_here"]):
                details.append("trial %d: the first node is %s" % (t, ra["state"]))
        c("%d trials: a second nasgwd (same host, second host, simultaneous) never opened the domain"
          % a.trials, refused == a.trials and not details, details)
        c("the refusing node named the holder every time", named == a.trials, (named, a.trials))
        A.mount()
        bad = verify_files(A.mount_path, A.mount_path, files)
        c("the first node's files are exact", not bad, bad)
        A.unmount()
        A.stop()
        p = lab.fsck(check=False)
        c("fsck clean after the trials", p.returncode == 0, p.stdout + p.stderr)
    finally:
        lab.close()
    return c


def cmd_takeover(a):
    c = Checks()
    lab = Lab(a)
    A, B = lab.node_a, lab.node_b
    try:
        A.start()
        A.format()
        A.mount()
        files = write_files(A.mount_path, "a", 10)
        B.start()
        c("B stands by while A holds the reserve", reserve(B)["state"] == "standby", reserve(B))
        t = B.cli("reserve", "takeover", check=False)
        c("takeover without force is refused while A renews (exit 6, names A)",
          t.returncode == 6 and "lab-own-a" in t.stderr and "within its lease" in t.stderr, (t.returncode, t.stderr))
        A.kill()  # the holder dies: nasgwd and its FUSE head
        killed = time.monotonic()
        deadline = killed + 30
        took = None
        renewed = None  # when A last renewed, by B's refusals ("last renewed N s ago")
        while time.monotonic() < deadline:
            t = B.cli("reserve", "takeover", check=False)
            now = time.monotonic()
            if t.returncode == 0:
                took = now
                break
            m = re.search(r"last renewed ([0-9.]+) s ago", t.stderr)
            if m:
                renewed = now - float(m.group(1))  # a little late: by the call's own time
            time.sleep(0.2)  # the lease runs out on B's clock; nothing to wait on but time
        # The lease runs from A's last renewal, not from the kill (a renewal
        # can be late on a loaded machine): B takes over no sooner than 1.5 s
        # after it, less the CLI call's time (0.5 s allowed).
        since = None if took is None or renewed is None else took - renewed
        c("takeover without force succeeds once A's lease (1.5 s) ran out since its last renewal",
          since is not None and since >= 1.0, (since, None if took is None else took - killed, t.stderr))
        r = reserve(B)
        c("B owns the reserve", r["state"] == "online" and r["owned_here"], r)
        B.mount()
        bad = verify_files(A.mount_path, B.mount_path, files)
        c("every file A fsynced reads back exact through B", not bad, bad)
        B.unmount()
        A.start()
        ra = reserve(A)
        c("A, restarted, stands by naming B", ra["state"] == "standby" and "lab-own-b" in ra["owner"], ra)
        A.stop()
        B.stop()
        p = lab.fsck(check=False)
        c("fsck clean", p.returncode == 0, p.stdout + p.stderr)
    finally:
        lab.close()
    return c


def cmd_preempt(a):
    c = Checks()
    lab = Lab(a)
    A, B = lab.node_a, lab.node_b
    try:
        A.start()
        A.format()
        A.mount()
        files = write_files(A.mount_path, "a", 10)
        B.start()
        t = B.cli("reserve", "takeover", "--force", check=False)
        c("forced takeover while A runs", t.returncode == 0, t.stderr)
        deadline = time.monotonic() + 15
        # A learns it from its next renewal (every 250 ms), and names B once
        # it reads B's record: B writes it after waiting out A's queued
        # commands ([reserve] preempt_settle_ms), so A may first see its own.
        while time.monotonic() < deadline and not (reserve(A)["state"] == "fenced" and
                                                   "lab-own-b" in reserve(A)["owner"]):
            time.sleep(0.05)
        ra = reserve(A)
        c("A reports itself fenced, naming B", ra["state"] == "fenced" and "lab-own-b" in ra["owner"], ra)
        st = A.cli("node", "show").stdout
        c("nasgw node show says fenced and why", "fenced" in st and "lost the reserve" in st, st)
        before = ok_writes(A)
        # Clients keep writing through A: every write must fail, none land.
        failed_writes = 0
        for i in range(5):
            try:
                with open(os.path.join(A.mount_path, "after-fence-%d" % i), "wb") as f:
                    f.write(os.urandom(65536))
                    f.flush()
                    os.fsync(f.fileno())
            except OSError:
                failed_writes += 1
        after = ok_writes(A)
        c("writes through the fenced node fail", failed_writes == 5, failed_writes)
        c("no write of the fenced node reached the array after the fence", after == before, (before, after))
        B.mount()
        present = [n for n in os.listdir(B.mount_path) if n.startswith("after-fence")]
        c("nothing the fenced node was asked to write is visible on the new owner", not present, present)
        bad = verify_files(A.mount_path, B.mount_path, files)
        c("A's earlier files read back exact through B", not bad, bad)
        B.unmount()
        A.unmount()
        A.stop()
        B.stop()
        p = lab.fsck(check=False)
        c("fsck clean", p.returncode == 0, p.stdout + p.stderr)
    finally:
        lab.close()
    return c


def cmd_fsck(a):
    c = Checks()
    lab = Lab(a)
    A = lab.node_a
    try:
        A.start()
        A.format()
        A.mount()
        stop = threading.Event()
        written = {}
        errors = []

        def writer():
            i = 0
            while not stop.is_set():
                try:
                    written.update(write_files(A.mount_path, "w%05d" % i, 1, size=16 << 10))
                except OSError as e:
                    errors.append(str(e))
                    return
                i += 1

        th = threading.Thread(target=writer)
        th.start()
        refused = 0
        details = []
        try:
            for r in range(a.runs):
                p = lab.fsck(check=False)
                if p.returncode == 2 and "is owned by node 'lab-own-a'" in p.stderr:
                    refused += 1
                else:
                    details.append("run %d: exit %d %s" % (r, p.returncode, p.stderr[-300:]))
        finally:
            stop.set()
            th.join()
        c("nasgw-fsck refused %d times against the live node, naming it" % a.runs, refused == a.runs, details)
        c("the fsync load ran throughout without an error", not errors and len(written) > a.runs, (errors, len(written)))
        bad = verify_files(A.mount_path, A.mount_path, written)
        c("all %d fsynced files read back exact" % len(written), not bad, bad)
        A.unmount()
        A.kill()
        p = lab.fsck(check=False)
        c("after a SIGKILL, fsck checks the silent holder's reserve read-only (clean)",
          p.returncode == 0 and "was not released" in p.stderr and "read-only" in p.stderr, p.stdout + p.stderr)
        A.start()
        c("the node reclaims its reserve after the crash", reserve(A)["state"] == "online")
        A.mount()
        bad = verify_files(A.mount_path, A.mount_path, written)
        c("nothing lost across the checks", not bad, bad)
        A.unmount()
        A.stop()
        p = lab.fsck(check=False)
        c("fsck clean after a clean stop", p.returncode == 0 and "read-only" in p.stderr, p.stdout + p.stderr)
    finally:
        lab.close()
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["second", "takeover", "preempt", "fsck"])
    for b in ("--nasgwd", "--cli", "--fuse", "--fsck"):
        ap.add_argument(b, required=True)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    c = {"second": cmd_second, "takeover": cmd_takeover, "preempt": cmd_preempt, "fsck": cmd_fsck}[a.command](a)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
