#!/usr/bin/env python3
"""Byte-range locks through ganesha + FSAL_NASGW, from real NFS clients in
lab namespaces (tests/lab/nfslab.py) to nasgwd on lab LUNs
(tests/integration/nasgwlab.py). The client is nasgw-nfs-lock
(tests/tools/nfs_lock.c): NFSv4.0 LOCK/LOCKT/LOCKU through libnfs, NFSv3
through NLM4. Only what a client sees is asserted, so the checks hold
whichever side arbitrates (ganesha's lock manager or nasgwd).

  basic (v4, then v3)
      client 1 holds a write lock on [0,100); client 2: a write lock on
      [50,60) is denied (naming the holder's range), one on [100,200) is
      granted, a read-lock test on [0,10) is denied; client 1 releases
      (stdin EOF) and client 2 gets [50,60); read locks from both clients
      on one range are both granted, a write lock over them is denied
  cross
      a v4 write lock denies an NLM one on the same bytes, and the reverse
  restart (v4)
      ganesha with a grace period (the other sections run graceless).
      Client 1 holds an open and a write lock on [0,100); ganesha is
      SIGKILLed and started again: it is in its grace period, and the dead
      ganesha's session still holds the lock in nasgwd (for 30 s). Client
      2's lock is refused (NFS4ERR_GRACE); client 1 reclaims its open
      (CLAIM_PREVIOUS) and its lock (reclaim): granted, nasgwd giving the
      dead session's range to the reclaim. After the grace period client 2
      is denied by the reclaimed lock; client 1 releases and client 2 gets it
  away (v4)
      client 1 holds a lock: client 2 stays denied for two lease periods
      (the holder renews its lease); client 1 is SIGKILLed: client 2 is
      denied at first, then granted once the lease has expired

ganesha runs with a short lease (nfslab GaneshaConfig(lease_lifetime=)).
Ganesha's NLM grants no lock unless it can register the client with the
server's rpc.statd (NLM4_DENIED_NOLOCKS otherwise), so the test runs
rpc.statd in the server's namespaces, next to ganesha's rpcbind
(nfslab's Server.start_statd).

  nfs_locks.py --build BUILD_DIR [--only basic-v4 basic-v3 cross restart away]
  nfs_locks.py --nasgwd X --cli X --fsal X --lock-tool X
"""

import argparse
import os
import select
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lab"))
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402

LEASE_S = 10           # ganesha's NFSv4 lease here (default 60)
GRACE_S = 10           # its grace period in the restart section (at least the lease)
SESSION_GRACE_S = 30   # nasgwd keeps a dead head's session (and its locks) this long
TOOL_TIMEOUT_S = 60    # one nasgw-nfs-lock run (it gives up on an RPC after 30 s)
FILE = "vol1/locked.bin"

failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what + ("" if cond or not detail else " -- %s" % detail), flush=True)
    if not cond:
        failures.append(what)
    return cond


# ---- the lock tool -----------------------------------------------------------

class Locker:
    """Runs nasgw-nfs-lock in client namespaces."""

    def __init__(self, tool, lab):
        self.tool = tool
        self.lab = lab
        self.holders = []

    def argv(self, client, version, op, typ, start, length, hold=False):
        return [self.tool, "--url", client.url(FILE, version), "--op", op, "--type", typ,
                "--start", str(start), "--len", str(length)] + (["--hold"] if hold else [])

    def run(self, client, version, op, typ, start, length):
        """One lock (taken and released at once) or test; returns its line."""
        p = client.run(self.argv(client, version, op, typ, start, length), check=False, timeout=TOOL_TIMEOUT_S)
        line = p.stdout.strip()
        want = {"granted": 0, "denied": 1}.get(line.split(" ")[0], 2)
        if p.returncode != want:
            line += " (exit %d, stderr %s)" % (p.returncode, p.stderr.strip()[-300:])
        return line

    def hold(self, client, version, typ, start, length, op="lock"):
        """A lock kept until release(); .line is the tool's answer. op
        "reclaim": an NFSv4.0 open and lock that Holder.send("reclaim")
        reclaims after a server restart."""
        h = Holder(client.popen(self.argv(client, version, op, typ, start, length, hold=op == "lock"),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        self.holders.append(h)
        h.line = h.read_line(TOOL_TIMEOUT_S)
        return h

    def close(self):
        for h in self.holders:
            h.kill()


class Holder:
    def __init__(self, p):
        self.p = p
        self.line = ""

    def read_line(self, timeout):
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not r:
            return "(no answer within %ds)" % timeout
        line = self.p.stdout.readline().strip()
        if not line:
            self.p.wait(timeout=10)
            return "(exited %s: %s)" % (self.p.returncode, self.p.stderr.read().strip()[-300:])
        return line

    def release(self):
        """stdin EOF: the tool unlocks and exits; returns (exit code, stderr)."""
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        try:
            rc = self.p.wait(timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return None, "did not exit within %ds of stdin EOF" % TOOL_TIMEOUT_S
        return rc, self.p.stderr.read().strip()

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def alive(self):
        return self.p.poll() is None

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def until(fn, timeout, interval=0.5):
    """Polls a remote state (a lock another client may get) with a deadline;
    returns fn()'s last value and the seconds it took."""
    t0 = time.monotonic()
    while True:
        r = fn()
        if r or time.monotonic() - t0 > timeout:
            return r, time.monotonic() - t0
        time.sleep(interval)


# ---- the scenarios -------------------------------------------------------------------

def conflict_named(line, start, length, typ):
    return line == "denied start=%d len=%d type=%s" % (start, length, typ)


def nasgwd_locks(node):
    """nasgwd's count of byte-range lock ranges (the nasgw_head_locks gauge)."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % node.metrics_port(), timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("nasgw_head_locks "):
                return float(line.split()[1])
    return None


def test_basic(lk, lab, v, node):
    c1, c2 = lab.client(1), lab.client(2)
    tag = "v%d" % v
    h1 = lk.hold(c1, v, "write", 0, 100)
    check(h1.line == "granted", "%s: client 1 holds a write lock on [0,100)" % tag, h1.line)
    n = nasgwd_locks(node)
    check(n is not None and n >= 1, "%s: the lock is held in nasgwd's lock table (nasgw_head_locks)" % tag, n)
    r = lk.run(c2, v, "lock", "write", 50, 10)
    check(r.startswith("denied"), "%s: client 2's write lock on [50,60) is denied" % tag, r)
    check(conflict_named(r, 0, 100, "write"), "%s: the denial names client 1's write lock on [0,100)" % tag, r)
    r = lk.run(c2, v, "lock", "write", 100, 100)
    check(r == "granted", "%s: client 2's write lock on [100,200) is granted" % tag, r)
    r = lk.run(c2, v, "test", "read", 0, 10)
    check(r.startswith("denied"), "%s: client 2's read-lock test on [0,10) is denied" % tag, r)
    check(h1.alive(), "%s: client 1 still holds its lock" % tag, "nasgw-nfs-lock exited")
    rc, err = h1.release()
    check(rc == 0, "%s: client 1 releases (stdin EOF: unlock, exit 0)" % tag, "exit %s %s" % (rc, err))
    r = lk.run(c2, v, "lock", "write", 50, 10)
    check(r == "granted", "%s: after the release client 2's write lock on [50,60) is granted" % tag, r)

    r1 = lk.hold(c1, v, "read", 0, 100)
    r2 = lk.hold(c2, v, "read", 0, 100)
    check(r1.line == "granted" and r2.line == "granted",
          "%s: read locks on [0,100) from both clients are both granted" % tag, (r1.line, r2.line))
    r = lk.run(c2, v, "lock", "write", 0, 10)
    check(r.startswith("denied"), "%s: a write lock on [0,10) under both read locks is denied" % tag, r)
    r = lk.run(c1, v, "test", "read", 20, 10)
    check(r == "granted", "%s: a read-lock test on [20,30) under both read locks is granted" % tag, r)
    for who, h in (("1", r1), ("2", r2)):
        rc, err = h.release()
        check(rc == 0, "%s: client %s releases its read lock" % (tag, who), "exit %s %s" % (rc, err))
    r = lk.run(c1, v, "lock", "write", 0, 100)
    check(r == "granted", "%s: with both released a write lock on [0,100) is granted" % tag, r)


def test_cross(lk, lab):
    c1, c2 = lab.client(1), lab.client(2)
    for hv, tv in ((4, 3), (3, 4)):
        h = lk.hold(c1, hv, "write", 300, 10)
        check(h.line == "granted", "cross: client 1 holds a v%d write lock on [300,310)" % hv, h.line)
        r = lk.run(c2, tv, "lock", "write", 305, 1)
        check(r.startswith("denied"), "cross: client 2's v%d write lock on [305,306) is denied" % tv, r)
        rc, err = h.release()
        check(rc == 0, "cross: client 1 releases its v%d lock" % hv, "exit %s %s" % (rc, err))
        r = lk.run(c2, tv, "lock", "write", 305, 1)
        check(r == "granted", "cross: then client 2's v%d lock is granted" % tv, r)


def restart_ganesha(server, graceless):
    """SIGKILLs ganesha and starts it again (same recovery directory), with
    or without a grace period; returns the log offset from before."""
    server.kill()
    server.config.graceless = graceless
    server.config.grace_period = None if graceless else GRACE_S
    offset = server.log_size()
    server.start_ganesha()
    return offset


def grace_over(server, offset, timeout):
    """Waits until ganesha's log says its grace period ended (its only event)."""
    ok, _ = until(lambda: "NOT IN GRACE" in server.log_since(offset), timeout, 0.2)
    return ok


def test_restart(lk, lab, server):
    c1, c2 = lab.client(1), lab.client(2)
    offset = restart_ganesha(server, graceless=False)
    check(grace_over(server, offset, GRACE_S + 20), "restart: ganesha with a grace period starts and ends it")
    h = lk.hold(c1, 4, "write", 0, 100, op="reclaim")
    check(h.line == "granted", "restart: client 1 holds an open and a v4 write lock on [0,100)", h.line)
    t_kill = time.monotonic()
    offset = restart_ganesha(server, graceless=False)
    r = lk.run(c2, 4, "lock", "write", 50, 10)
    check(r != "granted" and "GRACE" in r, "restart: in the grace period client 2's lock is refused", r)
    h.send("reclaim")
    line = h.read_line(TOOL_TIMEOUT_S)
    took = time.monotonic() - t_kill
    check(line == "reclaimed", "restart: client 1 reclaims its open and its lock in the grace period", line)
    check(took < SESSION_GRACE_S - 5, "restart: ... while nasgwd still kept the dead ganesha's session and its "
          "lock (%.1f s after the kill, the session's grace %d s)" % (took, SESSION_GRACE_S))
    check(grace_over(server, offset, GRACE_S + 20), "restart: the grace period ends")
    r = lk.run(c2, 4, "lock", "write", 50, 10)
    check(conflict_named(r, 0, 100, "write"), "restart: then client 2 is denied by client 1's reclaimed lock", r)
    rc, err = h.release()
    check(rc == 0, "restart: client 1 releases (LOCKU, CLOSE)", "exit %s %s" % (rc, err))
    r = lk.run(c2, 4, "lock", "write", 50, 10)
    check(r == "granted", "restart: then client 2's lock is granted", r)
    restart_ganesha(server, graceless=True)


def test_away(lk, lab, server):
    c1, c2 = lab.client(1), lab.client(2)
    h = lk.hold(c1, 4, "write", 0, 100)
    check(h.line == "granted", "away: client 1 holds a v4 write lock on [0,100)", h.line)
    # Two lease periods of client 2 asking: a holder that renews keeps its lock.
    last = []
    got, took = until(lambda: not last.append(lk.run(c2, 4, "lock", "write", 0, 1)) and
                      not last[-1].startswith("denied"), 2 * LEASE_S)
    check(not got, "away: client 2 stays denied for %.0f s (2 leases, %d attempts) while client 1 renews"
          % (took, len(last)), "%r after %.1f s" % (last[-1], took))
    check(h.alive(), "away: client 1's tool still holds (its lease renewals succeed)",
          h.p.stderr.read() if not h.alive() else "")
    offset = server.log_size()
    h.kill()
    t_kill = time.monotonic()
    r = lk.run(c2, 4, "lock", "write", 0, 1)
    check(r.startswith("denied"), "away: right after client 1's SIGKILL client 2 is still denied", r)
    deadline = 4 * LEASE_S
    got, _ = until(lambda: lk.run(c2, 4, "lock", "write", 0, 1) == "granted", deadline)
    after = time.monotonic() - t_kill
    check(got, "away: client 2 is granted once client 1's lease expired (%.1f s after the kill, lease %d s)"
          % (after, LEASE_S), "still denied after %d s\n--- ganesha log since the kill\n%s"
          % (deadline, server.log_since(offset)[-3000:]))
    check(after >= LEASE_S / 2, "away: the lock went with the lease, not with the connection (%.1f s)" % after)


# ---- main ---------------------------------------------------------------------------------

SECTIONS = ["basic-v4", "basic-v3", "cross", "restart", "away"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="build directory (the defaults of the paths below)")
    ap.add_argument("--nasgwd")
    ap.add_argument("--cli")
    ap.add_argument("--fsal", help="libfsalnasgw.so")
    ap.add_argument("--lock-tool", help="nasgw-nfs-lock")
    ap.add_argument("--only", nargs="*", choices=SECTIONS)
    a = ap.parse_args()
    b = os.path.abspath(a.build) if a.build else None
    paths = {"fsal": a.fsal or (b and b + "/fsal/ganesha/libfsalnasgw.so"),
             "nasgwd": a.nasgwd or (b and b + "/daemon/nasgwd"),
             "cli": a.cli or (b and b + "/cli/nasgw"),
             "lock-tool": a.lock_tool or (b and b + "/tests/tools/nasgw-nfs-lock")}
    for k, p in paths.items():
        if not p or not os.path.exists(p):
            if k == "fsal":
                print("FAIL: FSAL_NASGW is not built: no %s (deploy/ganesha-headers.sh, then reconfigure "
                      "and build target fsalnasgw)" % p)
            else:
                print("FAIL: no %s: %s (give --build or --%s)" % (k, p, k))
            return 1
    if os.geteuid() != 0:
        print("FAIL: must run as root (namespaces, tgtd)")
        return 1

    node = lab = server = lk = None
    local = "/tmp/nasgw-nfslocks-%d.bin" % os.getpid()
    try:
        node = nasgwlab.Node(bins={"nasgwd": paths["nasgwd"], "cli": paths["cli"]}, luns=2, size="512M",
                             tag="nfslk", metrics=True)
        node.start("")
        node.format(volume="vol1")
        lab = nfslab.Lab(clients=2)
        cfg = nfslab.GaneshaConfig(plugins={"nasgw": paths["fsal"]}, nasgw_socket=node.head_socket,
                                   exports=[nfslab.nasgw_export(1, "vol1", "/vol1")], lease_lifetime=LEASE_S,
                                   components={"NLM": "DEBUG"})
        server = lab.start_server(cfg)
        with open(local, "wb") as f:
            f.write(os.urandom(4096))
        lab.client(1).nfs_put(local, FILE, version=3)
        lk = Locker(paths["lock-tool"], lab)

        # Not a check (ganesha's behaviour, not nasgw's): why statd is needed.
        r = lk.run(lab.client(1), 3, "lock", "write", 0, 1)
        print("note: NLM lock without rpc.statd on the server: %s" % r, flush=True)
        server.start_statd()

        for name, fn in (("basic-v4", lambda: test_basic(lk, lab, 4, node)), ("basic-v3", lambda: test_basic(lk, lab, 3, node)),
                         ("cross", lambda: test_cross(lk, lab)), ("restart", lambda: test_restart(lk, lab, server)),
                         ("away", lambda: test_away(lk, lab, server))):
            if a.only and name not in a.only:
                continue
            print("== %s" % name, flush=True)
            try:
                fn()
            except Exception:
                traceback.print_exc()
                failures.append(name + ": exception")
            finally:
                lk.close()
    except Exception:
        traceback.print_exc()
        failures.append("setup: exception")
    finally:
        if failures and server is not None:
            print("--- ganesha log tail (%s)\n%s" % (server.log_path, server.log_tail(4000)))
        if failures and node is not None:
            print("--- nasgwd log tail\n" + node.log_tail(2000))
        if lk is not None:
            lk.close()
        if lab is not None:
            lab.close()
        if node is not None:
            node.close()
        if os.path.exists(local):
            os.remove(local)
    print("%d failure(s): %s" % (len(failures), "; ".join(failures)) if failures else "all passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
