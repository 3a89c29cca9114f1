#!/usr/bin/env python3
"""A nasgw volume mounted through FUSE on a lab SAN: the harness for the
file-system suites (the model-checking exerciser, crash rounds, stress-ng).

  fuse_lab.py fsx    --fuse BIN --fsx BIN [--seeds 1,2] [--ops N] [--remount-every N]
  fuse_lab.py crash  --fuse BIN [--rounds 20]
  fuse_lab.py stress --fuse BIN [--seconds 2]
  fuse_lab.py enospc --fuse BIN
  fuse_lab.py semantics --fuse BIN
  fuse_lab.py acl    --fuse BIN   (POSIX ACLs, compared with XFS in the same run)
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
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nasgwlab  # noqa: E402
from nasgwlab import Checks, Node, is_mounted  # noqa: E402


def bins(a):
    return {"fuse": a.fuse, "fsck": a.fsck, "nasgwd": a.nasgwd, "cli": a.cli}


def Volume(a, luns=3, size="512M"):
    """A node with a formatted reserve and vol1 mounted through FUSE."""
    v = Node(bins(a), luns=luns, size=size, tag="fuse")
    try:
        v.start()
        v.format()
        v.mount(options=["--writeback-cache"] if getattr(a, "writeback_cache", False) else [])
    except Exception:
        print(v.log_tail())
        v.close()
        raise
    return v


def cmd_fsx(a):
    v = Volume(a)
    passed = failed = 0
    try:
        for seed in [int(x) for x in a.seeds.split(",")]:
            if not is_mounted(v.mount_path):
                failed += 1
                break  # a remount failed: never run on the bare directory
            d = os.path.join(v.mount_path, "fsx%d" % seed)
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
    v = Node(state=a.state)
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
    v = Volume(a)
    rng = random.Random(7)
    durable = {}  # path -> sha256 of content that was fsynced
    passed = failed = 0
    try:
        for rnd in range(a.rounds):
            p = subprocess.Popen([sys.executable, "-c", CRASH_WORKLOAD, v.mount_path, str(rnd), str(rnd + 1)],
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
            v.kill()  # the node dies mid-workload: nasgwd and the head
            p.kill()
            p.wait()
            v.fsck()
            v.start()
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
    v = Volume(a, luns=1, size="64M")
    passed = failed = 0
    try:
        path = os.path.join(v.mount_path, "fill")
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
        st = os.statvfs(v.mount_path)
        checks.append(("statfs shows the volume full", st.f_bavail * st.f_frsize < (1 << 20)))
        os.unlink(path)
        st2 = os.statvfs(v.mount_path)
        checks.append(("deleting gives the space back", st2.f_bavail * st2.f_frsize >= written))
        with open(os.path.join(v.mount_path, "again"), "wb") as f:
            f.write(chunk * 8)
        checks.append(("writing works again", os.path.getsize(os.path.join(v.mount_path, "again")) == 8 << 20))
        v.unmount()
        v.stop()
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


RESTART_WORKLOAD = r"""
import errno, os, sys, json, random, hashlib
root, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
files = {}
# Until stdin says stop: random 8K..64K writes into 6 files, each fsynced
# before it counts; the model is what the file must hold. An fsync that
# fails with EIO says nasgwd restarted after the write and may have lost it
# (the write verifier changed): the workload writes it again, as an
# application that wants its data does.
import select
n = rewrites = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    name = "f%d" % rng.randrange(6)
    path = os.path.join(root, name)
    if name not in files:
        files[name] = bytearray()
    off = rng.randrange(0, 4 << 20)
    data = os.urandom(rng.choice([8192, 16384, 65536]))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    for attempt in range(4):
        os.pwrite(fd, data, off)
        try:
            os.fsync(fd)
            break
        except OSError as e:
            if e.errno != errno.EIO or attempt == 3:
                raise
            rewrites += 1
    os.close(fd)
    m = files[name]
    if len(m) < off + len(data):
        m.extend(b"\0" * (off + len(data) - len(m)))
    m[off:off + len(data)] = data
    n += 1
    if n % 20 == 0:
        print(json.dumps({"fsynced": n}), flush=True)
bad = []
for name, m in files.items():
    with open(os.path.join(root, name), "rb") as f:
        got = f.read()
    if got != bytes(m):
        bad.append(name)
print(json.dumps({"done": n, "bad": bad, "files": len(files), "rewrites": rewrites}), flush=True)
"""


def cmd_restart(a):
    """nasgwd is restarted (SIGTERM, then SIGKILL) again and again while a
    client streams fsynced writes through FUSE: the head reconnects by
    itself, the writes carry on, and every fsynced byte reads back."""
    v = Volume(a)
    passed = failed = 0
    try:
        d = os.path.join(v.mount_path, "stream")
        os.makedirs(d)
        p = subprocess.Popen([sys.executable, "-c", RESTART_WORKLOAD, d, "3"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        last = 0
        for i in range(a.restarts):
            # Let the stream make progress, then take nasgwd away under it.
            want = last + 20
            for line in p.stdout:
                last = json.loads(line).get("fsynced", last)
                if last >= want:
                    break
            sig = signal.SIGTERM if i % 2 == 0 else signal.SIGKILL
            v.stop(sig)
            v.start()
            print("restart %d (%s) after %d fsynced writes" % (i, sig.name, last))
        for line in p.stdout:  # progress after the last restart
            last = json.loads(line).get("fsynced", last)
            if last >= want + 20:
                break
        p.stdin.close()  # the workload stops, verifies, and reports
        out = p.stdout.read()
        err = p.stderr.read()
        p.wait(timeout=300)
        result = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
        if p.returncode == 0 and result and not result["bad"]:
            passed = 1
            print("%d fsynced writes over %d restarts (%d written again after fsync said EIO); all %d files "
                  "read back exact" % (result["done"], a.restarts, result["rewrites"], result["files"]))
        else:
            failed = 1
            print("workload failed (rc %s): %s %s" % (p.returncode, result, err[-2000:]))
        v.unmount()
        v.stop()
        v.fsck()
    except Exception:
        print(v.log_tail())
        raise
    finally:
        v.close()
    return passed, failed


# Run by another user than root (uid/gid 65534) in the mount: one step of
# the setuid tests, by name, on a path. Prints "ok" or the errno.
AS_USER = r"""
import os, sys
step, path = sys.argv[1], sys.argv[2]
try:
    if step == "write":
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, b"u", 0)
        os.close(fd)
    elif step == "truncate":
        os.truncate(path, 1)
    elif step == "open-trunc":
        os.close(os.open(path, os.O_WRONLY | os.O_TRUNC))
    elif step == "read":
        with open(path, "rb") as f:
            f.read()
    print("ok")
except OSError as e:
    print(e.errno)
"""


# Renames entries of a directory within it until killed, after printing
# "started" (argv: the directory, how many files f00000.. it holds).
RENAMER = r"""
import os, random, sys
d, n = sys.argv[1], int(sys.argv[2])
names = ["f%05d" % i for i in range(n)]
rng = random.Random(7)
print("started", flush=True)
k = 0
while True:
    i = rng.randrange(n)
    new = "r%d-%05d" % (k, i)
    os.rename(os.path.join(d, names[i]), os.path.join(d, new))
    names[i] = new
    k += 1
"""


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def cmd_semantics(a):
    """What a program sees through the mount, one behaviour at a time:
    durability (an fsync after nasgwd lost unstable writes fails EIO, once),
    O_TRUNC (size 0, times now, also for an empty file), setuid and setgid
    (cleared by another user's write or truncation, as Linux does; root's
    keep them); an execute-only program runs for another user; a listing
    during renames in the directory gives every file once;
    renameat2's flags (EXCHANGE, NOREPLACE; WHITEOUT is EINVAL); a
    directory removed or renamed over while open answers fstat (nlink 0)
    and is freed at close; atime under relatime, noatime, strictatime;
    file handles (open_by_handle_at) valid across a remount; holes read as
    zeros through O_DIRECT and shared mappings; punched holes, zeroed
    ranges, SEEK_DATA and SEEK_HOLE; small appends, setuid
    clearing and fsync's EIO through the write-back cache; mount options
    (-o ro and others reach the kernel, --help, an unknown option refused,
    another user refused without allow_other); every check is printed. The
    mount is shared (--allow-other), and the other user is uid 65534."""
    import errno
    v = Node(bins(a), luns=3, size="512M", tag="fuse")
    try:
        v.start()
        v.format()
        v.mount(options=["--allow-other"])
    except Exception:
        print(v.log_tail())
        v.close()
        raise
    passed = failed = 0

    def check(what, ok, detail=""):
        nonlocal passed, failed
        print("%s: %s%s" % ("ok" if ok else "FAILED", what, "" if ok else " (%s)" % (detail,)), flush=True)
        passed += ok
        failed += not ok

    def fsync_errno(fd):
        try:
            os.fsync(fd)
            return 0
        except OSError as e:
            return e.errno

    try:
        # Durability: writes are unstable until fsync. nasgwd dies between
        # a write and the fsync: the write verifier changed, the head cannot
        # tell whether the write survived, and fsync says EIO (once).
        path = os.path.join(v.mount_path, "unstable")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, b"a" * 8192, 0)
        check("fsync of unstable writes", fsync_errno(fd) == 0)
        os.pwrite(fd, b"b" * 8192, 0)
        v.stop(signal.SIGKILL)
        v.start()
        got = fsync_errno(fd)
        check("fsync after nasgwd was killed under an unstable write: EIO", got == errno.EIO, got)
        check("the next fsync succeeds (the loss was reported)", fsync_errno(fd) == 0)
        os.pwrite(fd, b"c" * 8192, 0)
        check("written again and fsynced", fsync_errno(fd) == 0)
        check("the file holds what was written last", os.pread(fd, 8192, 0) == b"c" * 8192)
        os.pwrite(fd, b"d" * 8192, 0)
        v.stop(signal.SIGTERM)
        v.start()
        got = fsync_errno(fd)
        check("fsync after a clean nasgwd restart under an unstable write: EIO too (a new verifier)",
              got == errno.EIO, got)
        os.close(fd)

        # O_TRUNC: the size goes to 0 and the modification and change times
        # to now, in nasgwd (seen after a remount, past the kernel's cache),
        # also for a file that was empty already.
        full, empty = os.path.join(v.mount_path, "full"), os.path.join(v.mount_path, "empty")
        with open(full, "wb") as f:
            f.write(b"z" * 100000)
        open(empty, "wb").close()
        for p in (full, empty):
            os.utime(p, (1000, 1000))
        before = {p: os.stat(p).st_ctime_ns for p in (full, empty)}
        for p in (full, empty):
            os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
        v.unmount()
        v.mount()
        for p, what in ((full, "a file of 100000 bytes"), (empty, "an empty file")):
            st = os.stat(p)
            check("open(O_TRUNC) of %s: size 0 (%d)" % (what, st.st_size), st.st_size == 0)
            check("open(O_TRUNC) of %s: mtime now (%d)" % (what, st.st_mtime), st.st_mtime > 1000)
            check("open(O_TRUNC) of %s: ctime moved" % what, st.st_ctime_ns > before[p])

        # setuid/setgid: a write or truncation by another user clears them
        # (setgid as it is group-executable) and moves ctime; root's do not.
        shared = os.path.join(v.mount_path, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        target = os.path.join(shared, "suid")
        with open(target, "wb") as f:
            f.write(b"root")

        def other(step):
            # (Debian's python: another user may not run the one under /root)
            return subprocess.run(["/usr/bin/python3", "-c", AS_USER, step, target], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=60,
                                  preexec_fn=as_nobody).stdout.strip()

        def fresh_mode():
            # The kernel's attribute cache is bypassed by a remount: nasgwd's
            # word, not the kernel's.
            v.unmount()
            v.mount()
            return stat.S_IMODE(os.stat(target).st_mode)

        for step in ("write", "truncate", "open-trunc"):
            os.chmod(target, 0o6777)
            ctime = os.stat(target).st_ctime_ns
            got = other(step)
            check("uid 65534's %s of a root-owned 06777 file succeeds (%s)" % (step, got), got == "ok")
            mode = fresh_mode()
            check("...and clears setuid and setgid (%o)" % mode, mode == 0o777)
            check("...and moves ctime", os.stat(target).st_ctime_ns > ctime)
        os.chmod(target, 0o6777)
        with open(target, "r+b") as f:
            f.write(b"R")
        mode = fresh_mode()
        check("root's write keeps them (CAP_FSETID) (%o)" % mode, mode == 0o6777)
        os.chmod(target, 0o6755)
        got = other("write")
        check("uid 65534 may not write a 06755 file (%s)" % got, got == str(errno.EACCES))
        mode = fresh_mode()
        check("...and the bits stay (%o)" % mode, mode == 0o6755)

        # Execute-only: another user may run a 0711 program it may not read
        # (the kernel opens it to execute and pages it in with reads), and
        # still may not open it to read.
        prog = os.path.join(shared, "prog")
        shutil.copyfile("/bin/true", prog)
        os.chmod(prog, 0o711)
        ran = subprocess.run([prog], preexec_fn=as_nobody, timeout=60, capture_output=True, text=True)
        check("uid 65534 runs a root-owned 0711 program (%d: %s)" % (ran.returncode, ran.stderr.strip()[-200:]),
              ran.returncode == 0)
        got = subprocess.run(["/usr/bin/python3", "-c", AS_USER, "read", prog], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60, preexec_fn=as_nobody).stdout.strip()
        check("...and may not read it (%s)" % got, got == str(errno.EACCES))
        os.unlink(prog)

        # A directory listed while another process renames entries within
        # it: every file comes exactly once (a renamed one by either name),
        # as an entry keeps its place when renamed in its directory.
        big = os.path.join(v.mount_path, "big")
        os.mkdir(big)
        n_files = 3000
        for i in range(n_files):
            open(os.path.join(big, "f%05d" % i), "wb").close()
        renamer = subprocess.Popen([sys.executable, "-c", RENAMER, big, str(n_files)], stdout=subprocess.PIPE,
                                   text=True)
        try:
            renamer.stdout.readline()  # "started": the renames are under way
            lists = []
            for _ in range(3):
                lists.append([e.inode() for e in os.scandir(big)])
        finally:
            renamer.kill()
            renamer.wait()
        for n, inos in enumerate(lists):
            check("listing %d during renames: %d entries, every file once (%d distinct)" %
                  (n + 1, len(inos), len(set(inos))), len(inos) == n_files and len(set(inos)) == n_files)

        # renameat2's flags: EXCHANGE trades two names atomically (also a
        # file and a directory in two directories), NOREPLACE refuses an
        # existing name, WHITEOUT (overlayfs's) is EINVAL and changes nothing.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)

        def renameat2(src, dst, flags):
            ctypes.set_errno(0)
            r = libc.renameat2(-100, src.encode(), -100, dst.encode(), ctypes.c_uint(flags))  # AT_FDCWD
            return 0 if r == 0 else ctypes.get_errno()

        noreplace, exchange, whiteout = 1, 2, 4
        x, y = os.path.join(v.mount_path, "x"), os.path.join(v.mount_path, "y")
        for p, data in ((x, b"x"), (y, b"y")):
            with open(p, "wb") as f:
                f.write(data)
        got = renameat2(x, y, exchange)
        check("RENAME_EXCHANGE of two files (%s)" % got, got == 0)
        v.unmount()
        v.mount()
        with open(x, "rb") as f1, open(y, "rb") as f2:
            pair = (f1.read(), f2.read())
        check("...the names traded their files, as nasgwd has them (%s)" % (pair,), pair == (b"y", b"x"))
        xd = os.path.join(v.mount_path, "xd")
        os.mkdir(xd)
        open(os.path.join(xd, "inside"), "wb").close()
        got = renameat2(xd, os.path.join(shared, "suid"), exchange)
        check("RENAME_EXCHANGE of a directory and a file in another directory (%s)" % got, got == 0)
        v.unmount()
        v.mount()
        moved = os.path.join(shared, "suid")
        check("...the directory is in the other one, with its entry and '..'",
              os.path.isdir(moved) and os.listdir(moved) == ["inside"] and
              os.stat(os.path.join(moved, "..")).st_ino == os.stat(shared).st_ino and os.path.isfile(xd))
        got = renameat2(x, y, noreplace)
        check("RENAME_NOREPLACE over an existing name: EEXIST (%s)" % got, got == errno.EEXIST)
        got = renameat2(x, os.path.join(v.mount_path, "white"), whiteout)
        check("RENAME_WHITEOUT: EINVAL, nothing moved (%s)" % got,
              got == errno.EINVAL and os.path.exists(x) and not os.path.exists(os.path.join(v.mount_path, "white")))

        # A directory removed, or renamed over, while a process holds it
        # open lives on: fstat answers (a directory, nlink 0), nothing may
        # be listed (an empty listing) or made (ENOENT) in it, and it is
        # freed at close.
        def files_in_use():
            st = os.statvfs(v.mount_path)
            return st.f_files - st.f_ffree

        in_use = files_in_use()
        for how in ("rmdir", "rename over"):
            held, other_dir = os.path.join(v.mount_path, "held"), os.path.join(v.mount_path, "other")
            os.mkdir(held)
            open(os.path.join(held, "gone-first"), "wb").close()
            os.unlink(os.path.join(held, "gone-first"))
            fd = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if how == "rmdir":
                    os.rmdir(held)
                else:
                    os.mkdir(other_dir)
                    os.rename(other_dir, held)
                # statx with AT_STATX_FORCE_SYNC: nasgwd's answer, not the
                # kernel's cached attributes.
                x = nasgwlab.statx_sync(fd)
                mode, nlink = x["mode"], x["nlink"]
                check("%s of an open directory: fstat still answers, from nasgwd: a directory with nlink 0 "
                      "(%o, %s)" % (how, mode, nlink), stat.S_ISDIR(mode) and nlink == 0)
                # getdents answers ENOENT for a dead directory, which glibc's
                # readdir takes as its end (as on ext4 or XFS).
                try:
                    got = os.listdir(fd)
                except OSError as e:
                    got = e.errno
                check("...listing it: nothing (%s)" % got, got == [])
                try:
                    os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
                    got = 0
                except OSError as e:
                    got = e.errno
                check("...making a file in it: ENOENT (%s)" % got, got == errno.ENOENT)
                check("...nasgwd still holds it (%d files, %d before)" % (files_in_use(), in_use),
                      files_in_use() == in_use + (1 if how == "rmdir" else 2))
            finally:
                os.close(fd)
            # FUSE sends RELEASEDIR after close(2) returns, with nothing to
            # wait on: a bounded poll.
            deadline = time.monotonic() + 30
            want = in_use + (0 if how == "rmdir" else 1)
            while files_in_use() != want and time.monotonic() < deadline:
                time.sleep(0.05)
            check("...and freed at close (%d files, want %d)" % (files_in_use(), want), files_in_use() == want)
            if how != "rmdir":
                os.rmdir(held)

        # atime, as the volume's policy says: relatime (the default) moves
        # it on a read when it is not after mtime, then not again; noatime
        # (nasgw volume set --atime) never; strictatime on every read.
        timed = os.path.join(v.mount_path, "timed")
        with open(timed, "wb") as f:
            f.write(b"t" * 100)
        past = int(time.time()) - 3600

        def atime_after_read(age=True):
            if age:
                os.utime(timed, (past, past))
            with open(timed, "rb") as f:
                f.read()
            fd = os.open(timed, os.O_RDONLY)
            try:
                return nasgwlab.statx_sync(fd)["atime"]
            finally:
                os.close(fd)

        got = atime_after_read()
        check("relatime: a read moves an atime not after mtime (%d, set %d)" % (got, past), got > past)
        os.utime(timed, (past + 7200, past))  # after mtime and ctime
        got = atime_after_read(age=False)
        check("relatime: a read leaves an atime after mtime and ctime (%d)" % got, got == past + 7200)
        vol = v.cli("volume", "set", "vol1", "--atime", "noatime", json_out=True)["volume"]
        check("volume set --atime noatime: the volume says so (%s)" % vol.get("atime"), vol.get("atime") == "noatime")
        got = atime_after_read()
        check("noatime: a read leaves atime (%d, set %d)" % (got, past), got == past)
        v.cli("volume", "set", "vol1", "--atime", "strictatime")
        os.utime(timed, (past + 7200, past))
        got = atime_after_read(age=False)
        check("strictatime: a read moves even an atime after mtime (%d)" % got, got != past + 7200 and got > past)
        bad = v.cli("volume", "set", "vol1", "--atime", "sometimes", check=False)
        check("--atime sometimes is a usage error (%d: %s)" % (bad.returncode, bad.stderr.strip()[:80]),
              bad.returncode == 2 and "relatime" in bad.stderr)
        v.cli("volume", "set", "vol1", "--atime", "relatime")

        # File handles stay valid (export_support): taken with
        # name_to_handle_at, they open the same file and directory through
        # a new mount, whose nasgw-fuse never gave those nodes out; the
        # directory's parent is found too. A removed file's handle is stale.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)

        class FileHandle(ctypes.Structure):
            _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                        ("f_handle", ctypes.c_ubyte * 128)]

        def handle_of(path):
            fh, mount_id = FileHandle(), ctypes.c_int()
            fh.handle_bytes = 128
            r = libc.name_to_handle_at(-100, path.encode(), ctypes.byref(fh), ctypes.byref(mount_id), 0)
            return fh if r == 0 else None

        def open_by_handle(fh, flags):
            mfd = os.open(v.mount_path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fd = libc.open_by_handle_at(mfd, ctypes.byref(fh), flags)
                return fd if fd >= 0 else -ctypes.get_errno()
            finally:
                os.close(mfd)

        hdir = os.path.join(v.mount_path, "handled")
        os.mkdir(hdir)
        hfile = os.path.join(hdir, "file")
        with open(hfile, "wb") as f:
            f.write(b"by handle")
        fh_file, fh_dir = handle_of(hfile), handle_of(hdir)
        check("name_to_handle_at gives handles of a file and a directory", fh_file is not None and fh_dir is not None)
        v.unmount()
        v.mount()
        fd = open_by_handle(fh_file, os.O_RDONLY)
        data = b""
        if fd >= 0:
            data = os.pread(fd, 100, 0)
            os.close(fd)
        check("after a remount, open_by_handle_at opens the file (%d) and reads it (%s)" % (fd, data),
              fd >= 0 and data == b"by handle")
        fd = open_by_handle(fh_dir, os.O_RDONLY | os.O_DIRECTORY)
        names, parent = [], None
        if fd >= 0:
            names = os.listdir(fd)
            parent = os.stat("..", dir_fd=fd).st_ino
            os.close(fd)
        check("...and the directory (%d), with its entry and its parent (%s, %s)" % (fd, names, parent),
              fd >= 0 and names == ["file"] and parent == os.stat(v.mount_path).st_ino)
        os.unlink(hfile)
        v.unmount()
        v.mount()
        fd = open_by_handle(fh_file, os.O_RDONLY)
        if fd >= 0:
            os.close(fd)
        check("a removed file's handle is stale (%d)" % fd, fd == -errno.ESTALE)
        os.rmdir(hdir)

        # Holes read as zeros through every path: O_DIRECT, a shared
        # mapping of an O_DIRECT descriptor, buffered; the map's dirty pages
        # are seen by a direct read and a direct write by the map; a file
        # cut down and extended again shows zeros where its data was (also
        # with the data in the cache, on the SAN, or written O_DIRECT).
        import mmap
        hole = os.path.join(v.mount_path, "hole")
        size = 1 << 20
        aligned = mmap.mmap(-1, 65536)  # page-aligned: O_DIRECT's buffers

        def direct_read(fd, n, off):
            view = memoryview(aligned)[:n]
            got = os.preadv(fd, [view], off)
            return bytes(view[:got])

        with open(hole, "wb") as f:
            f.write(b"\xab" * 4096)
            f.truncate(size)
            os.fsync(f.fileno())
        dfd = os.open(hole, os.O_RDWR | os.O_DIRECT)
        try:
            m = mmap.mmap(dfd, size, mmap.MAP_SHARED)
            check("hole: the map of an O_DIRECT file reads the data, then zeros",
                  m[:4096] == b"\xab" * 4096 and m[4096:size] == bytes(size - 4096))
            check("hole: an O_DIRECT read of it is zeros", direct_read(dfd, 65536, 65536) == bytes(65536))
            m[131072:131072 + 8192] = b"\x22" * 8192
            check("hole: an O_DIRECT read sees the map's dirty pages",
                  direct_read(dfd, 8192, 131072) == b"\x22" * 8192)
            aligned[:8192] = b"\x33" * 8192
            wrote = os.pwritev(dfd, [memoryview(aligned)[:8192]], 262144)
            check("hole: the map sees an O_DIRECT write into it (%d)" % wrote,
                  wrote == 8192 and m[262144:262144 + 8192] == b"\x33" * 8192 and
                  m[262144 + 8192:262144 + 65536] == bytes(65536 - 8192))
            m.close()
        finally:
            os.close(dfd)
        for how in ("cached", "on the SAN", "written O_DIRECT"):
            fd = os.open(hole, os.O_RDWR | os.O_TRUNC | (os.O_DIRECT if how == "written O_DIRECT" else 0))
            try:
                aligned[:65536] = b"\xab" * 65536
                os.pwritev(fd, [aligned], 0)
                if how == "on the SAN":
                    os.fsync(fd)
                os.ftruncate(fd, 100)
                os.ftruncate(fd, size)
                dfd = os.open(hole, os.O_RDONLY | os.O_DIRECT)
                try:
                    got = direct_read(dfd, 65536, 0)
                    m = mmap.mmap(dfd, size, mmap.MAP_SHARED, mmap.PROT_READ)
                    mapped = m[:65536]
                    m.close()
                finally:
                    os.close(dfd)
                want = b"\xab" * 100 + bytes(65436)
                check("hole: cut to 100 bytes and extended (%s): zeros after them, O_DIRECT and mapped" % how,
                      got == want and mapped == want)
            finally:
                os.close(fd)
        aligned.close()
        os.unlink(hole)

        # Sparse files: fallocate(2) punch hole and zero range free blocks
        # and read as zeros; SEEK_DATA and SEEK_HOLE find what is held;
        # posix_fallocate grows the file; modes Linux refuses are refused.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]

        def fallocate(fd, mode, off, n):
            return 0 if libc.fallocate(fd, mode, off, n) == 0 else ctypes.get_errno()

        sparse = os.path.join(v.mount_path, "sparse")
        fd = os.open(sparse, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, b"\x5a" * (1 << 20), 0)
            os.fsync(fd)
            blocks = os.fstat(fd).st_blocks
            rc = fallocate(fd, 0x01 | 0x02, 65536, 512 << 10)  # KEEP_SIZE | PUNCH_HOLE
            st = os.fstat(fd)
            check("punch hole: done, the size stays, %d blocks freed (%d)" % (blocks - st.st_blocks, rc),
                  rc == 0 and st.st_size == 1 << 20 and blocks - st.st_blocks == (512 << 10) // 512)
            data = os.pread(fd, 1 << 20, 0)
            check("punch hole: the range reads as zeros, the rest as written",
                  data == b"\x5a" * 65536 + bytes(512 << 10) + b"\x5a" * ((1 << 20) - 65536 - (512 << 10)))
            check("SEEK_HOLE finds the hole, SEEK_DATA its end (%d, %d)" %
                  (os.lseek(fd, 0, os.SEEK_HOLE), os.lseek(fd, 65536, os.SEEK_DATA)),
                  os.lseek(fd, 0, os.SEEK_HOLE) == 65536 and os.lseek(fd, 65536, os.SEEK_DATA) == 65536 + (512 << 10))
            try:
                os.lseek(fd, 1 << 20, os.SEEK_DATA)
                got = 0
            except OSError as e:
                got = e.errno
            check("SEEK_DATA at the end is ENXIO (%s)" % got, got == errno.ENXIO)
            rc = fallocate(fd, 0x10, 1000, (1 << 20) + 5000)  # ZERO_RANGE past the end grows the file
            st = os.fstat(fd)
            check("zero range: grows the file, zeros from 1000 (%d, %d)" % (rc, st.st_size),
                  rc == 0 and st.st_size == (1 << 20) + 6000 and
                  os.pread(fd, 8192, 0) == b"\x5a" * 1000 + bytes(7192))
            check("punch hole without KEEP_SIZE is EOPNOTSUPP, as Linux",
                  fallocate(fd, 0x02, 0, 4096) == errno.EOPNOTSUPP)
            os.posix_fallocate(fd, 0, 3 << 20)
            check("posix_fallocate grows the file", os.fstat(fd).st_size == 3 << 20)
        finally:
            os.close(fd)
        os.unlink(sparse)

        # A second mount with the kernel's write-back cache
        # (--writeback-cache): 20,000 4-byte appends reach nasgwd and read
        # back exact through the first mount after fsync; another user's
        # write and truncation of a root-owned 06777 file still clear setuid
        # and setgid; and data written back (sync_file_range) that nasgwd
        # then loses makes the next fsync EIO, once.
        wb = v.mount_path + ".wb"
        os.makedirs(wb, exist_ok=True)
        wbp = subprocess.Popen([a.fuse, "--socket", v.head_socket, "--volume", "vol1", "--allow-other",
                                "--writeback-cache", "-f", wb], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not is_mounted(wb) and wbp.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)  # polling /proc/mounts: the mount has no event to wait on
            check("--writeback-cache mounts", is_mounted(wb))
            # Data still in the kernel's page cache is data to SEEK_DATA
            # and SEEK_HOLE (the kernel answers them itself on this mount).
            seek_path = os.path.join(wb, "seek-wb")
            fd = os.open(seek_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.write(fd, b"w" * (1 << 20))
                got = (os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE))
            finally:
                os.close(fd)
            os.unlink(seek_path)
            check("write-back: data not yet written back is data to SEEK_DATA/SEEK_HOLE (%s)" % (got,),
                  got == (0, 1 << 20))
            log_path = os.path.join(wb, "appends")
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            for i in range(20000):
                os.write(fd, b"%04d" % (i % 10000))
            os.fsync(fd)
            os.close(fd)
            with open(os.path.join(v.mount_path, "appends"), "rb") as f:
                got = f.read()
            check("write-back: 20000 appends of 4 bytes read back exact through the other mount (%d bytes)" %
                  len(got), got == b"".join(b"%04d" % (i % 10000) for i in range(20000)))
            os.unlink(log_path)
            wb_target = os.path.join(wb, "shared", "wb-suid")
            with open(wb_target, "wb") as f:
                f.write(b"root")
            for step in ("write", "truncate"):
                os.chmod(wb_target, 0o6777)
                got = subprocess.run(["/usr/bin/python3", "-c", AS_USER, step, wb_target], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, timeout=60,
                                     preexec_fn=as_nobody).stdout.strip()
                v.unmount()  # nasgwd's word, past the first mount's cache
                v.mount()
                mode = stat.S_IMODE(os.stat(os.path.join(v.mount_path, "shared", "wb-suid")).st_mode)
                check("write-back: uid 65534's %s of a root-owned 06777 file succeeds (%s) and clears setuid and "
                      "setgid (%o)" % (step, got, mode), got == "ok" and mode == 0o777)
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(os.path.join(wb, "pushed"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, b"p" * 8192, 0)
                os.fsync(fd)
                os.pwrite(fd, b"q" * 8192, 0)
                # WAIT_BEFORE | WRITE | WAIT_AFTER: written back, not committed.
                pushed = libc.sync_file_range(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), 7)
                v.stop(signal.SIGKILL)
                v.start()
                first, second = fsync_errno(fd), fsync_errno(fd)
                check("write-back: fsync after nasgwd lost written-back data: EIO, then 0 (%s, %s, %s)" %
                      (pushed, first, second), pushed == 0 and first == errno.EIO and second == 0)
            finally:
                os.close(fd)
        finally:
            if is_mounted(wb):
                subprocess.run(["fusermount3", "-u", wb], check=False, timeout=60)
            try:
                wbp.wait(timeout=30)
            except subprocess.TimeoutExpired:
                wbp.kill()
                wbp.wait()
            os.rmdir(wb)

        # In the background (no -f), what nasgw-fuse says after detaching
        # goes to --log's file, not to /dev/null; a --log it cannot open is
        # an error before it mounts.
        second, log = v.mount_path + ".bg", v.mount_path + ".bg.log"
        os.makedirs(second, exist_ok=True)
        try:
            bad = subprocess.run([a.fuse, "--socket", v.head_socket, "--volume", "vol1", "--log",
                                  "/nonexistent/dir/log", second], capture_output=True, text=True, timeout=60)
            check("--log in a missing directory: exit 2, said why (%d: %s)" % (bad.returncode, bad.stderr.strip()),
                  bad.returncode == 2 and "/nonexistent/dir/log" in bad.stderr and not is_mounted(second))
            bg = subprocess.run([a.fuse, "--socket", v.head_socket, "--volume", "vol1", "--log", log, second],
                                capture_output=True, text=True, timeout=60)
            check("nasgw-fuse in the background mounts (%d: %s)" % (bg.returncode, bg.stderr.strip()),
                  bg.returncode == 0 and is_mounted(second) and os.path.exists(os.path.join(second, "x")))
            with open(log) as f:
                m = re.search(r"in the background pid=(\d+)", f.read())
            check("...and says, in --log's file, that it detached (%s)" % (m and m.group(0)), m is not None)
            # The daemon is not our child: a pidfd tells when it has exited.
            pidfd = os.pidfd_open(int(m.group(1))) if m else None
            subprocess.run(["fusermount3", "-u", second], check=False, timeout=60)
            ended = pidfd is not None and select.select([pidfd], [], [], 30)[0] == [pidfd]
            if pidfd is not None:
                os.close(pidfd)
            with open(log) as f:
                text = f.read()
            check("...and, unmounted, exits with its last line in that file (%s)" % text.strip()[-200:],
                  ended and "unmounted" in text)
        finally:
            if is_mounted(second):
                subprocess.run(["fusermount3", "-u", second], check=False, timeout=60)
            for p in (log,):
                if os.path.exists(p):
                    os.unlink(p)
            if os.path.isdir(second):
                os.rmdir(second)
        # Mount options (-o), --help, an option FUSE does not know, and a
        # mount without allow_other.
        v.unmount()
        v.mount(options=["-o", "ro,noatime", "-o", "nodev"])
        try:
            with open(os.path.join(v.mount_path, "ro-test"), "w"):
                pass
            got = "created"
        except OSError as e:
            got = e.errno
        check("-o ro: a create fails EROFS (%s)" % got, got == errno.EROFS)
        check("-o ro: the files are readable", "unstable" in os.listdir(v.mount_path))
        with open("/proc/mounts") as f:
            line = [x for x in f.read().splitlines() if " %s " % v.mount_path in x]
        check("-o ro,noatime -o nodev reach the kernel (%s)" % line,
              len(line) == 1 and all(o in line[0].split()[3].split(",") for o in ("ro", "noatime", "nodev")))
        v.unmount()
        v.mount(options=[])
        other = subprocess.run(["/usr/bin/python3", "-c", "import os, sys; os.listdir(sys.argv[1])", v.mount_path],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                               preexec_fn=as_nobody)
        check("without allow_other another user is refused (%s)" % other.stderr.strip()[-120:],
              other.returncode != 0 and "Permission denied" in other.stderr)
        fuse = v.s["bins"]["fuse"]
        h = subprocess.run([fuse, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        check("--help prints the usage on stdout and exits 0",
              h.returncode == 0 and "usage: nasgw-fuse" in h.stdout and "-o OPTIONS" in h.stdout)
        spare = v.mount_path + ".spare"
        os.makedirs(spare, exist_ok=True)
        try:
            bad = subprocess.run([fuse, "--socket", v.head_socket, "--volume", "vol1", "-o", "bogus_option", "-f",
                                  spare], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
            check("an unknown -o option is refused, named (%s)" % bad.stderr.strip()[-160:],
                  bad.returncode != 0 and "bogus_option" in bad.stderr and not is_mounted(spare))
            bad = subprocess.run([fuse, "--volume", "vol1", "-o", "ro,,noatime", spare], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=60)
            check("an empty -o option is a usage error (%s)" % bad.stderr.strip()[:80], bad.returncode == 2)
        finally:
            if is_mounted(spare):
                subprocess.run(["fusermount3", "-u", spare], check=False, timeout=60)
            os.rmdir(spare)
        v.unmount()
        v.stop()
        v.fsck()
        check("fsck clean", True)
    except Exception:
        print(v.log_tail())
        raise
    finally:
        v.close()
    return passed, failed


ACL_TAGS = {("u", False): 1, ("u", True): 2, ("g", False): 4, ("g", True): 8, ("m", False): 0x10,
            ("o", False): 0x20}


def acl_xattr(text):
    """"u::rw-,u:2000:r--,g::r--,m::r--,o::---" in Linux's xattr form
    (system.posix_acl_*), entries in the kernel's order."""
    import struct
    entries = []
    for part in text.split(","):
        kind, who, perm = part.split(":")
        bits = sum(b for c, b in zip(perm, (4, 2, 1)) if c != "-")
        entries.append((ACL_TAGS[(kind, bool(who))], bits, int(who) if who else 0xffffffff))
    entries.sort(key=lambda e: (e[0], e[2]))
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def as_user(uid, gid, groups, fn, umask=0o022):
    """fn() in a child process with these credentials; its result as text,
    or the errno's name when it raised OSError."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            os.umask(umask)
            try:
                out = "ok" if (v := fn()) is None else str(v)
            except OSError as e:
                out = errno_name(e.errno)
            os.write(w, out.encode())
        except BaseException:  # noqa: B036 -- the child must never return into the parent's code
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        return "child failed (%d)" % status
    return b"".join(chunks).decode()


def errno_name(e):
    import errno
    return errno.errorcode.get(e, str(e))


def acl_scenario(top, remount):
    """POSIX ACL behaviours, as observations ("what: seen") that hold no
    inode numbers or times, so that the same run on XFS and on nasgw gives
    the same lines: access ACLs (named users and groups, the mask, mode
    sync, chmod), who may set them, default ACLs and their inheritance
    (mode narrowed by the ACL instead of the umask, a new directory takes
    the default), setgid with ACLs (kept or cleared by the caller's
    groups, setgid directories), removal, and all of it after a remount."""
    out = []

    def rec(what, seen):
        out.append("%s: %s" % (what, seen))

    def st(p):
        try:
            s = os.lstat(p)
        except OSError as e:
            return errno_name(e.errno)
        return "%04o %d:%d" % (stat.S_IMODE(s.st_mode), s.st_uid, s.st_gid)

    def facl(p):
        r = subprocess.run(["getfacl", "-n", "--omit-header", p], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            return "getfacl failed: %s" % r.stderr.strip().rsplit(": ", 1)[-1]
        return "|".join(line for line in r.stdout.splitlines() if line)

    def setfacl(*args):
        subprocess.run(["setfacl"] + list(args), check=True)

    def create(p, mode=0o666):
        return lambda: os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))

    def setx(p, name, text):
        return lambda: os.setxattr(p, "system.posix_acl_" + name, acl_xattr(text))

    def read(p):
        def f():
            with open(p, "rb") as fh:
                return fh.read().decode()
        return f

    def run(p):
        return lambda: subprocess.run([p], stdout=subprocess.PIPE, check=True).stdout.decode().strip()

    def access(p):
        return lambda: "".join(c if os.access(p, m) else "-" for c, m in (("r", os.R_OK), ("w", os.W_OK),
                                                                           ("x", os.X_OK)))

    J = lambda *a: os.path.join(top, *a)  # noqa: E731

    def mkfile(p, data, mode):
        with open(p, "w") as fh:
            fh.write(data)
        os.chown(p, 1000, 100)
        os.chmod(p, mode)

    # An access ACL on a directory: named user and group, the mask, the mode.
    os.mkdir(J("d"), 0o750)
    os.chown(J("d"), 1000, 100)
    setfacl("-m", "u:2000:rwx,g:3000:rx", J("d"))
    rec("d after setfacl", st(J("d")))
    rec("d's ACL", facl(J("d")))
    rec("2000 creates in d", as_user(2000, 2000, [], create(J("d", "by2000"))))
    rec("2001 of group 3000 lists d", as_user(2001, 2001, [3000], lambda: sorted(os.listdir(J("d")))))
    rec("2001 of group 3000 creates in d", as_user(2001, 2001, [3000], create(J("d", "by2001"))))
    rec("2002 lists d", as_user(2002, 2002, [], lambda: os.listdir(J("d"))))
    os.chmod(J("d"), 0o750)
    rec("d after chmod 0750", st(J("d")))
    rec("d's ACL after chmod (the mask follows)", facl(J("d")))
    rec("2000 creates in d after chmod", as_user(2000, 2000, [], create(J("d", "by2000b"))))
    # An access ACL on a file.
    mkfile(J("d", "f"), "data", 0o600)
    setfacl("-m", "u:2000:rw,m::r", J("d", "f"))
    rec("f after setfacl", st(J("d", "f")))
    rec("f's ACL", facl(J("d", "f")))
    rec("2000 reads f", as_user(2000, 2000, [], read(J("d", "f"))))
    rec("2000 opens f to write (masked)", as_user(2000, 2000, [], lambda: os.close(os.open(J("d", "f"),
                                                                                       os.O_WRONLY))))
    rec("2000's access(2) to f", as_user(2000, 2000, [], access(J("d", "f"))))
    rec("2002 reads f", as_user(2002, 2002, [], read(J("d", "f"))))
    mkfile(J("d", "x"), "#!/bin/sh\necho ran\n", 0o700)
    setfacl("-m", "g:3000:rx", J("d", "x"))
    rec("2001 of group 3000 runs x", as_user(2001, 2001, [3000], run(J("d", "x"))))
    rec("2002 runs x", as_user(2002, 2002, [], run(J("d", "x"))))
    # Who sets ACLs: the owner (or root), not another user; a default ACL
    # is for directories.
    rec("2000 sets f's ACL", as_user(2000, 2000, [], setx(J("d", "f"), "access", "u::rw-,g::---,o::r--")))
    rec("the owner sets f's ACL", as_user(1000, 100, [], setx(J("d", "f"), "access",
                                                              "u::rw-,u:2000:r--,g::---,m::r--,o::---")))
    rec("f after the owner's ACL", st(J("d", "f")))
    rec("f's ACL from the owner", facl(J("d", "f")))
    rec("a default ACL on a file", as_user(1000, 100, [], setx(J("d", "f"), "default", "u::rwx,g::r-x,o::---")))
    rec("an ACL of the base entries only", as_user(1000, 100, [], setx(J("d", "f"), "access",
                                                                       "u::rw-,g::r--,o::r--")))
    rec("f after a base-only ACL", st(J("d", "f")) + " " + facl(J("d", "f")))
    rec("an ACL without its others entry", as_user(1000, 100, [], lambda: os.setxattr(
        J("d", "f"), "system.posix_acl_access", acl_xattr("u::rw-,g::r--")[:-8])))
    # setgid: an ACL set by an owner outside the file's group clears it.
    for name, groups in (("g-outside", []), ("g-inside", [100])):
        p = J("d", name)
        mkfile(p, "", 0o2770)
        rec("%s: the owner (groups %s) sets an ACL" % (name, groups),
            as_user(1000, 1000, groups, setx(p, "access", "u::rwx,u:2000:r--,g::rwx,m::rwx,o::---")))
        rec("%s after" % name, st(p))
    # Default ACLs: inheritance in a setgid directory.
    os.mkdir(J("s"))
    os.chown(J("s"), 1000, 100)
    os.chmod(J("s"), 0o2775)
    setfacl("-m", "u:2000:rwx", J("s"))
    setfacl("-d", "-m", "u:2000:rwx,g::rx,o::-", J("s"))
    rec("s's ACLs", facl(J("s")))
    rec("root, umask 077, makes f1 0666", as_user(0, 0, [], create(J("s", "f1")), umask=0o077))
    rec("root, umask 077, makes d1 0777", as_user(0, 0, [], lambda: os.mkdir(J("s", "d1"), 0o777), umask=0o077))
    rec("root makes d3 0700", as_user(0, 0, [], lambda: os.mkdir(J("s", "d3"), 0o700)))
    rec("root makes fifo p1 0666", as_user(0, 0, [], lambda: os.mkfifo(J("s", "p1"), 0o666), umask=0o077))
    rec("root makes symlink l1", as_user(0, 0, [], lambda: os.symlink("f1", J("s", "l1"))))
    rec("2000 (not in group 100) makes f2 02777", as_user(2000, 2000, [], create(J("s", "f2"), 0o2777)))
    rec("2000 makes d2 0755", as_user(2000, 2000, [], lambda: os.mkdir(J("s", "d2"), 0o755)))
    rec("1000 (group 100) makes f3 02755", as_user(1000, 100, [], create(J("s", "f3"), 0o2755)))
    for n in ("f1", "d1", "d3", "p1", "l1", "f2", "d2", "f3"):
        rec("s/%s" % n, st(J("s", n)))
        if n != "l1":
            rec("s/%s's ACLs" % n, facl(J("s", n)))
    rec("d1's own child inherits", as_user(0, 0, [], create(J("s", "d1", "g1")), umask=0o077))
    rec("s/d1/g1", st(J("s", "d1", "g1")) + " " + facl(J("s", "d1", "g1")))
    # Without a default ACL the umask applies.
    rec("root, umask 027, makes u1 0666", as_user(0, 0, [], create(J("u1")), umask=0o027))
    rec("root, umask 027, makes u2 0777", as_user(0, 0, [], lambda: os.mkdir(J("u2"), 0o777), umask=0o027))
    rec("u1 u2", st(J("u1")) + " " + st(J("u2")) + " " + facl(J("u1")))
    # chmod keeps named entries; removing the ACL keeps the mode.
    os.chmod(J("s", "f1"), 0o640)
    rec("s/f1 after chmod 0640", st(J("s", "f1")) + " " + facl(J("s", "f1")))
    setfacl("-b", J("s", "f1"))
    rec("s/f1 after setfacl -b", st(J("s", "f1")) + " " + facl(J("s", "f1")))
    rec("removing an ACL that is not there", as_user(0, 0, [], lambda: os.removexattr(
        J("u1"), "system.posix_acl_access")))
    setfacl("-k", J("s"))
    rec("s after setfacl -k", facl(J("s")))
    rec("root, umask 022, makes f4 in s", as_user(0, 0, [], create(J("s", "f4"))))
    rec("s/f4", st(J("s", "f4")) + " " + facl(J("s", "f4")))
    # (XFS shows root its own copy of the ACL, trusted.SGI_ACL_FILE: not a rule to follow.)
    rec("listxattr of d", sorted(n for n in os.listxattr(J("d")) if not n.startswith("trusted.SGI_")))
    remount()
    for p in ("d", "d/f", "s", "s/d1", "s/f2", "s/d2"):
        rec("after a remount: %s" % p, st(J(p)) + " " + facl(J(p)))
    rec("after a remount: 2000 reads d/f", as_user(2000, 2000, [], read(J("d", "f"))))
    return out


class XfsLoop:
    """XFS on a loop device, at fixed paths so that a run that crashed is
    cleaned by the next: the peer file system a suite compares with."""
    IMG = "/var/tmp/nasgw-fuse-lab-xfs.img"
    MNT = "/tmp/nasgw-fuse-lab-xfs"

    def __init__(self, size=512 << 20):
        self.clean()
        with open(self.IMG, "wb") as f:
            f.truncate(size)
        self.dev = subprocess.run(["losetup", "--find", "--show", self.IMG], check=True, stdout=subprocess.PIPE,
                                  text=True).stdout.strip()
        subprocess.run(["mkfs.xfs", "-q", "-f", self.dev], check=True)
        os.makedirs(self.MNT, exist_ok=True)
        self.remount()

    def remount(self):
        if os.path.ismount(self.MNT):
            subprocess.run(["umount", self.MNT], check=True)
        subprocess.run(["mount", self.dev, self.MNT], check=True)

    @classmethod
    def clean(cls):
        if os.path.ismount(cls.MNT):
            subprocess.run(["umount", cls.MNT], check=False)
        if os.path.exists(cls.IMG):
            used = subprocess.run(["losetup", "-j", cls.IMG, "-O", "NAME", "-n"], stdout=subprocess.PIPE,
                                  text=True).stdout.split()
            for dev in used:
                subprocess.run(["losetup", "-d", dev], check=False)
            os.unlink(cls.IMG)
        if os.path.isdir(cls.MNT):
            os.rmdir(cls.MNT)


def cmd_acl(a):
    """POSIX ACLs through the mount, compared with XFS in the same run: the
    same scenario (acl_scenario) on both must see the same thing, line for
    line; a few lines are also checked against what Linux is known to do,
    so that a scenario that tests nothing cannot pass."""
    v = Node(bins(a), luns=2, size="512M", tag="fuseacl")
    xfs = None
    check = Checks()

    try:
        v.start()
        v.format()
        v.mount(options=["--allow-other"])
        xfs = XfsLoop()
        theirs = acl_scenario(XfsLoop.MNT, xfs.remount)

        def remount():
            v.unmount()
            v.mount(options=["--allow-other"])
        ours = acl_scenario(v.mount_path, remount)
        check("as many observations on both (%d, %d)" % (len(ours), len(theirs)), len(ours) == len(theirs))
        for o, t in zip(ours, theirs):
            check("as XFS: %s" % t, o == t, "nasgw: %s" % o)
        known = dict(line.split(": ", 1) for line in theirs)
        for what, want in (("2000 reads f", "data"), ("2000 opens f to write (masked)", "EACCES"),
                           ("2000 sets f's ACL", "EPERM"), ("a default ACL on a file", "EACCES"),
                           ("g-outside after", "0770 1000:100"), ("g-inside after", "2770 1000:100"),
                           ("2001 of group 3000 runs x", "ran")):
            check("XFS, as Linux does: %s is %s" % (what, want), known.get(what) == want, known.get(what))
        v.unmount()
        v.stop()
        v.fsck()
        check("fsck clean after the ACL scenario", True)
    finally:
        try:
            v.close()
        finally:
            XfsLoop.clean()
    return check.passed, check.failed


def cmd_stress(a):
    v = Volume(a)
    passed = failed = 0
    try:
        d = os.path.join(v.mount_path, "stress")
        os.makedirs(d)
        # binderfs always fails here (no binder); the rest of the class runs.
        p = subprocess.run(["stress-ng", "--class", "filesystem", "--seq", "1", "-t", str(a.seconds),
                            "--temp-path", d, "--exclude", "binderfs", "--metrics-brief"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(p.stdout[-4000:])
        v.unmount()
        v.stop()
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
    m = sub.add_parser("semantics")
    m.add_argument("--fuse", required=True)
    m.add_argument("--fsck")
    t = sub.add_parser("restart")
    t.add_argument("--fuse", required=True)
    t.add_argument("--fsck")
    t.add_argument("--restarts", type=int, default=4)
    x = sub.add_parser("acl")
    x.add_argument("--fuse", required=True)
    x.add_argument("--fsck")
    r = sub.add_parser("remount")
    r.add_argument("state")
    for p in (f, s):
        p.add_argument("--writeback-cache", action="store_true", help="mount with nasgw-fuse --writeback-cache")
    for p in (f, c, s, e, t, m, x):
        p.add_argument("--nasgwd", required=True)
        p.add_argument("--cli", required=True)
    a = ap.parse_args()
    if a.cmd == "remount":
        cmd_remount(a)
        return 0
    passed, failed = {"fsx": cmd_fsx, "crash": cmd_crash, "stress": cmd_stress, "enospc": cmd_enospc,
                      "restart": cmd_restart, "semantics": cmd_semantics, "acl": cmd_acl}[a.cmd](a)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
