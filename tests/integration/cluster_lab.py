#!/usr/bin/env python3
"""The controller pair on a real SAN: two nasgwd nodes in two host
namespaces on one tgtd array, Corosync between them over their own
interconnect link (sanlab --interconnect), and failures injected while a
client writes and fsyncs through the owner's FUSE head.

  cluster_lab.py kill      --rounds N   SIGKILL of the owner (nasgwd and its head):
                                        the partner takes over by itself; every
                                        acknowledged write and namespace change is
                                        there; the killed node comes back as standby
  cluster_lab.py partition --trials N   the interconnect cut with both alive: the
                                        standby never takes over, the owner keeps
                                        writing (no split brain)
  cluster_lab.py san                    the owner's SAN link cut: it fences itself,
                                        says so, and the partner takes over at once;
                                        its SAN back, it stands by for the partner
  cluster_lab.py hang                   SIGSTOP of the owner past both bounds: the
                                        partner preempts it; woken, it finds itself
                                        fenced and acknowledges nothing more
  cluster_lab.py nfs                    NFSv3, then NFSv4.1 clients writing through the pair's
                                        virtual IP while the owner's machine dies: the VIP
                                        moves, the client carries on, nothing acknowledged lost
  cluster_lab.py forward               a FUSE head on the standby, relayed to the owner
                                        (head forwarding): it carries on with no error
                                        through a SIGKILL of the owner and a giveback to
                                        the revived node; everything acknowledged reads back
  cluster_lab.py spread                 active/active front end: two VIPs, one on each
                                        node, NFS clients on both (the standby's ganesha
                                        relayed to the owner); the owner's machine dies
                                        under that load, both clients carry on; revived,
                                        it takes its VIP back once its clients are quiet
  cluster_lab.py matrix                 NSS-HA's "each node hosts one" column, VIPs spread
                                        and NFS clients on both: the standby's machine dies,
                                        its client LAN fails, the interconnect is cut, the
                                        owner's SAN is cut, the owner's machine dies; each
                                        time both clients carry on and nothing acknowledged
                                        is lost; then all heals (--matrix-rounds N)
  cluster_lab.py all                    all of the above (make test)

Outage: the time from the failure to the first successful operation
through the new owner. --json FILE writes every trial's figures.
Common: --build DIR (nasgwd, nasgw, nasgw-fuse, nasgw-fsck from it).
Prints one line per check and "N passed, N failed"; removes its lab also
when it fails (and a crashed run's lab goes at the next sanlab gc).
"""
import argparse
import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
from nasgwlab import SANLAB, Checks, Node, is_mounted, sh  # noqa: E402

# Bounds the lab runs with (docs/cluster.md explains them).
RENEW_MS, LEASE_MS = 250, 1500
HEARTBEAT_MS, NETWORK_DEAD_MS = 200, 1000
SETTLE_MS = 500
VIP = "198.18.1.50"      # the pair's client-access address on the lab LAN (sanlab --lan)
VIP2 = "198.18.1.51"     # spread: a second one, held by the node that stands by
VIP_IDLE_MS, VIP_MOVE_MAX_MS = 500, 15000  # a VIP moves to the partner when quiet this long, or after this
TAKEOVER_TIMEOUT_S = 30  # the "no trial over 30 s"
POLL_S = 0.05            # another process's state: no event to wait on
MIRROR_PORT = 7410       # the cache mirror's port on the interconnect
FORWARD_PORT = 7411      # head forwarding's
LOAD_AROUND_S = [0.0, 0.0]  # nfs --timeline: seconds of load before the failure, and until after it
TICKLES = [True]         # [cluster] tickle_acks (--no-tickles turns them off)
DOMAINS = [1]           # --domains: the domains the reserve is split into (the volumes under load in the last)
GRACE_S = 10             # reclaim: ganesha's grace period and NFSv4 lease there

DBUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when this harness dies."""
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL

CLUSTER_CONFIG = """
[reserve]
preempt_settle_ms = %d
[cluster]
enabled = true
heartbeat_interval_ms = %d
network_dead_ms = %d
vip_idle_ms = %d
vip_move_max_ms = %d
""" % (SETTLE_MS, HEARTBEAT_MS, NETWORK_DEAD_MS, VIP_IDLE_MS, VIP_MOVE_MAX_MS)


class Lab:
    def __init__(self, build, nfs=False, mirror_on=True, name=None, luns=2, size="512M", tag="cl", forward=False,
                 vips=(VIP,), reclaim=False, home=False):
        """nfs: a clients' LAN too, the pair's VIP on it, and ganesha.nfsd
        with FSAL_NASGW on each node, serving what its nasgwd exports.
        forward: head forwarding over the interconnect ([cluster]
        forward_listen/forward_peer); with it, the VIPs (nfs) are spread
        over both nodes.
        name, luns, size: the sanlab lab's (make demo runs a pair too); tag
        names the nodes (<tag>-a, <tag>-b).
        reclaim (with nfs): ganesha with a grace period, a DBus bus of its own
        per node, rpc.statd beside ganesha, and nasgwd keeping the partner's
        NFSv4 client records and NLM clients, starting ganesha's grace period
        when it takes the partner's addresses and telling the NLM clients
        (SM_NOTIFY) ([nfs] ganesha_recovery_dir, ganesha_dbus, statd_dir).
        (A node's statd outlives its machine's death here: unreachable, as
        its links are down; its ganesha clears its records at its restart.)
        home: active/active, node i serving domain i of a reserve split in
        two ([cluster] home_domains = [i])."""
        self.reclaim = reclaim
        self.ganesha_epoch = int(time.time())  # both nodes' ganesha.nfsd start with it (start_ganesha)
        self.dbus = []
        name = name or "cl%d" % os.getpid()
        info = json.loads(sh([SANLAB, "start", name, "--mode", "netns", "--luns", str(luns),
                              "--size", size, "--hosts", "2", "--interconnect"] + (["--lan"] if nfs else []) +
                             ["--owner-pid", str(os.getpid())]).stdout)
        self.name = info["name"]
        self.hosts = info["ns_hosts"]
        self.urls = [l["url"] for l in info["luns"]]
        self.lan = info.get("lan")
        self.build = build
        self.nfs_labs, self.servers = [], []
        sh([SANLAB, "corosync", self.name, "start"])
        bins = {"nasgwd": build + "/daemon/nasgwd", "cli": build + "/cli/nasgw",
                "fuse": build + "/fsal/fuse/nasgw-fuse", "fsck": build + "/fs/nasgw-fsck"}
        self.nodes = [Node(bins, urls=self.urls, tag="%s-%s" % (tag, t), netns=h) for t, h in zip("ab", self.hosts)]
        self.config = CLUSTER_CONFIG
        if nfs:
            import nfslab
            short = "cl%d" % (os.getpid() % 100000) if name.startswith("cl") else name
            self.nfs_labs = [nfslab.Lab(name="%s-%d" % (short, i), clients=0, server_ns=h)
                             for i, h in enumerate(self.hosts)]
            self.config += 'vips = [%s]\nvip_interface = "front0"\n' % ", ".join('"%s/24"' % v for v in vips)
        for i, n in enumerate(self.nodes):
            n.s["renew_ms"], n.s["lease_ms"] = RENEW_MS, LEASE_MS
            # The cache mirror over the interconnect (sanlab: host i is 198.18.0.(1+i)).
            mirror = 'mirror_listen = "198.18.0.%d:%d"\nmirror_peer = "198.18.0.%d:%d"\n' % (
                1 + i, MIRROR_PORT, 2 - i, MIRROR_PORT) if mirror_on else ""
            if home:
                mirror += "home_domains = [%d]\n" % i
            if forward:
                mirror += 'forward_listen = "198.18.0.%d:%d"\nforward_peer = "198.18.0.%d:%d"\n' % (
                    1 + i, FORWARD_PORT, 2 - i, FORWARD_PORT)
            if nfs:
                n.s["extra_config"] = self.config + mirror + "[nfs]\nexports_file = %s\nganesha_pid_file = %s\n" % (
                    json.dumps(os.path.join(n.s["dir"], "ganesha-exports.conf")),
                    json.dumps(os.path.join(self.nfs_labs[i].dir, "ganesha.pid")))
                if reclaim:
                    n.s["extra_config"] += "ganesha_recovery_dir = %s\nganesha_dbus = %s\nstatd_dir = %s\n" % (
                        json.dumps(os.path.join(self.nfs_labs[i].dir, "recov")),
                        json.dumps("unix:path=" + self.dbus_socket(i)),
                        json.dumps(os.path.join(self.nfs_labs[i].dir, "statd")))
            else:
                n.s["extra_config"] = self.config + mirror
            n.save()

    def start_pair(self, **format_args):
        """A formats and owns the reserve (split into DOMAINS[0] domains);
        B starts as its standby."""
        a, b = self.nodes
        a.start(a.s["extra_config"])
        format_args.setdefault("domains", DOMAINS[0])
        a.format(**format_args)
        b.start(b.s["extra_config"])
        wait_for(lambda: state(b) == "standby", 10, "B standby")
        # Both heartbeats of the owner live on B before any failure.
        wait_for(lambda: cluster(b).get("verdict") == "owner-alive", 10, "B hears A")
        return a, b

    def san_link(self, i, up):
        sh(["ip", "-n", self.hosts[i], "link", "set", "eth0", "up" if up else "down"])

    def fsck(self):
        cmd = ["ip", "netns", "exec", self.hosts[0], self.nodes[0].s["bins"]["fsck"],
               "--initiator", "iqn.2026-11.org.nasgw:fsck-%d" % os.getpid()]
        for u in self.urls:
            cmd += ["--lun", u]
        return sh(cmd, check=False, timeout=300)

    def dbus_socket(self, i):
        return os.path.join(self.nfs_labs[i].dir, "dbus.sock")

    def start_dbus(self, i):
        """A DBus bus of node i's own (ganesha's admin interface is on the
        system bus, of which a machine has one and the lab's nodes share a
        machine)."""
        conf = os.path.join(self.nfs_labs[i].dir, "dbus.conf")
        with open(conf, "w") as f:
            f.write(DBUS_CONFIG % self.dbus_socket(i))
        log = open(os.path.join(self.nfs_labs[i].dir, "dbus.log"), "ab")
        p = subprocess.Popen(["dbus-daemon", "--config-file=" + conf, "--nofork", "--nopidfile"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                             preexec_fn=die_with_parent)
        log.close()
        self.dbus.append(p)
        wait_for(lambda: os.path.exists(self.dbus_socket(i)) or p.poll() is not None, 10, "dbus-daemon %d" % i)
        if p.poll() is not None:
            raise RuntimeError("dbus-daemon exited: %s" % open(os.path.join(self.nfs_labs[i].dir, "dbus.log")).read())

    def start_ganesha(self):
        """ganesha.nfsd in each host namespace, on its node's head socket and
        exports file (nasgwd signals it through the pid file)."""
        import nfslab
        fsal = self.build + "/fsal/ganesha/libfsalnasgw.so"
        for i, n in enumerate(self.nodes):
            exports = os.path.join(n.s["dir"], "ganesha-exports.conf")
            if not os.path.exists(exports):
                open(exports, "w").close()  # a standby serves nothing until it takes over
            grace, env = {}, {}
            if self.reclaim:
                self.start_dbus(i)
                env = {"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=" + self.dbus_socket(i)}
                grace = {"graceless": False, "grace_period": GRACE_S, "lease_lifetime": GRACE_S,
                         "components": {"NLM": "DEBUG"}}
            cfg = nfslab.GaneshaConfig(plugins={"nasgw": fsal}, nasgw_socket=n.head_socket, exports_file=exports,
                                       **grace)
            # Both with one epoch, as two ganesha.nfsd started in the same
            # second (revived ones too): Ganesha's NFSv3 write verifier is its
            # epoch, and FSAL_NASGW must make the two differ, or a v3 client
            # takes the survivor's COMMIT as covering UNSTABLE writes only the
            # dead node held (nfskill).
            self.servers.append(self.nfs_labs[i].start_server(cfg, env=env, args=["-E", str(self.ganesha_epoch)]))
            if self.reclaim:
                self.servers[-1].start_statd()

    def client(self, addr=VIP):
        """The LAN's client namespace, as an nfslab client of `addr` (a VIP)."""
        import nfslab

        class LanLab:
            st = {"clients": [{"ns": self.lan["client_ns"], "addr": self.lan["client_addr"]}]}
            server_addr = addr
        return nfslab.Client(LanLab(), 1)

    def panic(self, i):
        """Node i dies as a machine does: its links gone first (so nothing
        it does from then on reaches anyone: no FIN from its dying heads
        tells a client its connection ended), then nasgwd, its heads and
        corosync SIGKILLed."""
        for dev in ("front0", "ic0", "eth0"):
            sh(["ip", "-n", self.hosts[i], "link", "set", dev, "down"], check=False)
        self.nodes[i].kill()
        if i < len(self.servers):
            self.servers[i].kill()
        sh([SANLAB, "corosync", self.name, "kill", "--host", str(i)])

    def close(self):
        for p in self.dbus:
            if p.poll() is None:
                p.kill()
            p.wait()
        for nl in self.nfs_labs:
            try:
                nl.close()
            except Exception as e:
                print("close: %s" % e)
        for n in self.nodes:
            try:
                n.close()
            except Exception as e:  # the lab must go anyway
                print("close: %s" % e)
        sh([SANLAB, "stop", self.name], check=False)


def state(node):
    p = node.cli("reserve", "status", json_out=True, check=False)
    if isinstance(p, dict):
        return p["reserve"]["state"]
    return "unreachable"


def was_fenced(node):
    """Fenced, or fenced and then standing by for the new owner (a pair's
    fenced node does that once it sees the new owner renewing)."""
    p = node.cli("reserve", "status", json_out=True, check=False)
    if not isinstance(p, dict):
        return False
    r = p["reserve"]
    return r["state"] == "fenced" or (r["state"] == "standby" and "fenced earlier" in r.get("reason", ""))


def cluster(node):
    r = node.cli("cluster", "status", json_out=True, check=False)
    if not isinstance(r, dict):
        return {}
    return r.get("cluster", r)


def wait_for(fn, timeout, what, fail=True):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            if not fail:
                return v
            raise RuntimeError("timed out after %ds waiting for %s" % (timeout, what))
        time.sleep(POLL_S)


class Writer(threading.Thread):
    """Writes and fsyncs 16 KiB files through a FUSE mount, renames and
    removes some; records each change once it is acknowledged (fsync or the
    call returned). Stops at the first error (its node died or is fenced)."""

    def __init__(self, root, prefix, retry=False):
        """retry: a call that fails with EAGAIN (a relayed connection cut
        while a non-idempotent call was in flight: done or not) is looked
        at and done again if it was not, as an application would."""
        super().__init__(daemon=True)
        self.root, self.prefix, self.retry = root, prefix, retry
        self.retried = 0
        self.max_gap = 0.0   # the longest time between two acknowledged changes
        self.last_ack = None
        self.files = {}      # name -> sha256 of what an acknowledged write left
        self.gone = set()    # names an acknowledged unlink or rename removed
        # The change in flight when the node died: done or not, both are
        # right (it was never acknowledged). ("rename", old, new) or
        # ("unlink", name).
        self.pending = None
        self.acked = 0
        self.error = None
        self.stop_flag = threading.Event()
        self.progress = threading.Condition()

    def _do(self, fn, done=lambda: False, again=(errno.EAGAIN,)):
        """fn(); with retry, an errno of `again` means "done or not" (EAGAIN)
        or "not durable: do it again" (EIO from fsync): done() says which."""
        for attempt in range(50):
            try:
                return fn()
            except OSError as e:
                if not self.retry or e.errno not in again or attempt == 49:
                    raise
                self.retried += 1
                if done():
                    return None
                time.sleep(0.1)

    def _write(self, name, data):
        with open(os.path.join(self.root, name), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            self._mounted(os.fstat(f.fileno()))

    def _mounted(self, st=None):
        """Raises ENOTCONN unless `st` (default: the root's) is on the mount
        the writer started on: once a dead node's head is unmounted (lazily),
        a call that went to the directory beneath would succeed there, and
        must not count as acknowledged."""
        if (st or os.stat(self.root)).st_dev != self.dev:
            raise OSError(errno.ENOTCONN, "the mount at %s is gone" % self.root)

    def _fsync_dir(self):
        dfd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def run(self):
        i = 0
        p = lambda n: os.path.join(self.root, n)  # noqa: E731
        try:
            self.dev = os.stat(self.root).st_dev
            while not self.stop_flag.is_set():
                name = "%s-%05d" % (self.prefix, i)
                data = os.urandom(16 << 10)
                # fsync's EIO: unstable writes the dead owner held were lost
                # (a new write verifier), never acknowledged: written again.
                self._do(lambda: self._write(name, data), again=(errno.EAGAIN, errno.EIO))
                self.files[name] = hashlib.sha256(data).hexdigest()
                if i % 5 == 4:
                    old = "%s-%05d" % (self.prefix, i - 1)
                    new = old + ".renamed"
                    self.pending = ("rename", old, new)
                    self._do(lambda: os.rename(p(old), p(new)),
                             lambda: not os.path.exists(p(old)) and os.path.exists(p(new)))
                    self._do(self._fsync_dir)
                    self._mounted()
                    self.files[new] = self.files.pop(old)
                    self.gone.add(old)
                    self.pending = None
                if i % 7 == 6:
                    old = "%s-%05d" % (self.prefix, i - 2)
                    if old in self.files:
                        self.pending = ("unlink", old)
                        self._do(lambda: os.unlink(p(old)), lambda: not os.path.exists(p(old)))
                        self._do(self._fsync_dir)
                        self._mounted()
                        del self.files[old]
                        self.gone.add(old)
                        self.pending = None
                i += 1
                now = time.monotonic()
                with self.progress:
                    if self.last_ack is not None:
                        self.max_gap = max(self.max_gap, now - self.last_ack)
                    self.last_ack = now
                    self.acked += 1
                    self.progress.notify_all()
        except OSError as e:
            self.error = e

    def wait_acked(self, n, timeout=30):
        deadline = time.monotonic() + timeout
        with self.progress:
            while self.acked < n and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError("writer acknowledged %d of %d within %ds" % (self.acked, n, timeout))
                self.progress.wait(left)
            if self.error is not None and self.acked < n:
                raise RuntimeError("writer failed after %d: %s" % (self.acked, self.error))


class Probe(threading.Thread):
    """Reads one file through a FUSE mount over and over, opening it anew
    each time (the kernel then asks the head, not its page cache); records
    when each read was answered and what it said: the bytes, or an errno."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.reads = []
        self.stop_flag = threading.Event()
        self.answered = threading.Condition()

    def run(self):
        while not self.stop_flag.is_set():
            try:
                with open(self.path, "rb") as f:
                    got = f.read()
            except OSError as e:
                got = e.errno
            with self.answered:
                self.reads.append((time.monotonic(), got))
                self.answered.notify_all()
            self.stop_flag.wait(0.02)

    def wait_for(self, want, timeout=30):
        """Until a read has answered `want`."""
        deadline = time.monotonic() + timeout
        with self.answered:
            while not any(r[1] == want for r in self.reads):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError("the probe never read %r: %r" % (want, self.reads[-3:]))
                self.answered.wait(left)


def start_writer(node, prefix, acked):
    """A Writer through `node`'s FUSE head, once it has `acked` changes."""
    node.mount()
    w = Writer(node.mount_path, prefix)
    w.start()
    w.wait_acked(acked)
    return w


def stop_and_fsck(lab, c, what):
    """Both nodes stopped cleanly (heads first), then fsck of the reserve."""
    for n in lab.nodes:
        n.unmount()
        n.stop()
    p = lab.fsck()
    c("fsck clean after %s" % what, p.returncode == 0, (p.stdout + p.stderr)[-2000:])


def verify(root, writer):
    """What the writer was told is done, read back through another node.
    The one change in flight when the node died may be done or not."""
    bad = []
    files = dict(writer.files)
    if writer.pending and writer.pending[0] == "rename":
        _, old, new = writer.pending
        if not os.path.exists(os.path.join(root, old)) and old in files:
            files[new] = files.pop(old)  # it happened: the content is under the new name
    elif writer.pending and writer.pending[0] == "unlink":
        if not os.path.exists(os.path.join(root, writer.pending[1])):
            files.pop(writer.pending[1], None)  # it happened
    for name, sha in files.items():
        try:
            with open(os.path.join(root, name), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != sha:
                    bad.append("%s: other content" % name)
        except OSError as e:
            bad.append("%s: %s" % (name, e))
    for name in writer.gone:
        if os.path.exists(os.path.join(root, name)):
            bad.append("%s: still there after its acknowledged unlink or rename" % name)
    return bad


def first_op(node, t0):
    """Waits for `node` to serve: online, and a FUSE mount that answers a
    stat. Returns (seconds to online, seconds to the first served op)."""
    wait_for(lambda: state(node) == "online", TAKEOVER_TIMEOUT_S, "takeover")
    online = time.monotonic() - t0
    node.mount()
    os.stat(node.mount_path)
    return online, time.monotonic() - t0


def timeline(node):
    ev = cluster(node).get("last_takeover") or []
    return ["+%s ms %s" % (e.get("after_ms", "?"), e.get("what", "")[:160]) for e in ev]


def target_note(outages):
    """The median against the issue's 5 s target, said, not asserted: a
    median of a few trials on a shared machine is a benchmark figure
    (docs/benchmarks.md §13-14 has it over many trials). The 30 s bound is
    what a check holds every trial to."""
    return "met" if statistics.median(outages) <= 5 else "NOT met in this run"


def mirror_taken(node):
    """Entries the node's last takeover replayed from its mirror of the
    owner's log (what the array lacked), from its log."""
    found = re.findall(r"the partner's mirror of the log taken.* replayed=(\d+)", node.log_tail(10 ** 7))
    seen = getattr(node, "mirror_seen", 0)
    if len(found) < seen:  # a new log file
        seen = 0
    node.mirror_seen = len(found)
    return sum(int(n) for n in found[seen:])


def cmd_kill(lab, c, a, res):
    owner, standby = lab.start_pair()
    rng = random.Random(a.seed)
    outages, lost_rounds, standby_ok = [], [], 0
    mirrored_rounds, taken = 0, []
    for r in range(a.rounds):
        owner.mount()
        # The owner answers from the partner's memory (the cache mirror) before it dies.
        if wait_for(lambda: "partner's memory" in cluster(owner).get("mirror", ""), 10, "the mirror streaming",
                    fail=False):
            mirrored_rounds += 1
        w = Writer(owner.mount_path, "k%03d" % r)
        w.start()
        w.wait_acked(3)
        time.sleep(rng.uniform(0, 0.3))  # a kill at a random point of the load
        t0 = time.monotonic()
        owner.kill()  # nasgwd and its FUSE head, SIGKILL
        w.stop_flag.set()
        w.join(30)
        online, served = first_op(standby, t0)
        bad = verify(standby.mount_path, w)
        outages.append(served)
        taken.append(mirror_taken(standby))
        res["kill"].append({"round": r, "online_s": online, "served_s": served, "acked": w.acked,
                            "lost": len(bad), "mirror_entries_replayed": taken[-1], "timeline": timeline(standby)})
        if bad:
            lost_rounds.append((r, bad[:5]))
        standby.unmount()
        # The killed node comes back as the new owner's standby.
        owner.start(owner.s["extra_config"])
        if wait_for(lambda: state(owner) in ("standby", "online", "fenced", "failed"), 10, "restart") == "standby" \
                or state(owner) == "standby":
            standby_ok += 1
        wait_for(lambda: cluster(owner).get("verdict") == "owner-alive", 10, "the restarted node hears the owner")
        owner, standby = standby, owner
        print("round %d: online %.2f s, first op %.2f s, %d acknowledged, %d lost%s" %
              (r, online, served, w.acked, len(bad), (": %s (in flight: %s)" % (bad[:5], w.pending)) if bad else ""),
              flush=True)
    c("%d SIGKILLs of the owner under fsync load: every acknowledged write and namespace change on the partner"
      % a.rounds, not lost_rounds, lost_rounds)
    c("each killed node came back as the new owner's standby", standby_ok == a.rounds, (standby_ok, a.rounds))
    c("the owner's log streamed to the partner's memory before every kill (%d entries the array lacked were "
      "replayed from the mirror, in %d of %d takeovers)" % (sum(taken), sum(1 for t in taken if t), a.rounds),
      mirrored_rounds == a.rounds, (mirrored_rounds, a.rounds))
    worst = max(outages)
    c("client outage (kill to first served op): none over 30 s (max %.2f s; median %.2f s, target <= 5 s: %s)"
      % (worst, statistics.median(outages), target_note(outages)), worst <= TAKEOVER_TIMEOUT_S, outages)
    stop_and_fsck(lab, c, "the takeovers")


class ExtraMount:
    """A second FUSE mount of a node's head (its own mount_path holds its own
    volume): `volume` at <mount_path>-<volume>."""

    def __init__(self, node, volume):
        self.path = node.mount_path + "-" + volume
        os.makedirs(self.path, exist_ok=True)
        self.log = open(self.path + ".log", "a")
        self.p = subprocess.Popen([node.s["bins"]["fuse"], "--socket", node.head_socket, "--volume", volume, "-f",
                                   self.path], stdout=self.log, stderr=self.log, start_new_session=True)
        wait_for(lambda: is_mounted(self.path) or self.p.poll() is not None, 30, "mount of " + volume)
        if self.p.poll() is not None:
            raise RuntimeError("nasgw-fuse exited (%s); see %s.log" % (self.p.returncode, self.path))

    def close(self):
        sh(["fusermount3", "-u", self.path], check=False)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            sh(["fusermount3", "-u", "-z", self.path], check=False)
        self.log.close()


def serves(node, volume):
    v = node.cli("volume", "list", json_out=True, check=False)
    return isinstance(v, dict) and any(x.get("name") == volume for x in v.get("volumes", []))


def cmd_active(lab, c, a, res):
    """Active/active ([cluster] home_domains): a reserve split in two, A
    serving domain 0 (volume d0) and B domain 1 (vol1), a writer on each
    through its own node's head. --rounds times, A and B in turn, the node
    is SIGKILLed: the survivor takes its domain (preempting its key,
    replaying the mirror of its log) while its own writer goes on; the dead
    node's acknowledged changes are read back through the survivor. The
    dead node comes back standing by, and the survivor gives its domain
    back on its own once it is heard standing by (auto_failback), keeping
    its own online. fsck at the end."""
    nodes = lab.nodes
    an, bn = nodes
    an.start(an.s["extra_config"])
    an.format(volume=None, domains=2)  # d0, in domain 0: A serves only that one (its home) once formatted
    bn.start(bn.s["extra_config"])
    wait_for(lambda: state(bn) == "online", 20, "B online with its home domain")
    bn.cli("volume", "create", "vol1", "--record-size", "64K")
    vols = ["d0", "vol1"]
    c("each node serves its home domain's volume, not the other's",
      serves(an, "d0") and serves(bn, "vol1") and not serves(an, "vol1") and not serves(bn, "d0"),
      (an.cli("volume", "list", check=False), bn.cli("volume", "list", check=False)))
    outages, lost, kept_going, came_back, went_home, taken = [], [], 0, 0, 0, []
    for r in range(a.rounds):
        victim_i = r % 2
        victim, survivor = nodes[victim_i], nodes[1 - victim_i]
        for i, n in enumerate(nodes):
            wait_for(lambda n=n, i=i: serves(n, vols[i]), 30, "node %d serving %s" % (i, vols[i]))
            n.mount(volume=vols[i])
        if not wait_for(lambda: all("partner's memory" in cluster(n).get("mirror", "") for n in nodes), 10,
                        "both logs mirrored", fail=False):
            print("round %d: not both mirrored: %s" % (r, [cluster(n).get("mirror") for n in nodes]), flush=True)
        writers = [Writer(n.mount_path, "a%02d%d" % (r, i)) for i, n in enumerate(nodes)]
        for w in writers:
            w.start()
        for w in writers:
            w.wait_acked(3)
        t0 = time.monotonic()
        victim.kill()
        wv, ws = writers[victim_i], writers[1 - victim_i]
        wv.stop_flag.set()
        wv.join(30)
        wait_for(lambda: serves(survivor, vols[victim_i]), TAKEOVER_TIMEOUT_S, "the survivor taking the domain")
        extra = ExtraMount(survivor, vols[victim_i])
        try:
            os.stat(extra.path)
            outages.append(time.monotonic() - t0)
            bad = verify(extra.path, wv)
            if bad:
                print("round %d: the dead node's writer: pending %s, error %s, acked %d; there now: %s" % (
                    r, wv.pending, wv.error, wv.acked, sorted(os.listdir(extra.path))), flush=True)
            if bad and os.environ.get("NASGW_KEEP_LOGS"):
                for i, n in enumerate(nodes):
                    shutil.copy(n.log_path, os.environ["NASGW_KEEP_LOGS"] + "/node%d-round%d.log" % (i, r))
        finally:
            extra.close()
        taken.append(mirror_taken(survivor))
        went_on = 0
        try:
            ws.wait_acked(ws.acked + 3)
            went_on += 1
        except RuntimeError as e:
            print("round %d: the survivor's writer after the takeover: %s" % (r, e), flush=True)
        victim.start(victim.s["extra_config"])
        back = wait_for(lambda: state(victim) in ("standby", "online", "fenced", "failed") and state(victim), 10,
                        "restart")
        if back == "standby":
            came_back += 1
        else:
            print("round %d: the restarted node is %s: %s" % (r, back, victim.cli("reserve", "status", check=False)))
        wait_for(lambda: cluster(victim).get("verdict") == "owner-alive", 10, "the restarted node hears the survivor")
        # The survivor gives the domain back on its own ([cluster]
        # auto_failback), keeping its own online.
        if wait_for(lambda: serves(victim, vols[victim_i]) and serves(survivor, vols[1 - victim_i]) and
                    not serves(survivor, vols[victim_i]), 30, "each domain home again", fail=False):
            went_home += 1
        try:
            ws.wait_acked(ws.acked + 3)
            went_on += 1
        except RuntimeError as e:
            print("round %d: the survivor's writer after the failback: %s" % (r, e), flush=True)
        kept_going += went_on == 2
        ws.stop_flag.set()
        ws.join(30)
        bad += ["survivor: " + b for b in verify(survivor.mount_path, ws)]
        if ws.error is not None:
            bad.append("survivor's writer failed: %s" % ws.error)
        res["active"].append({"round": r, "victim": victim_i, "served_s": outages[-1], "acked": wv.acked,
                              "survivor_acked": ws.acked, "lost": len(bad), "mirror_entries_replayed": taken[-1],
                              "timeline": timeline(survivor)})
        if bad:
            lost.append((r, bad[:5]))
            print("--- round %d: the survivor's log\n%s\n--- the victim's log\n%s" %
                  (r, survivor.log_tail(6000), victim.log_tail(3000)), flush=True)

        survivor.unmount()
        print("round %d: node %d killed; its domain served by node %d after %.2f s; %d + %d acknowledged, %d lost%s"
              % (r, victim_i, 1 - victim_i, outages[-1], wv.acked, ws.acked, len(bad),
                 (": %s" % bad[:5]) if bad else ""), flush=True)
    c("%d SIGKILLs, one node at a time, each node serving its own domain under fsync load: every acknowledged "
      "change of both volumes there after the takeover" % a.rounds, not lost, lost)
    c("the survivor's own writer went on through each takeover and each failback", kept_going == a.rounds,
      (kept_going, a.rounds))
    c("each killed node came back standing by, and got its domain back on its own (auto failback)",
      came_back == a.rounds and went_home == a.rounds, (came_back, went_home, a.rounds))
    c("the dead node's domain served by the survivor within 30 s every time (max %.2f s, median %.2f s; "
      "%d log entries the array lacked replayed from the mirror)" % (max(outages), statistics.median(outages),
                                                                     sum(taken)),
      max(outages) <= TAKEOVER_TIMEOUT_S, outages)
    stop_and_fsck(lab, c, "the active/active takeovers")


def cmd_nfskill(lab, c, a, res):
    """The owner's machine dies (cluster_lab's panic) under nasgw-nfs-churn
    through the VIP, --nfskill-rounds times, the nodes alternating: CREATE,
    UNSTABLE WRITEs and COMMITs (written again when the verifier changed),
    FILE_SYNC WRITEs, RENAME, REMOVE, MKDIR. After each takeover the client
    checks every change it was told is done, through the VIP, on the new
    owner; the dead machine comes back as standby."""
    a_node, b_node = lab.start_pair()
    a_node.cli("export", "add", "vol1", "--no-root-squash")
    wait_for(lambda: VIP + "/24" in (cluster(a_node).get("vips_held") or []), 10, "A holds the VIP")
    lab.start_ganesha()
    # Started with one epoch (as in the same second), each ganesha's NFSv3
    # write verifier is its own all the same (FSAL_NASGW makes it so): the
    # churn's COMMITs can tell the survivor did not hold the dead node's
    # UNSTABLE writes.
    def verifiers():
        """Each ganesha's FSAL_NASGW loads, as its log says: the unique
        verifier it made, or "late" (loaded after ganesha started: its v3
        UNSTABLE writes made durable instead)."""
        out = []
        for srv in lab.servers:
            log = srv.log_tail(10 ** 7)
            out.append(re.findall(r"FSAL_NASGW: the NFSv3 write verifier is ([0-9a-f]{16})", log) +
                       ["late"] * len(re.findall(r"FSAL_NASGW: loaded after ganesha.nfsd started", log)))
        return out
    tool = os.path.join(lab.build, "tests", "tools", "nasgw-nfs-churn")
    client = lab.client(VIP)
    rng = random.Random(a.seed)
    lost_rounds, outages, back, rewrites, steps = [], [], 0, 0, 0
    for r in range(a.nfskill_rounds):
        owner_i = 0 if state(lab.nodes[0]) == "online" else 1
        other = lab.nodes[1 - owner_i]
        stop = "/tmp/nasgw-cl-churn-stop-%d" % os.getpid()
        prog = "/tmp/nasgw-cl-churn-progress-%d" % os.getpid()
        for f in (stop, prog):
            if os.path.exists(f):
                os.remove(f)
        p = client.popen([tool, "--url", "nfs://%s/vol1" % VIP, "--dir", "k%03d" % r, "--stop", stop,
                          "--progress", prog, "--max-s", "150"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        try:
            wait_for(lambda: progress(prog) >= 20 or p.poll() is not None, 60, "churn steps through the VIP")
            time.sleep(rng.uniform(0, 0.3))  # the machine dies at a random point of the load
            before = progress(prog)
            t0 = time.monotonic()
            lab.panic(owner_i)
            wait_for(lambda: state(other) == "online", TAKEOVER_TIMEOUT_S, "takeover")
            online = time.monotonic() - t0
            wait_for(lambda: progress(prog) >= before + 20 or p.poll() is not None, 90,
                     "churn steps after the takeover")
        finally:
            open(stop, "w").close()
            try:
                out, err = p.communicate(timeout=200)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            for f in (stop, prog):
                if os.path.exists(f):
                    os.remove(f)
        try:
            o = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            o = {"lost_count": -1, "error": "no report: exit %s, %s" % (p.returncode, err[-500:])}
        gap = max(o.get("gaps") or [0.0])
        outages.append(gap)
        rewrites += o.get("rewrites", 0)
        steps += o.get("steps", 0)
        res["nfskill"].append({"round": r, "online_s": online, "client_outage_s": gap, "report": o,
                               "timeline": timeline(other)})
        if p.returncode != 0 or o.get("lost_count") != 0 or o.get("error"):
            lost_rounds.append((r, p.returncode, o.get("error"), o.get("lost"), err[-300:]))
        print("round %d: online %.2f s, longest stretch without a reply %.2f s, %s steps, %s rewritten, "
              "%s lost" % (r, online, gap, o.get("steps"), o.get("rewrites"), o.get("lost_count")), flush=True)
        back += revive(lab, owner_i)
    # Every ganesha that served (the standby's loads FSAL_NASGW at the
    # takeover's reload) had its own.
    seen = verifiers()
    unique = [set(v for v in vs if v != "late") for vs in seen]
    c("each node's ganesha answered NFSv3 with a write verifier of its own, though all started with epoch %d, or "
      "(FSAL_NASGW loaded after ganesha started) made UNSTABLE writes durable" % lab.ganesha_epoch,
      seen[0] and seen[1] and not unique[0] & unique[1], seen)
    c("%d deaths of the owner's machine under NFSv3 churn through the VIP (UNSTABLE WRITEs and COMMITs, "
      "FILE_SYNC WRITEs, CREATE, RENAME, REMOVE, MKDIR; %d steps, %d COMMITs whose verifier changed written "
      "again): every acknowledged change checked by the client on the new owner" %
      (a.nfskill_rounds, steps, rewrites), not lost_rounds, lost_rounds)
    c("each dead node, back, stood by (%d of %d)" % (back, a.nfskill_rounds), back == a.nfskill_rounds, back)
    worst = max(outages) if outages else 0.0
    c("client outage (longest stretch without a reply): none over 30 s (max %.2f s; median %.2f s, target <= 5 s: "
      "%s)" % (worst, statistics.median(outages or [0.0]), target_note(outages or [0.0])),
      worst <= TAKEOVER_TIMEOUT_S, outages)
    stop_and_fsck(lab, c, "the NFS kills")


def cmd_partition(lab, c, a, res):
    a_node, b_node = lab.start_pair()
    w = start_writer(a_node, "p", 3)
    window = 2 * max(NETWORK_DEAD_MS, LEASE_MS) / 1000.0 + 1.0
    took, verdicts = [], set()
    for t in range(a.trials):
        sh([SANLAB, "interconnect", lab.name, "0", "down"])
        before = w.acked
        # Watch B for a stated window (twice the longer bound plus a second):
        # a wrong takeover would have happened by then.
        end = time.monotonic() + window
        while time.monotonic() < end:
            st = state(b_node)
            if st != "standby":
                took.append((t, st))
                break
            verdicts.add(cluster(b_node).get("verdict"))
            time.sleep(0.1)
        kept_writing = w.acked > before and w.error is None
        sh([SANLAB, "interconnect", lab.name, "0", "up"])
        wait_for(lambda: cluster(b_node).get("verdict") == "owner-alive", 20, "the interconnect back")
        res["partition"].append({"trial": t, "b_state_ok": not took or took[-1][0] != t,
                                 "acked_during": w.acked - before})
        if not kept_writing:
            took.append((t, "owner stopped writing: %s" % w.error))
    c("%d interconnect cuts with both nodes alive: the standby never took over, the owner kept writing"
      % a.trials, not took, took)
    c("the standby reported the cut (network-silent) and did nothing", "network-silent" in verdicts, verdicts)
    w.stop_flag.set()
    w.join(30)
    a_node.unmount()
    a_node.mount()
    bad = verify(a_node.mount_path, w)
    c("every acknowledged write of the owner is there after the cuts", not bad, bad[:5])
    stop_and_fsck(lab, c, "the cuts")


def cmd_san(lab, c, a, res):
    """The owner's SAN link cut while the interconnect stays (its disk
    heartbeat blocked, both nodes alive), --san-trials times, the roles
    alternating: the owner must fence itself before the partner takes over
    (never two writers), every write it acknowledged is on the partner, and
    with its SAN back it stands by and never serves by itself."""
    lab.start_pair()
    nodes = lab.nodes
    wrong, onlines = [], []
    for t in range(a.san_trials):
        o = 0 if state(nodes[0]) == "online" else 1
        owner, other = nodes[o], nodes[1 - o]
        owner.unmount()  # mounted by the trial before, when it took over
        w = start_writer(owner, "s%02d" % t, 5)
        t0 = time.monotonic()
        lab.san_link(o, False)  # the owner's SAN path down; the interconnect stays
        try:
            online, served = first_op(other, t0)
            onlines.append(online)
            fenced = wait_for(lambda: was_fenced(owner), 10, "the owner fenced", fail=False)
            w.stop_flag.set()
            w.join(60)
            bad = verify(other.mount_path, w)
        finally:
            lab.san_link(o, True)
        res["san"].append({"trial": t, "online_s": online, "served_s": served, "acked": len(w.files),
                           "lost": len(bad), "timeline": timeline(other)})
        # Back on the SAN, it sees the new owner renewing and stands by; it
        # never serves again by itself.
        back = wait_for(lambda: state(owner) == "standby" and was_fenced(owner), 10, "the fenced node standby",
                        fail=False)
        served_by = [n.s["tag"] for n in nodes if state(n) == "online"]
        if not fenced or bad or not back or served_by != [other.s["tag"]] or served > TAKEOVER_TIMEOUT_S:
            wrong.append((t, fenced, bad[:5], back, served_by, round(served, 2)))
        owner.unmount()
        wait_for(lambda: cluster(owner).get("verdict") == "owner-alive", 20, "the fenced node hears the new owner")
        print("trial %d: the partner online %.2f s, first op %.2f s, %d acknowledged, %d lost" %
              (t, online, served, len(w.files), len(bad)), flush=True)
    c("%d cuts of the owner's SAN (its disk heartbeat blocked, both nodes alive): the owner fenced itself, the "
      "partner took over (online median %.2f s, max %.2f s), every write the owner acknowledged was on the partner, "
      "and the fenced node, its SAN back, stood by" % (a.san_trials, statistics.median(onlines), max(onlines)),
      not wrong, wrong)
    o = 0 if state(nodes[0]) == "online" else 1
    nodes[1 - o].kill()
    nodes[1 - o].start(nodes[1 - o].s["extra_config"])
    c("restarted, the last fenced node stands by for the owner", state(nodes[1 - o]) == "standby",
      state(nodes[1 - o]))
    stop_and_fsck(lab, c, "the SAN cuts")


def cmd_hang(lab, c, a, res):
    a_node, b_node = lab.start_pair()
    w = start_writer(a_node, "h", 5)
    # A reader of one file through the owner: the read it has waiting when
    # the owner wakes must not be answered from the owner's memory once the
    # partner has changed the file. The outcome is checked, whichever stops
    # it here (the watchdog, at once on waking, usually does); the lease
    # check on every answer for a request caught mid-way by the hang is
    # HeadTest.PastItsLeaseANodeAnswersNothingFromWhatItHolds's
    # (docs/ownership.md, "Answers need the lease too").
    before, after = b"before the hang", b"after the takeover"
    with open(os.path.join(a_node.mount_path, "probe"), "wb") as f:
        f.write(before)
        f.flush()
        os.fsync(f.fileno())
    probe = Probe(os.path.join(a_node.mount_path, "probe"))
    probe.start()
    probe.wait_for(before)
    pid = a_node.s["daemon_pid"]
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)  # a hung node: its corosync stays up, nasgwd says nothing
    changed = None
    try:
        online, served = first_op(b_node, t0)
        res["hang"].append({"online_s": online, "served_s": served, "timeline": timeline(b_node)})
        c("the owner hung: the partner took over (online %.2f s, first op %.2f s)" % (online, served),
          served <= TAKEOVER_TIMEOUT_S, timeline(b_node))
        with open(os.path.join(b_node.mount_path, "probe"), "wb") as f:
            f.write(after)
            f.flush()
            os.fsync(f.fileno())
        changed = time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)
    c("woken, the hung node finds itself fenced (and then stands by)",
      wait_for(lambda: was_fenced(a_node), 15, "A fenced"), state(a_node))
    c("... and the partner serves", state(b_node) == "online", state(b_node))
    probe.stop_flag.set()
    probe.join(30)
    late = [r for r in probe.reads if changed is not None and r[0] > changed]
    c("woken, the hung node answered no read from what it held after the partner changed the file "
      "(%d reads answered after, errors %s)" % (len(late), sorted({r[1] for r in late if isinstance(r[1], int)})),
      not probe.is_alive() and changed is not None and not any(r[1] == before for r in late),
      [r for r in late if r[1] == before][:3])
    w.stop_flag.set()
    w.join(60)
    bad = verify(b_node.mount_path, w)
    c("every write the hung node acknowledged (%d, before or after the hang) is on the partner" % len(w.files),
      not bad, bad[:5])
    stop_and_fsck(lab, c, "the hang")


# An NFS client through the VIP: writes 8 KiB files (each one whole, closed)
# until the stop file appears; a failed call is made again on a new
# connection (to whatever node holds the VIP by then). Records what was
# acknowledged and every stretch without a successful call over a second.
NFS_LOAD = """
import hashlib, time, nfs_rs
url = 'nfs://%s/%s?version=%s' % (ARGS['server'], ARGS['export'].lstrip('/'), ARGS['version'])
c, i, acked, gaps, errors, times = None, 0, {}, [], [], []
last_ok = time.monotonic()
end = last_ok + ARGS['max_s']
while not os.path.exists(ARGS['stop']) and time.monotonic() < end:
    name = '%s-%05d' % (ARGS['prefix'], i)
    data = os.urandom(8192)
    try:
        if c is None:
            c = nfs_rs.Client.connect(url)
        with c.open(name, 'wb') as f:
            f.write(data)
        now = time.monotonic()
        if now - last_ok > 1.0:
            gaps.append(round(now - last_ok, 3))
        last_ok = now
        times.append(round(time.time(), 3))
        acked[name] = hashlib.sha256(data).hexdigest()
        i += 1
        with open(ARGS['progress'], 'w') as p:
            p.write(str(i))
    except Exception as e:
        errors.append(type(e).__name__)
        try:
            c.close()
        except Exception:
            pass
        c = None
        time.sleep(0.1)
out({'acked': acked, 'gaps': gaps, 'errors': errors[-20:], 'n': i, 'times': times})
"""

NFS_VERIFY = """
import hashlib, nfs_rs
url = 'nfs://%s/%s?version=3' % (ARGS['server'], ARGS['export'].lstrip('/'))
bad = []
with nfs_rs.Client.connect(url) as c:
    for name, sha in ARGS['acked'].items():
        try:
            with c.open(name, 'rb') as f:
                if hashlib.sha256(f.read()).hexdigest() != sha:
                    bad.append(name + ': other content')
        except Exception as e:
            bad.append('%s: %s' % (name, type(e).__name__))
out(bad)
"""


def progress(path):
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


class NfsLoad:
    """NFS_LOAD from the LAN's client namespace, in a thread: 8K files
    written through `server` until stop()."""

    def __init__(self, lab, server, version, tag):
        self.client, self.server, self.version = lab.client(server), server, version
        self.stop_path = "/tmp/nasgw-cl-stop-%d-%s" % (os.getpid(), tag)
        self.prog = "/tmp/nasgw-cl-progress-%d-%s" % (os.getpid(), tag)
        self.result, self.out = {}, {}
        args = {"server": server, "export": "/vol1", "version": version, "prefix": tag, "stop": self.stop_path,
                "progress": self.prog, "max_s": 120}

        def load():
            try:
                self.result["out"] = self.client.python(NFS_LOAD, args, timeout=180)
            except Exception as e:
                self.result["error"] = repr(e)
        self.t = threading.Thread(target=load, daemon=True)
        self.t.start()

    def progress(self):
        return progress(self.prog)

    def wait(self, n, what, timeout=60):
        wait_for(lambda: self.progress() >= n or "error" in self.result, timeout, what)

    def stop(self):
        open(self.stop_path, "w").close()
        self.t.join(200)
        for f in (self.stop_path, self.prog):
            if os.path.exists(f):
                os.remove(f)
        self.out = (self.result.get("out") or [{}])[0]
        return self.out

    def longest_gap(self):
        gaps = self.out.get("gaps") or []
        return max(gaps) if gaps else 0.0

    def verify(self):
        """What the client was told is written, read back through its address."""
        if not self.out.get("acked"):
            return ["no acknowledged writes"]
        return self.client.python(NFS_VERIFY, {"server": self.server, "export": "/vol1", "acked": self.out["acked"]},
                                  timeout=180)[0]


def nfs_round(lab, c, res, owner_i, version, failure="panic"):
    """One failover under NFS load through the VIP: the owner's machine
    dies ("panic") or its clients' LAN link goes down ("lan"); the client
    carries on through the same address."""
    owner, other = lab.nodes[owner_i], lab.nodes[1 - owner_i]
    tag = "v%s-%d" % (version.replace(".", ""), owner_i)
    load = NfsLoad(lab, VIP, version, tag)
    try:
        load.wait(20, "NFS writes through the VIP")
        if TICKLES[0]:
            # The owner lists its clients' connections to the partner at its
            # next heartbeat (one made in the last heartbeat before a crash
            # is not tickled: docs/cluster.md).
            wait_for(lambda: (cluster(other).get("partner_connections") or 0) >= 1, 10,
                     "the partner knows the client's connection")
        time.sleep(LOAD_AROUND_S[0])  # --timeline: a stretch of steady load before the failure (a measured span)
        before = load.progress()
        t0 = time.monotonic()
        failed_at = time.time()  # the client's clock (same machine): its replies' times are wall times
        if failure == "panic":
            lab.panic(owner_i)
        else:
            sh(["ip", "-n", lab.hosts[owner_i], "link", "set", "front0", "down"])
        wait_for(lambda: state(other) == "online", TAKEOVER_TIMEOUT_S, "takeover")
        online = time.monotonic() - t0
        load.wait(before + 20, "NFS writes after the takeover")
        time.sleep(max(0.0, t0 + LOAD_AROUND_S[1] - time.monotonic()))  # --timeline: and after it
    finally:
        out = load.stop()
    served = load.longest_gap()  # the client's own figure: its longest stretch without a successful call
    bad = load.verify()
    tl = timeline(other)
    tickled = tickled_of(tl)
    res["nfs"].append({"version": version, "failure": failure, "online_s": online, "client_outage_s": served,
                       "acked": out.get("n"), "lost": len(bad), "errors": out.get("errors"),
                       "tickles": TICKLES[0], "tickled": tickled, "timeline": tl,
                       # Every reply the client got, in seconds from the failure (the throughput timeline).
                       "replies_s": [round(t - failed_at, 3) for t in out.get("times", [])]})
    what = "the owner's machine died" if failure == "panic" else "the owner's client LAN link went down"
    c("NFSv%s through VIP %s: %s, the partner took over (online %.2f s) and the client "
      "carried on through the same address (longest stretch without a reply %.2f s)" %
      (version, VIP, what, online, served),
      "error" not in load.result and out.get("n", 0) >= before + 20 and served <= TAKEOVER_TIMEOUT_S,
      (load.result.get("error"), out.get("errors"), out.get("gaps")))
    c("NFSv%s: all %d acknowledged writes read back through the VIP from the new owner" % (version, out.get("n", 0)),
      not bad, bad[:5])
    vips = cluster(other).get("vips_held") or []
    c("the VIP is held by the new owner (%s)" % vips, VIP + "/24" in vips, cluster(other))
    if TICKLES[0]:
        c("the new owner sent the client's connection a tickle ACK (%s tickled)" % tickled, (tickled or 0) >= 1, tl)


def tickled_of(timeline_lines):
    """How many of the partner's client connections a takeover's timeline
    says were tickled (None: it says nothing of it)."""
    for line in timeline_lines:
        m = re.search(r"(\d+) client connections of the partner tickled", line)
        if m:
            return int(m.group(1))
    return None


def revive(lab, i, forwarded=False):
    """Node i's machine comes back: links, corosync, nasgwd (as the standby
    of whoever serves now) and ganesha. Without head forwarding, its exports
    file must be empty when ganesha starts (with it, the owner's exports are
    published there)."""
    node, other = lab.nodes[i], lab.nodes[1 - i]
    for dev in ("front0", "ic0", "eth0"):
        sh(["ip", "-n", lab.hosts[i], "link", "set", dev, "up"])
    sh([SANLAB, "corosync", lab.name, "start", "--host", str(i)])
    node.start(node.s["extra_config"])
    # Ready as a standby: no VIP, and nothing in its exports file that its
    # ganesha (started next) would fail to export.
    with open(os.path.join(node.s["dir"], "ganesha-exports.conf")) as f:
        exported = "EXPORT {" in f.read()
    ok = state(node) == "standby" and not cluster(node).get("vips_held") and (forwarded or not exported)
    lab.servers[i].start_ganesha()
    wait_for(lambda: cluster(node).get("verdict") == "owner-alive" and hears_standby(other), 20,
             "both nodes hear each other")
    return ok


def hears_standby(node):
    """node hears a partner standing by on the interconnect (what its
    giveback needs)."""
    return any(p.get("state") == "standby" and not p.get("left") and p.get("heard_ms_ago", 1e9) < NETWORK_DEAD_MS
               for p in cluster(node).get("peers") or [])


def cmd_nfs(lab, c, a, res):
    a_node, b_node = lab.start_pair()
    a_node.cli("export", "add", "vol1", "--no-root-squash")
    wait_for(lambda: VIP + "/24" in (cluster(a_node).get("vips_held") or []), 10, "A holds the VIP")
    lab.start_ganesha()
    back = 0
    rounds = max(2, a.nfs_rounds)
    for r in range(rounds):
        owner = r % 2  # A, then B, then A...: failover and failback
        nfs_round(lab, c, res, owner, "3" if r % 2 == 0 else "4.1")
        if r + 1 < rounds:
            back += revive(lab, owner)
    c("each dead node, back, stood by and held no VIP (%d of %d)" % (back, rounds - 1), back == rounds - 1, back)
    # The clients' LAN fails on the node that serves (it and its SAN are
    # fine): it gives the reserve to the partner, whose LAN is up.
    owner = (rounds - 1) % 2 ^ 1
    back_owner = revive(lab, 1 - owner)  # the last round's dead machine back first
    nfs_round(lab, c, res, owner, "3", failure="lan")
    st, held = state(lab.nodes[owner]), cluster(lab.nodes[owner]).get("vips_held")
    c("the node without its LAN gave the reserve back and stands by without the VIP",
      back_owner and st == "standby" and not held, (back_owner, st, held))
    sh(["ip", "-n", lab.hosts[owner], "link", "set", "front0", "up"])
    outages = [x["client_outage_s"] for x in res["nfs"]]
    c("NFS client outage through the VIP over %d failovers: none over 30 s (max %.2f s; median %.2f s, "
      "target <= 5 s: %s)" % (len(outages), max(outages), statistics.median(outages), target_note(outages)),
      max(outages) <= TAKEOVER_TIMEOUT_S, outages)
    stop_and_fsck(lab, c, "the NFS failovers")


def cmd_forward(lab, c, a, res):
    a_node, b_node = lab.start_pair()
    # A head on the standby: nasgw-fuse on B's socket, its calls relayed to A.
    b_node.mount()
    w = Writer(b_node.mount_path, "f", retry=True)
    w.start()
    w.wait_acked(20)
    c("a FUSE head on the standby writes, fsyncs, renames and removes through it (relayed to the owner): "
      "%d changes" % w.acked, state(b_node) == "standby" and w.error is None, (state(b_node), w.error))
    # The owner dies (nasgwd SIGKILL): B takes over; the same head carries on.
    before = w.acked
    t0 = time.monotonic()
    a_node.kill()
    wait_for(lambda: state(b_node) == "online", TAKEOVER_TIMEOUT_S, "B takes over")
    online = time.monotonic() - t0
    w.wait_acked(before + 20, timeout=60)
    kill_gap = w.max_gap
    c("the owner killed: the head on the survivor carried on with no error (online after %.2f s, longest gap "
      "between acknowledged changes %.2f s, %d calls done again after EAGAIN or fsync's EIO)" %
      (online, kill_gap, w.retried),
      w.error is None and kill_gap <= TAKEOVER_TIMEOUT_S, (w.error, kill_gap))
    # A back as standby, then a planned giveback from B to A: B's head is
    # relayed to A from then on, again without an error.
    a_node.start(a_node.s["extra_config"])
    wait_for(lambda: state(a_node) == "standby" and hears_standby(b_node), 20, "A back as standby")
    before = w.acked
    w.max_gap = 0.0
    b_node.cli("cluster", "giveback")
    wait_for(lambda: state(a_node) == "online", TAKEOVER_TIMEOUT_S, "A takes the reserve back")
    w.wait_acked(before + 20, timeout=60)
    c("giveback to the revived node: the head on the node that gave it carried on, relayed again (no error; "
      "longest gap %.2f s)" % w.max_gap, w.error is None and state(b_node) == "standby", (w.error, state(b_node)))
    w.stop_flag.set()
    w.join(30)
    bad = verify(b_node.mount_path, w)  # read back through the relay
    c("every acknowledged change (%d files) reads back through the relay" % len(w.files), not bad, bad[:5])
    res["forward"].append({"online_s": online, "kill_gap_s": kill_gap, "giveback_gap_s": w.max_gap, "acked": w.acked,
                           "retried": w.retried, "lost": len(bad)})
    stop_and_fsck(lab, c, "forwarding")


def vips_of(node):
    return [v.split("/")[0] for v in cluster(node).get("vips_held") or []]


def cmd_spread(lab, c, a, res):
    a_node, b_node = lab.start_pair()
    a_node.cli("export", "add", "vol1", "--no-root-squash")
    lab.start_ganesha()
    t0 = time.monotonic()
    spread = wait_for(lambda: vips_of(a_node) == [VIP] and vips_of(b_node) == [VIP2], 30, "the VIPs spread",
                      fail=False)
    c("the VIPs are spread over the live nodes: %s on the owner A, %s on the standby B (after %.1f s)" %
      (VIP, VIP2, time.monotonic() - t0), spread, (vips_of(a_node), vips_of(b_node)))
    with open(os.path.join(b_node.s["dir"], "ganesha-exports.conf")) as f:
        exported = "EXPORT {" in f.read()
    c("the standby publishes the owner's exports to its own ganesha (relayed to the owner)", exported)
    ca, cb = cluster(a_node), cluster(b_node)
    c("cluster status says which VIP the partner holds and where heads go",
      ca.get("vips_partner") == [VIP2 + "/24"] and cb.get("vips_partner") == [VIP + "/24"] and
      "served here" in ca.get("forwarding", "") and "relayed to the partner" in cb.get("forwarding", ""),
      (ca.get("vips_partner"), cb.get("vips_partner"), ca.get("forwarding"), cb.get("forwarding")))
    # An address removed behind nasgwd's back (an admin's `ip addr del`) is
    # added again by the node that holds it, and the other never takes it.
    sh(["ip", "-n", lab.hosts[1], "addr", "del", VIP2 + "/24", "dev", "front0"])
    back = wait_for(lambda: vips_of(b_node) == [VIP2], 10, "B adds its address again", fail=False)
    c("an address removed by hand from the node holding it is added again there (and only there)",
      back and vips_of(a_node) == [VIP], (vips_of(a_node), vips_of(b_node)))
    # NFS clients through both addresses at once; then A's machine dies.
    loads = [NfsLoad(lab, VIP, "3", "sa"), NfsLoad(lab, VIP2, "4.1", "sb")]
    try:
        for ld in loads:
            ld.wait(20, "NFS writes through %s" % ld.server)
        before = [ld.progress() for ld in loads]
        t0 = time.monotonic()
        lab.panic(0)
        wait_for(lambda: state(b_node) == "online", TAKEOVER_TIMEOUT_S, "B takes over")
        online = time.monotonic() - t0
        for ld, n in zip(loads, before):
            ld.wait(n + 20, "NFS writes through %s after the takeover" % ld.server)
    finally:
        outs = [ld.stop() for ld in loads]
    for ld, out, n in zip(loads, outs, before):
        bad = ld.verify()
        gap = ld.longest_gap()
        res["spread"].append({"vip": ld.server, "version": ld.version, "online_s": online, "client_outage_s": gap,
                              "acked": out.get("n"), "lost": len(bad), "errors": out.get("errors")})
        c("NFSv%s through %s (%s): A's machine died, B took over (online %.2f s); the client carried on "
          "(longest stretch without a reply %.2f s) and all %d acknowledged writes read back" %
          (ld.version, ld.server, "the owner's" if ld.server == VIP else "the standby's, relayed", online, gap,
           out.get("n", 0)),
          "error" not in ld.result and out.get("n", 0) >= n + 20 and gap <= TAKEOVER_TIMEOUT_S and not bad,
          (ld.result.get("error"), out.get("errors"), bad[:5]))
    c("B holds both VIPs after the takeover", sorted(vips_of(b_node)) == [VIP, VIP2], vips_of(b_node))
    # A's machine comes back: it stands by and takes its VIP back once that
    # VIP's clients are quiet.
    back = revive(lab, 0, forwarded=True)
    t0 = time.monotonic()
    moved = wait_for(lambda: vips_of(a_node) == [VIP2] and vips_of(b_node) == [VIP], 60, "the VIP moving back",
                     fail=False)
    c("A, back as standby, got %s again once idle (%.1f s after it was back), B kept %s" %
      (VIP2, time.monotonic() - t0, VIP), back and moved, (back, vips_of(a_node), vips_of(b_node)))
    ld = NfsLoad(lab, VIP2, "3", "sc")
    try:
        ld.wait(20, "NFS writes through %s on the revived standby" % VIP2)
    finally:
        out = ld.stop()
    bad = ld.verify()
    c("NFSv3 through %s on the revived standby A (relayed to B): %d writes, all read back" % (VIP2, out.get("n", 0)),
      "error" not in ld.result and out.get("n", 0) >= 20 and not bad, (ld.result.get("error"), bad[:5]))
    stop_and_fsck(lab, c, "the spread VIPs' failover")


def spread_trial(lab, c, res, what, fail, heal, expect):
    """NFS clients through both VIPs; `fail()`; both carry on; `expect()`
    says where the VIPs and the reserve are then (true when right); then
    `heal()` and the VIPs spread again over owner and standby."""
    loads = [NfsLoad(lab, VIP, "3", "m%da" % len(res["matrix"])),
             NfsLoad(lab, VIP2, "4.1", "m%db" % len(res["matrix"]))]
    try:
        for ld in loads:
            ld.wait(20, "NFS writes through %s" % ld.server)
        before = [ld.progress() for ld in loads]
        t0 = time.monotonic()
        fail()
        for ld, n in zip(loads, before):
            ld.wait(n + 20, "NFS writes through %s after: %s" % (ld.server, what), timeout=90)
        settled = wait_for(expect, 30, "the VIPs after: " + what, fail=False)
        took = time.monotonic() - t0
    finally:
        outs = [ld.stop() for ld in loads]
    ok, detail = bool(settled), []
    gaps = []
    for ld, out, n in zip(loads, outs, before):
        bad = ld.verify()
        gaps.append(ld.longest_gap())
        ok = ok and "error" not in ld.result and out.get("n", 0) >= n + 20 and gaps[-1] <= TAKEOVER_TIMEOUT_S \
            and not bad
        detail.append((ld.server, ld.result.get("error"), out.get("errors"), bad[:3]))
    res["matrix"].append({"failure": what, "client_outage_s": gaps, "settled_s": took})
    c("%s: the clients of both VIPs carried on (longest stretch without a reply %.2f s and %.2f s), every "
      "acknowledged write read back, and the service settled as it should" % (what, gaps[0], gaps[1]), ok,
      (detail, [(n.s["tag"], state(n), vips_of(n)) for n in lab.nodes]))
    heal()
    c("... healed: the VIPs spread again over the owner and the standby",
      wait_for(lambda: spread_ok(lab), 60, "the VIPs spread again", fail=False),
      [(n.s["tag"], state(n), vips_of(n)) for n in lab.nodes])


def spread_ok(lab):
    st = [state(n) for n in lab.nodes]
    if sorted(st) != ["online", "standby"]:
        return False
    owner, standby = (lab.nodes[0], lab.nodes[1]) if st[0] == "online" else (lab.nodes[1], lab.nodes[0])
    return vips_of(owner) == [VIP] and vips_of(standby) == [VIP2]


def lock_tool(lab, client, op, start, length, *extra, version=4):
    return [lab.build + "/tests/tools/nasgw-nfs-lock", "--url", client.url("vol1/locked.bin", version), "--op", op,
            "--type", "write", "--start", str(start), "--len", str(length)] + list(extra)


_line_queues = {}


def read_line(p, timeout):
    """The next line `p` prints, within `timeout` s. A thread per process
    reads its stdout into a queue: select() on the pipe would miss lines
    already in the file object's buffer (two lines written at once)."""
    import queue
    q = _line_queues.get(p)
    if q is None:
        q = _line_queues[p] = queue.Queue()

        def pump():
            for line in iter(p.stdout.readline, ""):
                q.put(line)
            q.put(None)
        threading.Thread(target=pump, daemon=True).start()
    try:
        line = q.get(timeout=timeout)
    except queue.Empty:
        return "(no answer within %ds)" % timeout
    if line is None:
        q.put(None)  # stays at the end
        return "(exited %s: %s)" % (p.wait(timeout=10), p.stderr.read().strip()[-300:])
    return line.strip() or "(an empty line)"


def reclaim_round(lab, c, victim, via, what):
    """An NFSv4.0 client holds an open and a lock through address `via`,
    and an NFSv3 client an NLM lock; node `victim`'s machine dies. The
    survivor holds the address, and its ganesha (told over DBus by nasgwd,
    with the dead node's client records that nasgwd kept) is in a grace
    period in which the v4 client reclaims both; the NLM client, told by
    the survivor's nasgwd that the server of `via` came back (SM_NOTIFY),
    reclaims its lock. Other clients meet the reclaimed locks. The victim
    comes back."""
    survivor = lab.nodes[1 - victim]
    srv = lab.servers[1 - victim]
    client = lab.client(via)
    tag = "reclaim (%s)" % what
    holder = client.popen(lock_tool(lab, client, "reclaim", 0, 100), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    nlm = client.popen(lock_tool(lab, client, "reclaim", 200, 100, version=3), stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = read_line(holder, 60)
        c("%s: a v4.0 client holds an open and a write lock on [0,100) through %s" % (tag, via), line == "granted",
          line)
        line = read_line(nlm, 60)
        c("%s: an NFSv3 client holds an NLM write lock on [200,300) through %s" % (tag, via), line == "granted",
          line)
        nlm_known = wait_for(lambda: cluster(survivor).get("partner_nlm_clients", 0) >= 1, 10,
                             "the NLM client known", fail=False)
        c("%s: the other node knows the NLM client (its partner's rpc.statd monitors it)" % tag, nlm_known,
          cluster(survivor).get("partner_nlm_clients"))
        notified = cluster(survivor).get("nlm_notified", 0)
        kept_dir = os.path.join(lab.nfs_labs[1 - victim].dir, "recov", "nasgw-partner", "v4recov")
        # Ganesha names a client's record by its address and identity, which
        # the tool makes of its pid (ip netns exec execs it: the same pid).
        me = "pid:%d t:" % holder.pid

        def kept_mine():
            return any(me in n for _, dirs, files in os.walk(kept_dir) for n in dirs + files)
        kept = wait_for(kept_mine, 10, "this client's record kept", fail=False)
        st = cluster(survivor)
        graces = st.get("takeover_graces", 0)
        c("%s: the other node keeps the record of that client (sent over the interconnect) and counts it" % tag,
          bool(kept) and st.get("partner_nfs_clients", 0) >= 1, (kept, st.get("partner_nfs_clients")))
        offset = srv.log_size()
        lab.panic(victim)
        wait_for(lambda: state(survivor) == "online" and via in vips_of(survivor), TAKEOVER_TIMEOUT_S,
                 "the survivor serves and holds %s" % via)
        graced = wait_for(lambda: "recovery event 5" in srv.log_since(offset), 15, "a takeover grace period",
                          fail=False)
        c("%s: the survivor's nasgwd started its ganesha's grace period for the dead node's clients (DBus)" % tag,
          graced and wait_for(lambda: cluster(survivor).get("takeover_graces") == graces + 1, 10, "counted",
                              fail=False), srv.log_since(offset)[-1500:])
        if via == VIP2:
            # The dead standby's ganesha held the lock in the owner's nasgwd,
            # over connections it relayed there: cut, so they give way.
            c("%s: the owner cut the connections the dead standby relayed to it" % tag,
              "cutting the connections the partner relayed here" in survivor.log_tail(200000))
        line = read_line(nlm, 30)
        c("%s: the NLM client is told the server of %s came back (SM_NOTIFY from it, naming it)" % (tag, via),
          line.startswith("notified mon_name=%s " % via), line + "\n" + survivor.log_tail(3000))
        line = read_line(nlm, 60)
        c("%s: the NLM client reclaims its lock on the survivor (NLM4_LOCK reclaim)" % tag, line == "reclaimed",
          line + "\n--- the survivor's ganesha log since\n" + srv.log_since(offset)[-6000:])
        c("%s: the survivor counts the notification answered" % tag,
          cluster(survivor).get("nlm_notified", 0) >= notified + 1, cluster(survivor).get("nlm_notified"))
        holder.stdin.write("reclaim\n")
        holder.stdin.flush()
        line = read_line(holder, 60)
        c("%s: the client reclaims its open (CLAIM_PREVIOUS) and its lock on the survivor" % tag,
          line == "reclaimed", line + "\n--- the survivor's ganesha log since\n" + srv.log_since(offset)[-3000:])
        wait_for(lambda: "NOT IN GRACE" in srv.log_since(offset), GRACE_S + 30, "the grace period ends")
        for v, start, who in ((4, 50, "v4"), (3, 250, "NLM")):
            p = client.run(lock_tool(lab, client, "lock", start, 10, version=v), check=False, timeout=90)
            c("%s: after the grace period another client is denied by the reclaimed %s lock" % (tag, who),
              p.stdout.strip().startswith("denied"), p.stdout + p.stderr)
        for p, how in ((holder, "LOCKU, CLOSE"), (nlm, "NLM4_UNLOCK")):
            p.stdin.close()
            rc = p.wait(timeout=60)
            c("%s: the client releases it (%s)" % (tag, how), rc == 0, p.stderr.read()[-500:])
        for v, start, who in ((4, 50, "v4"), (3, 250, "NLM")):
            p = client.run(lock_tool(lab, client, "lock", start, 10, version=v), check=False, timeout=90)
            c("%s: then the other client's %s lock is granted" % (tag, who), p.stdout.strip() == "granted",
              p.stdout + p.stderr)
    finally:
        for p in (holder, nlm):
            if p.poll() is None:
                p.kill()
                p.wait()
    revive(lab, victim, forwarded=True)


def cmd_reclaim(lab, c, a, res):
    """NFSv4 reclaims on the survivor, with the VIPs spread (forwarding):
    first the standby's machine dies (its client's locks are held in the
    owner's nasgwd by the standby's relayed ganesha, whose connections the
    owner cuts), then the owner's (its lock table is gone with it)."""
    a_node, b_node = lab.start_pair()
    a_node.cli("export", "add", "vol1", "--no-root-squash")
    lab.start_ganesha()
    for i, srv in enumerate(lab.servers):
        wait_for(lambda: "NOT IN GRACE" in srv.log_tail(100000), GRACE_S + 30, "ganesha %d's start-up grace" % i)
    local = os.path.join(lab.nodes[0].s["dir"], "locked.bin")
    with open(local, "wb") as f:
        f.write(os.urandom(4096))
    client = lab.client(VIP)
    wait_for(lambda: client.nfs_put(local, "vol1/locked.bin", check=False).returncode == 0, 30, "a file to lock")
    wait_for(lambda: spread_ok(lab), 60, "the VIPs spread")
    reclaim_round(lab, c, 1, VIP2, "the standby's machine died")
    wait_for(lambda: spread_ok(lab), 90, "the VIPs spread again")
    reclaim_round(lab, c, 0, VIP, "the owner's machine died")
    stop_and_fsck(lab, c, "the reclaims")


def cmd_matrix(lab, c, a, res):
    a_node, b_node = lab.start_pair()
    a_node.cli("export", "add", "vol1", "--no-root-squash")
    lab.start_ganesha()
    wait_for(lambda: spread_ok(lab), 30, "the VIPs spread")
    nodes = lab.nodes

    def owner_i():
        return 0 if state(nodes[0]) == "online" else 1

    def holds_both(i):
        return lambda: state(nodes[i]) == "online" and sorted(vips_of(nodes[i])) == [VIP, VIP2]

    for _ in range(a.matrix_rounds):
        o = owner_i()
        spread_trial(lab, c, res, "the standby's machine died", lambda: lab.panic(1 - o),
                     lambda: revive(lab, 1 - o, forwarded=True), holds_both(o))
        o = owner_i()
        spread_trial(lab, c, res, "the standby's client LAN link went down",
                     lambda: sh(["ip", "-n", lab.hosts[1 - o], "link", "set", "front0", "down"]),
                     lambda: sh(["ip", "-n", lab.hosts[1 - o], "link", "set", "front0", "up"]),
                     lambda: holds_both(o)() and state(nodes[1 - o]) == "standby" and not vips_of(nodes[1 - o]))
        o = owner_i()
        spread_trial(lab, c, res, "the interconnect was cut (both nodes alive)",
                     lambda: sh([SANLAB, "interconnect", lab.name, "0", "down"]),
                     lambda: sh([SANLAB, "interconnect", lab.name, "0", "up"]),
                     lambda: holds_both(o)() and state(nodes[1 - o]) == "standby" and not vips_of(nodes[1 - o]))
        o = owner_i()
        spread_trial(lab, c, res, "the owner's SAN link was cut", lambda: lab.san_link(o, False),
                     lambda: lab.san_link(o, True), holds_both(1 - o))
        o = owner_i()
        spread_trial(lab, c, res, "the owner's machine died", lambda: lab.panic(o),
                     lambda: revive(lab, o, forwarded=True), holds_both(1 - o))
    stop_and_fsck(lab, c, "the matrix")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command",
                    choices=["kill", "partition", "san", "hang", "nfs", "nfskill", "forward", "spread", "matrix",
                             "reclaim", "active", "all"])
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--nfs-rounds", type=int, default=2, help="failovers under NFS load (v3 and v4.1 in turn)")
    ap.add_argument("--matrix-rounds", type=int, default=1, help="matrix: rounds of its five failures")
    ap.add_argument("--nfskill-rounds", type=int, default=2, help="nfskill: deaths of the owner's machine")
    ap.add_argument("--san-trials", type=int, default=1, help="san: cuts of the owner's SAN link")
    ap.add_argument("--domains", type=int, default=1,
                    help="split the reserve into this many domains (the volumes under load in the last one)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write every trial's figures here")
    ap.add_argument("--no-tickles", action="store_true",
                    help="[cluster] tickle_acks = false: clients of a moved address find out on their own timers "
                         "(to measure what the tickles save)")
    ap.add_argument("--timeline", action="store_true",
                    help="nfs: keep the load 5 s before each failure and until 15 s after it "
                         "(for bench/cluster_chart.py --throughput-out)")
    a = ap.parse_args()
    if a.timeline:
        LOAD_AROUND_S[:] = [5.0, 15.0]
    DOMAINS[0] = a.domains
    if a.no_tickles:
        global CLUSTER_CONFIG
        CLUSTER_CONFIG += "tickle_acks = false\n"
    TICKLES[0] = not a.no_tickles
    b = os.path.abspath(a.build)
    c = Checks()
    res = {"kill": [], "partition": [], "san": [], "hang": [], "nfs": [], "nfskill": [], "forward": [], "spread": [],
           "matrix": [], "reclaim": [], "active": []}
    cmds = {"kill": cmd_kill, "partition": cmd_partition, "san": cmd_san, "hang": cmd_hang, "nfs": cmd_nfs,
            "nfskill": cmd_nfskill,
            "forward": cmd_forward, "spread": cmd_spread, "matrix": cmd_matrix, "reclaim": cmd_reclaim,
            "active": cmd_active}
    spread = ("spread", "matrix")
    for name in (["nfs", "nfskill", "reclaim", "spread", "matrix", "kill", "partition", "san", "hang", "forward"]
                 if a.command == "all"
                 else [a.command]):
        print("== %s" % name, flush=True)
        two = spread + ("reclaim",)  # the VIPs spread over both nodes, with forwarding
        lab = Lab(b, nfs=name in ("nfs", "nfskill") + two, forward=name in ("forward",) + two,
                  vips=(VIP, VIP2) if name in two else (VIP,), reclaim=name == "reclaim", home=name == "active")
        try:
            cmds[name](lab, c, a, res)
        except Exception as e:
            c("%s: ran to the end" % name, False, repr(e))
            for i, n in enumerate(lab.nodes):
                print("--- node %d log tail\n%s" % (i, n.log_tail(2500)))
            for i, srv in enumerate(lab.servers):
                print("--- node %d ganesha log tail\n%s" % (i, srv.log_tail(2500)))
        finally:
            lab.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
