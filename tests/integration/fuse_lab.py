#!/usr/bin/env python3
"""A nasgw volume mounted through FUSE on a lab SAN: the harness for the
file-system suites (the model-checking exerciser, crash rounds, stress-ng).

  fuse_lab.py fsx    --fuse BIN --fsx BIN [--seeds 1,2] [--ops N] [--remount-every N]
  fuse_lab.py crash  --fuse BIN [--rounds 20]
  fuse_lab.py stress --fuse BIN [--seconds 2]
  fuse_lab.py enospc --fuse BIN
  fuse_lab.py remount STATE      (used by nasgw-fsx --remount-cmd)

Each command starts its own lab (tests/lab/sanlab, owner = this process),
formats a reserve on its LUNs, mounts a volume, runs, and tears everything
down (unmount, daemon, lab) even when it fails. Prints "N passed, N failed".
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SANLAB = os.path.join(HERE, "..", "lab", "sanlab")
MOUNT_TIMEOUT_S = 30


def sh(cmd, check=True, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def is_mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


class Volume:
    """Lab + reserve + mounted volume; state saved to a file for `remount`."""

    def __init__(self, fuse, fsck=None, luns=3, size="512M", state=None):
        self.state_file = state
        if state and os.path.exists(state):
            with open(state) as f:
                self.s = json.load(f)
            return
        self.s = {"fuse": os.path.abspath(fuse), "fsck": os.path.abspath(fsck) if fsck else None,
                  "mount": "/tmp/nasgw-fuse-%d" % os.getpid(), "pid": None, "generation": 0}
        lab = json.loads(sh([SANLAB, "start", "fuse%d" % os.getpid(), "--luns", str(luns), "--size", size,
                             "--owner-pid", str(os.getpid())]).stdout)
        self.s["lab"] = lab["name"]
        self.s["urls"] = [l["url"] for l in lab["luns"]]
        os.makedirs(self.s["mount"], exist_ok=True)
        self.state_file = os.path.join("/tmp", "nasgw-fuse-%d.json" % os.getpid())
        self.mount(fmt=True)

    def save(self):
        with open(self.state_file, "w") as f:
            json.dump(self.s, f)

    def mount(self, fmt=False):
        # Each mount logs in with a new initiator name: the volume is opened
        # from the SAN alone, as another controller would after a failover.
        self.s["generation"] += 1
        cmd = [self.s["fuse"], "--volume", "vol1", "-f",
               "--initiator", "iqn.2026-11.org.nasgw:fuse-%d-%d" % (os.getpid(), self.s["generation"])]
        urls = list(self.s["urls"])
        random.shuffle(urls)
        for u in urls:
            cmd += ["--lun", u]
        if fmt:
            cmd += ["--format", "lab", "--create-volume", "--ag-mib", "16", "--record-kib", "64"]
        cmd.append(self.s["mount"])
        log = open(self.s["mount"] + ".log", "a")
        p = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        self.s["pid"] = p.pid
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not is_mounted(self.s["mount"]):
            if p.poll() is not None:
                raise RuntimeError("nasgw-fuse exited (%s); see %s.log" % (p.returncode, self.s["mount"]))
            if time.monotonic() > deadline:
                p.kill()
                raise RuntimeError("nasgw-fuse did not mount within %ds" % MOUNT_TIMEOUT_S)
            time.sleep(0.05)  # polling /proc/mounts: the mount has no event to wait on
        self.save()

    def wait_daemon(self, timeout=60):
        pid = self.s["pid"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                r, _ = os.waitpid(pid, os.WNOHANG)
                if r == pid:
                    return
            except ChildProcessError:
                if not os.path.exists("/proc/%d" % pid):
                    return
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return
            time.sleep(0.05)
        raise RuntimeError("nasgw-fuse pid %d did not exit" % pid)

    def unmount(self):
        """Clean unmount: the daemon flushes and closes the store."""
        if is_mounted(self.s["mount"]):
            sh(["fusermount3", "-u", self.s["mount"]], check=False)
        if self.s["pid"]:
            self.wait_daemon()
            self.s["pid"] = None

    def kill(self):
        """The controller dies: SIGKILL, then the kernel's mount is dropped."""
        if self.s["pid"]:
            try:
                os.kill(self.s["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.wait_daemon()
            self.s["pid"] = None
        sh(["fusermount3", "-u", "-z", self.s["mount"]], check=False)

    def fsck(self):
        """Checks the unmounted volume; raises with fsck's findings if any."""
        if not self.s["fsck"]:
            return
        cmd = [self.s["fsck"], "--initiator", "iqn.2026-11.org.nasgw:fsck-%d" % os.getpid()]
        for u in self.s["urls"]:
            cmd += ["--lun", u]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise RuntimeError("nasgw-fsck exit %d:\n%s%s" % (p.returncode, p.stdout[-3000:], p.stderr[-2000:]))

    def remount(self):
        self.unmount()
        self.fsck()
        self.mount()

    def close(self):
        try:
            self.unmount()
        except Exception:
            self.kill()
        sh([SANLAB, "stop", self.s["lab"]], check=False)
        if os.path.isdir(self.s["mount"]) and not is_mounted(self.s["mount"]):
            shutil.rmtree(self.s["mount"], ignore_errors=True)
        if os.path.exists(self.s["mount"] + ".log"):
            os.remove(self.s["mount"] + ".log")
        if self.state_file and os.path.exists(self.state_file):
            os.remove(self.state_file)


def cmd_fsx(a):
    v = Volume(a.fuse, a.fsck)
    passed = failed = 0
    try:
        for seed in [int(x) for x in a.seeds.split(",")]:
            if not is_mounted(v.s["mount"]):
                failed += 1
                break  # a remount failed: never run on the bare directory
            d = os.path.join(v.s["mount"], "fsx%d" % seed)
            os.makedirs(d)
            remount = "%s %s remount %s" % (sys.executable, os.path.abspath(__file__), v.state_file)
            p = subprocess.run([a.fsx, "--dir", d, "--seed", str(seed), "--ops", str(a.ops),
                                "--remount-every", str(a.remount_every), "--remount-cmd", remount,
                                "--check-every", str(a.check_every)])
            # The remount command changed the daemon: reload its state.
            with open(v.state_file) as f:
                v.s = json.load(f)
            if p.returncode == 0:
                passed += 1
            else:
                failed += 1
                break
    finally:
        v.close()
    return passed, failed


def cmd_remount(a):
    v = Volume(None, state=a.state)
    v.remount()
    return None


def digest(data):
    return hashlib.sha256(data).hexdigest()


CRASH_WORKLOAD = r"""
import os, sys, random, hashlib, json
root, rnd, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
d = os.path.join(root, "r%d" % rnd)
os.makedirs(d, exist_ok=True)
def say(**kw):
    print(json.dumps(kw), flush=True)
files = []
i = 0
while True:
    p = os.path.join(d, "f%d" % i)
    data = os.urandom(rng.randrange(1, 300000))
    with open(p, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    say(op="create", path=p, sha=hashlib.sha256(data).hexdigest())
    if i % 3 == 0:
        say(op="intent", kind="rename", path=p, to=p + ".r")
        os.rename(p, p + ".r")
        say(op="rename", path=p, to=p + ".r")
        p += ".r"
    files.append(p)
    if i % 5 == 4 and len(files) > 1:
        victim = files.pop(-2)
        say(op="intent", kind="unlink", path=victim)
        os.unlink(victim)
        say(op="unlink", path=victim)
    i += 1
"""


def cmd_crash(a):
    """SIGKILL the daemon at random moments of a metadata+data workload; after
    each, remount (as another initiator) and check every fsynced file. Every
    operation the workload saw complete must be there; the one in flight at
    the kill may have happened or not, but nothing else."""
    v = Volume(a.fuse, a.fsck)
    rng = random.Random(7)
    durable = {}  # path -> sha256 of content that was fsynced
    passed = failed = 0
    try:
        for rnd in range(a.rounds):
            p = subprocess.Popen([sys.executable, "-c", CRASH_WORKLOAD, v.s["mount"], str(rnd), str(rnd + 1)],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            want = rng.randrange(3, 40)
            creates = 0
            pending = None
            for line in p.stdout:
                ev = json.loads(line)
                if ev["op"] == "intent":
                    pending = ev
                    continue
                pending = None
                if ev["op"] == "create":
                    durable[ev["path"]] = ev["sha"]
                    creates += 1
                elif ev["op"] == "rename":
                    durable[ev["to"]] = durable.pop(ev["path"])
                elif ev["op"] == "unlink":
                    durable.pop(ev["path"], None)
                if creates >= want:
                    break
            v.kill()  # the node dies mid-workload
            p.kill()
            p.wait()
            v.fsck()
            v.mount()
            # The operation in flight may or may not have happened.
            if pending and pending["kind"] == "rename" and os.path.exists(pending["to"]):
                durable[pending["to"]] = durable.pop(pending["path"])
            if pending and pending["kind"] == "unlink" and not os.path.exists(pending["path"]):
                durable.pop(pending["path"], None)
            bad = []
            for path, sha in durable.items():
                try:
                    with open(path, "rb") as f:
                        if digest(f.read()) != sha:
                            bad.append("%s: content differs" % path)
                except FileNotFoundError:
                    bad.append("%s: missing" % path)
            if bad:
                failed += 1
                print("round %d: %d fsynced files wrong: %s" % (rnd, len(bad), bad[:5]))
            else:
                passed += 1
                print("round %d: killed after %d fsyncs; all %d fsynced files intact" % (rnd, creates, len(durable)))
    finally:
        v.close()
    return passed, failed


def cmd_enospc(a):
    """Fill a small reserve through FUSE: ENOSPC comes back cleanly, the
    file keeps what was written, deleting gives the space back, fsck clean."""
    import errno
    v = Volume(a.fuse, a.fsck, luns=1, size="64M")
    passed = failed = 0
    try:
        path = os.path.join(v.s["mount"], "fill")
        chunk = os.urandom(1 << 20)
        written = 0
        err = None
        with open(path, "wb", buffering=0) as f:
            while written < (1 << 30):
                try:
                    f.write(chunk)
                    written += len(chunk)
                except OSError as e:
                    err = e
                    break
        checks = []
        checks.append(("ENOSPC came back", err is not None and err.errno == errno.ENOSPC))
        checks.append(("the file holds every acknowledged MiB", os.path.getsize(path) == written))
        with open(path, "rb") as f:
            checks.append(("its content is intact", all(f.read(1 << 20) == chunk for _ in range(written >> 20))))
        st = os.statvfs(v.s["mount"])
        checks.append(("statfs shows the volume full", st.f_bavail * st.f_frsize < (1 << 20)))
        os.unlink(path)
        st2 = os.statvfs(v.s["mount"])
        checks.append(("deleting gives the space back", st2.f_bavail * st2.f_frsize >= written))
        with open(os.path.join(v.s["mount"], "again"), "wb") as f:
            f.write(chunk * 8)
        checks.append(("writing works again", os.path.getsize(os.path.join(v.s["mount"], "again")) == 8 << 20))
        v.unmount()
        v.fsck()
        checks.append(("fsck clean", True))
        for what, ok in checks:
            print("%s: %s" % ("ok" if ok else "FAILED", what))
            passed += ok
            failed += not ok
        print("filled %d MiB before ENOSPC" % (written >> 20))
    finally:
        v.close()
    return passed, failed


def cmd_stress(a):
    v = Volume(a.fuse, a.fsck)
    passed = failed = 0
    try:
        d = os.path.join(v.s["mount"], "stress")
        os.makedirs(d)
        # binderfs always fails here (no binder); the rest of the class runs.
        p = subprocess.run(["stress-ng", "--class", "filesystem", "--seq", "1", "-t", str(a.seconds),
                            "--temp-path", d, "--exclude", "binderfs", "--metrics-brief"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(p.stdout[-4000:])
        v.unmount()
        v.fsck()
        if p.returncode == 0:
            passed = 1
        else:
            failed = 1
    finally:
        v.close()
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fsx")
    f.add_argument("--fuse", required=True)
    f.add_argument("--fsx", required=True)
    f.add_argument("--fsck")
    f.add_argument("--seeds", default="1,2")
    f.add_argument("--ops", type=int, default=3000)
    f.add_argument("--remount-every", type=int, default=1000)
    f.add_argument("--check-every", type=int, default=500)
    c = sub.add_parser("crash")
    c.add_argument("--fuse", required=True)
    c.add_argument("--rounds", type=int, default=20)
    c.add_argument("--fsck")
    s = sub.add_parser("stress")
    s.add_argument("--fuse", required=True)
    s.add_argument("--seconds", type=int, default=2)
    s.add_argument("--fsck")
    e = sub.add_parser("enospc")
    e.add_argument("--fuse", required=True)
    e.add_argument("--fsck")
    r = sub.add_parser("remount")
    r.add_argument("state")
    a = ap.parse_args()
    if a.cmd == "remount":
        cmd_remount(a)
        return 0
    passed, failed = {"fsx": cmd_fsx, "crash": cmd_crash, "stress": cmd_stress, "enospc": cmd_enospc}[a.cmd](a)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
