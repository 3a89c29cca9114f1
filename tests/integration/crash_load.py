#!/usr/bin/env python3
"""One loader of crash_lab.py: a client that changes files and a directory
through NFS (nfs-rs) or a FUSE mount, and writes down, before each request
and after each reply that says the change is durable, what it did. The lab
kills nasgwd under it and checks, after the restart, that everything a reply
called durable is there.

  crash_load.py KIND WHERE TAG SEED

  KIND   nfsdata | nfsns: WHERE is an nfs:// URL of the export (nfs-rs; the
         URL's version picks v3 or v4.1); fusedata | fusens: WHERE is the
         directory a volume is mounted on
  TAG    the directory (made first) the loader works in, under the export's
         root; also the seed of the bytes it writes
  SEED   its choices

data loaders: FILES files of FILE_BYTES, made whole (durable before the
ack), then overwritten at random offsets with random lengths. nfs-rs sends
each write as UNSTABLE WRITEs and a COMMIT, and returns once the COMMIT
answered (the cache's promise; through v3, FSAL_NASGW restarts ganesha.nfsd
when nasgwd lost writes that awaited a COMMIT). Through FUSE, one to four writes go
into the page of nasgw-fuse's cache and an fsync makes them durable: their
ack comes with the fsync's return.

namespace loaders: one flat directory of files, directories, hard links and
symbolic links: create, mkdir, link, symlink, rename (also over another
file), remove, rmdir, chmod, each durable when its reply comes (NFSv3's rule,
which nasgwd keeps for every head).

The journal, on stdout, one JSON object a line, flushed at once:
  {"begin": SEQ, "op": ...}
                          before the request goes out
  {"ack": [SEQ, ...]}     the reply said these are durable (a create's
                          "mode" is what a stat then showed)
  {"ready": 1}            connected, before the first request
  {"err": TEXT, "t": T}   the first failure (CLOCK_MONOTONIC seconds): the
                          loader stops there, as what it did is uncertain
The lab SIGKILLs it; it also stops by itself after --max-s.
"""

import errno
import json
import os
import random
import sys
import time

FILES = 3
FILE_BYTES = 128 << 10
MAX_S = 300
MODES = (0o600, 0o640, 0o644, 0o700, 0o711, 0o755, 0o777)


def data(tag, seq, n):
    """The bytes of write SEQ of loader TAG (the checker makes them again)."""
    return random.Random("%s:%d" % (tag, seq)).randbytes(n)


def file_name(i):
    return "f%d" % i


# ---- the namespace model (the checker applies the same ops)

def empty_state():
    return {"names": {}, "inos": {}}


def apply(state, op, mode=None):
    """Applies one namespace op (a journal "begin" line) to a model state:
    names: name -> inode id; inos: id -> {"kind": f|d|l, "mode": int|None,
    "target": str}. A create's mode is what its ack said (None: not known)."""
    names, inos = state["names"], state["inos"]
    kind = op["op"]
    if kind in ("create", "mkdir", "symlink"):
        names[op["a"]] = op["b"]
        inos[op["b"]] = {"kind": {"create": "f", "mkdir": "d", "symlink": "l"}[kind], "mode": mode,
                         "target": op.get("target")}
    elif kind == "link":
        names[op["b"]] = names[op["a"]]
    elif kind == "rename":
        ino = names.pop(op["a"])
        names[op["b"]] = ino
    elif kind in ("remove", "rmdir"):
        names.pop(op["a"])
    elif kind == "chmod":
        inos[names[op["a"]]]["mode"] = op["mode"]
    else:
        raise ValueError("unknown op %r" % kind)
    for i in [i for i in inos if i not in names.values()]:
        del inos[i]


def copy_state(state):
    return {"names": dict(state["names"]), "inos": {k: dict(v) for k, v in state["inos"].items()}}


# ---- the two ways in

class Nfs:
    """nfs-rs; paths from the export's root."""

    def __init__(self, url):
        import nfs_rs
        self.c = nfs_rs.Client.connect(url)
        self.open_files = {}

    def mkdir(self, p, mode=0o755):
        self.c.mkdir(p, mode)

    def create_full(self, p, b):
        with self.c.open(p, "wb") as f:
            f.write(b)  # UNSTABLE WRITEs and a COMMIT: durable on return

    def pwrite(self, p, off, b):
        f = self.open_files.get(p)
        if f is None:
            f = self.open_files[p] = self.c.open(p, "r+b")
        f.write_at(b, off)
        return True  # committed

    def sync(self):
        pass

    def create(self, p):
        self.c.open(p, "wb").close()

    def mode(self, p):
        return self.c.stat(p).mode & 0o7777

    def link(self, a, b):
        self.c.link(a, b)

    def symlink(self, target, p):
        self.c.symlink(target, p)

    def rename(self, a, b):
        self.c.rename(a, b)

    def remove(self, p):
        self.c.remove(p)

    def rmdir(self, p):
        self.c.rmdir(p)

    def chmod(self, p, mode):
        self.c.chmod(p, mode)


class Local:
    """A FUSE mount: each call returns once nasgw-fuse answered."""

    def __init__(self, root):
        self.root = root
        self.fds = {}
        self.unsynced = set()

    def _p(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    def mkdir(self, p, mode=0o755):
        os.mkdir(self._p(p), mode)

    def create_full(self, p, b):
        fd = os.open(self._p(p), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        try:
            os.write(fd, b)
            os.fsync(fd)
        finally:
            os.close(fd)

    def pwrite(self, p, off, b):
        fd = self.fds.get(p)
        if fd is None:
            fd = self.fds[p] = os.open(self._p(p), os.O_RDWR)
        if os.pwrite(fd, b, off) != len(b):
            raise OSError(errno.EIO, "short write")
        self.unsynced.add(fd)
        return False  # durable at the next sync

    def sync(self):
        for fd in sorted(self.unsynced):
            os.fsync(fd)
        self.unsynced.clear()

    def create(self, p):
        os.close(os.open(self._p(p), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))

    def mode(self, p):
        return os.lstat(self._p(p)).st_mode & 0o7777

    def link(self, a, b):
        os.link(self._p(a), self._p(b))

    def symlink(self, target, p):
        os.symlink(target, self._p(p))

    def rename(self, a, b):
        os.rename(self._p(a), self._p(b))

    def remove(self, p):
        os.unlink(self._p(p))

    def rmdir(self, p):
        os.rmdir(self._p(p))

    def chmod(self, p, mode):
        os.chmod(self._p(p), mode)


def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def data_load(fs, tag, rng, local, deadline):
    seq = 0
    for i in range(FILES):
        say(begin=seq, op="c", f=i)
        fs.create_full("/%s/%s" % (tag, file_name(i)), data(tag, seq, FILE_BYTES))
        say(ack=[seq])
        seq += 1
    pending, batch = [], rng.randint(1, 4)
    while time.monotonic() < deadline:
        i = rng.randrange(FILES)
        if rng.random() < 0.5:
            off, n = rng.randrange(FILE_BYTES // 4096) * 4096, rng.choice((4096, 8192, 65536))
        else:
            off, n = rng.randrange(FILE_BYTES), rng.choice((1, 512, 1000, rng.randrange(1, 40000)))
        n = min(n, FILE_BYTES - off)
        say(begin=seq, op="w", f=i, off=off, n=n)
        if fs.pwrite("/%s/%s" % (tag, file_name(i)), off, data(tag, seq, n)):
            say(ack=[seq])
        else:
            pending.append(seq)
            if local and len(pending) >= batch:
                fs.sync()
                say(ack=pending)
                pending, batch = [], rng.randint(1, 4)
        seq += 1


def ns_load(fs, tag, rng, deadline):
    state = empty_state()
    seq = 0
    while time.monotonic() < deadline:
        names = state["names"]
        kinds = {n: state["inos"][i]["kind"] for n, i in names.items()}
        files = [n for n, k in kinds.items() if k == "f"]
        dirs = [n for n, k in kinds.items() if k == "d"]
        new = "n%d" % seq
        choices = ["create", "mkdir", "symlink"] if len(names) < 24 else []
        if names:
            choices += ["rename", "chmod", "chmod"]
        if files:
            choices += ["link", "remove"]
        if dirs:
            choices += ["rmdir"]
        kind = rng.choice(choices)
        op = {"op": kind}
        if kind in ("create", "mkdir", "symlink"):
            op.update(a=new, b=seq)
            if kind == "symlink":
                op["target"] = "t%d/%s" % (seq, "x" * rng.randrange(0, 80))
        elif kind == "link":
            op.update(a=rng.choice(files), b=new)
        elif kind == "rename":
            a = rng.choice(sorted(names))
            others = [f for f in files if f != a and names[f] != names[a]]
            b = rng.choice(others) if kinds[a] == "f" and others and rng.random() < 0.3 else new
            op.update(a=a, b=b)
        elif kind == "chmod":
            op.update(a=rng.choice(sorted(n for n in names if kinds[n] != "l") or [None]), mode=rng.choice(MODES))
            if op["a"] is None:
                continue
        elif kind == "remove":
            op["a"] = rng.choice(files + [n for n, k in kinds.items() if k == "l"])
        elif kind == "rmdir":
            op["a"] = rng.choice(dirs)
        say(begin=seq, **op)
        p = lambda n: "/%s/%s" % (tag, n)  # noqa: E731
        mode = None
        if kind == "create":
            fs.create(p(op["a"]))
            mode = fs.mode(p(op["a"]))
        elif kind == "mkdir":
            fs.mkdir(p(op["a"]), 0o755)
            mode = fs.mode(p(op["a"]))
        elif kind == "symlink":
            fs.symlink(op["target"], p(op["a"]))
        elif kind == "link":
            fs.link(p(op["a"]), p(op["b"]))
        elif kind == "rename":
            fs.rename(p(op["a"]), p(op["b"]))
        elif kind == "remove":
            fs.remove(p(op["a"]))
        elif kind == "rmdir":
            fs.rmdir(p(op["a"]))
        elif kind == "chmod":
            fs.chmod(p(op["a"]), op["mode"])
        say(ack=[seq], mode=mode)
        apply(state, dict(op, op=kind), mode)
        seq += 1


def main(argv):
    if len(argv) < 5 or argv[1] not in ("nfsdata", "nfsns", "fusedata", "fusens"):
        sys.stderr.write(__doc__)
        return 64
    kind, where, tag, seed = argv[1], argv[2], argv[3], int(argv[4])
    if kind.startswith("nfs"):
        # nfs-rs's reuse of a slot's sequence id (see nfslab.NFSRS_UNCACHED_RETRY)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
        import nfslab
        exec(nfslab.NFSRS_UNCACHED_RETRY, {})
    rng = random.Random(seed)
    deadline = time.monotonic() + MAX_S
    try:
        fs = Nfs(where) if kind.startswith("nfs") else Local(where)
        say(ready=1)
        fs.mkdir("/" + tag)  # before any change the journal records: no op of its own
        if kind.endswith("data"):
            data_load(fs, tag, rng, kind.startswith("fuse"), deadline)
        else:
            ns_load(fs, tag, rng, deadline)
    except Exception as e:  # the first failure ends the loader
        say(err="%s: %s" % (type(e).__name__, e), t=time.monotonic())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
