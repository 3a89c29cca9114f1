#!/usr/bin/env python3
"""Nothing a client was told is durable is lost when nasgwd is killed, through
the real path: tgtd LUNs -> nasgwd -> ganesha + FSAL_NASGW -> NFS clients in
lab namespaces, and nasgwd -> nasgw-fuse -> a FUSE mount (issue 12's crash
test).

Each round, six loaders (tests/integration/crash_load.py) change the volume
at once, each in a directory of its own, and journal every request before it
goes out and every reply that called it durable:

  nfs4d  NFSv4.1 (nfs-rs): overwrites at random offsets, each as UNSTABLE
         WRITEs and a COMMIT (the write-back cache's promise)
  nfs3d  NFSv3 (nfs-rs): the same (v3 replies carry Ganesha's own write
         verifier: FSAL_NASGW restarts ganesha.nfsd in place when nasgwd
         lost v3 writes that awaited a COMMIT)
  nfs4n, nfs3n
         NFSv4.1 / NFSv3 namespace changes: create, mkdir, symlink, link,
         rename (also over another file), remove, rmdir, chmod
  fused  FUSE: one to four writes, then fsync
  fusen  FUSE namespace changes, as nfs4n

After a random 0.2-2 s of load nasgwd is SIGKILLed (nasgw-fuse and the
loaders with it). Then:

  - nasgw-fsck checks the reserve read-only, as the crash left it (the last
    transaction group; the intent log's newer changes are counted);
  - nasgwd starts again (a new initiator, replaying the log) and a new FUSE
    mount reads every directory of every round so far, through nasgwd alone:
    every byte a durable reply covered is there (a byte may instead hold what
    a write still unanswered at the crash wrote), every answered namespace
    change is there (the directory is either as the answered changes leave it
    or as they and the one unanswered change leave it: names, kinds, modes,
    link counts, which names share an inode, symlink targets);
  - the NFSv4 write verifier (nasgw-nfs-fh) differs from every earlier
    round's, so clients resend what was not committed; the NFSv3 one
    (Ganesha's) too in every round where ganesha.nfsd restarted in place
    because v3 writes awaited a COMMIT at the crash, and stays the same in
    the others (no restart when nothing could be lost);
  - no loader failed before the crash.

A request Ganesha took just before the crash may wait in FSAL_NASGW for
nasgwd and be done by the new one (never answered, so either outcome is
right); the check is repeated for up to SETTLE_S until such requests have
ended, and a difference that stays is a failure.

At the end nasgwd stops cleanly and nasgw-fsck checks the replayed reserve.
The rounds must have had work for the replay: in at least half, the intent
log held changes newer than the last transaction group.

  crash_lab.py --build BUILD_DIR [--rounds N] [--seed S]
"""

import argparse
import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lab"))
import crash_load  # noqa: E402
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402

LOADER = os.path.join(HERE, "crash_load.py")
# name, kind, NFS version (None: FUSE), client namespace
LOADERS = [("nfs4d", "nfsdata", "4.1", 1), ("nfs3d", "nfsdata", "3", 2), ("nfs4n", "nfsns", "4.1", 1),
           ("nfs3n", "nfsns", "3", 2), ("fused", "fusedata", None, None), ("fusen", "fusens", None, None)]
FIRST_ACK_TIMEOUT_S = 60
LOAD_S = (0.2, 2.0)
SETTLE_S = 10.0  # how long requests of the killed clients may still be done

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


class Loader:
    """One crash_load.py process and its journal, read by a thread."""

    def __init__(self, name, kind, argv, tag):
        self.name, self.kind, self.tag = name, kind, tag
        self.lines = []
        self.acked = threading.Event()
        self.stderr = ""
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                j = json.loads(line)
            except ValueError:
                j = {"garbage": line}
            self.lines.append(j)
            if "ack" in j or "err" in j:
                self.acked.set()

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait()
        self.t.join(timeout=30)
        if not self.p.stderr.closed:
            self.stderr = self.p.stderr.read()
            self.p.stderr.close()

    def journal(self):
        """(ops by seq, acked seqs, ack details by seq, the error line or None)."""
        ops, acked, detail, err = {}, set(), {}, None
        for j in self.lines:
            if "begin" in j:
                ops[j["begin"]] = j
            elif "ack" in j:
                acked.update(j["ack"])
                for s in j["ack"]:
                    detail[s] = j
            elif "err" in j:
                err = j
        return ops, acked, detail, err


# ---- what must be there

def check_data(root, ld):
    """Every acked write's bytes are there; a byte may instead hold an
    unanswered write's. Returns a list of problems."""
    ops, acked, _, _ = ld.journal()
    problems = []
    images, created, unacked = {}, set(), {}
    for seq in sorted(ops):
        op = ops[seq]
        if op["op"] == "c":
            if seq in acked:
                images[op["f"]] = bytearray(crash_load.data(ld.tag, seq, crash_load.FILE_BYTES))
                created.add(op["f"])
        elif seq in acked:
            images[op["f"]][op["off"]:op["off"] + op["n"]] = crash_load.data(ld.tag, seq, op["n"])
        else:
            unacked.setdefault(op["f"], []).append(op)
    for f in sorted(created):
        path = os.path.join(root, ld.tag, crash_load.file_name(f))
        try:
            with open(path, "rb") as fh:
                got = fh.read()
        except OSError as e:
            problems.append("%s: %s" % (path, e))
            continue
        want = images[f]
        if len(got) != len(want):
            problems.append("%s: %d bytes, %d expected" % (path, len(got), len(want)))
            continue
        if got == want:
            continue
        others = [(o["off"], crash_load.data(ld.tag, o["begin"], o["n"])) for o in unacked.get(f, [])]
        bad = []
        for i in range(0, len(want), 4096):
            if got[i:i + 4096] == want[i:i + 4096]:
                continue
            for k in range(i, min(i + 4096, len(want))):
                if got[k] != want[k] and not any(off <= k < off + len(b) and b[k - off] == got[k]
                                                 for off, b in others):
                    bad.append(k)
                    break
        if bad:
            problems.append("%s: bytes acked durable are not there (first at %s; %d unanswered writes at the "
                            "crash)" % (path, bad[:8], len(others)))
    return problems


def observe_dir(path):
    """name -> (kind, mode, st_ino, st_nlink, symlink target); raises
    LookupError for a name READDIR lists and LOOKUP does not find."""
    out = {}
    for n in os.listdir(path):
        try:
            st = os.lstat(os.path.join(path, n))
        except FileNotFoundError:
            raise LookupError("%s is listed in %s but not found" % (n, path))
        kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
        out[n] = (kind, st.st_mode & 0o7777, st.st_ino, st.st_nlink,
                  os.readlink(os.path.join(path, n)) if kind == "l" else None)
    return out


def state_matches(state, seen):
    """None when the directory is as the model state says, else why not."""
    names, inos = state["names"], state["inos"]
    if set(names) != set(seen):
        return "names: missing %s, unexpected %s" % (sorted(set(names) - set(seen)),
                                                     sorted(set(seen) - set(names)))
    by_ino = {}
    for n, i in names.items():
        by_ino.setdefault(i, []).append(n)
    for i, ns in by_ino.items():
        m = inos[i]
        real = {seen[n][2] for n in ns}
        if len(real) != 1:
            return "%s are one file but have inodes %s" % (ns, sorted(real))
        for n in ns:
            kind, mode, _, nlink, target = seen[n]
            if kind != m["kind"]:
                return "%s is %s, %s expected" % (n, kind, m["kind"])
            if m["kind"] != "l" and m["mode"] is not None and mode != m["mode"]:
                return "%s has mode %o, %o expected" % (n, mode, m["mode"])
            if m["kind"] == "f" and nlink != len(ns):
                return "%s has %d links, %d expected" % (n, nlink, len(ns))
            if m["kind"] == "l" and target != m["target"]:
                return "%s points to %r, %r expected" % (n, target, m["target"])
    inodes = [seen[ns[0]][2] for ns in by_ino.values()]
    if len(set(inodes)) != len(inodes):
        return "distinct files share an inode"
    return None


def check_ns(root, ld):
    ops, acked, detail, _ = ld.journal()
    state, pending = crash_load.empty_state(), None
    for seq in sorted(ops):
        if seq in acked:
            crash_load.apply(state, ops[seq], detail[seq].get("mode"))
        else:
            pending = ops[seq]  # the loader stops at the first unanswered change
            break
    path = os.path.join(root, ld.tag)
    if not os.path.isdir(path):
        return ["%s is gone" % path] if acked else []
    try:
        seen = observe_dir(path)
    except LookupError as e:
        name = str(e).split()[0]
        return ["%s; the changes naming it: %s" % (e, [(ops[q], q in acked) for q in sorted(ops)
                                                      if name in (ops[q].get("a"), ops[q].get("b"))])]
    why = state_matches(state, seen)
    if why is None:
        return []
    if pending is not None:
        after = crash_load.copy_state(state)
        crash_load.apply(after, pending, None)
        if state_matches(after, seen) is None:
            return []
    return ["%s: %s (%d changes answered%s)" % (path, why, len(acked),
                                                ", one unanswered: %s" % pending if pending else "")]


def verify(node, loaders):
    problems = []
    for ld in loaders:
        problems += (check_data if ld.kind.endswith("data") else check_ns)(node.mount_path, ld)
    return problems


def fsck(node):
    """nasgw-fsck read-only as the crash left the reserve: (clean, changes
    waiting in the intent log, output)."""
    p = node.fsck(check=False)
    m = re.search(r"(\d+) newer changes wait in the intent log", p.stderr)
    return p.returncode == 0, int(m.group(1)) if m else 0, p.stdout[-2000:] + p.stderr[-2000:]


def write_verifier(client, tool, fh, version="4"):
    """The write verifier of a WRITE of /verf: UNSTABLE through v4 (nasgwd's
    verifier), FILE_SYNC through v3 (Ganesha's; a stable write holds
    nothing in FSAL_NASGW that a crash could lose)."""
    stable = "0" if version == "4" else "2"
    r = client.run([tool, "--url", client.url("/vol1", version), "write", fh, "0", stable], check=False,
                   timeout=120)
    words = (r.stdout.strip().splitlines() or [""])[-1].split()
    if len(words) < 8 or words[0] != "status" or words[1] != "0":
        raise RuntimeError("no write verifier: %s %s" % (r.stdout[-500:], r.stderr[-500:]))
    return words[7]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    print("seed %d (--seed to repeat the choices)" % seed, flush=True)
    rng = random.Random(seed)
    fsal = b + "/fsal/ganesha/libfsalnasgw.so"
    tool = b + "/tests/tools/nasgw-nfs-fh"
    bins = {"nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw", "fuse": b + "/fsal/fuse/nasgw-fuse",
            "fsck": b + "/fs/nasgw-fsck"}
    for f in list(bins.values()) + [fsal, tool]:
        if not os.path.exists(f):
            print("FAIL: %s is not built" % f)
            return 1
    node = lab = None
    loaders = []
    try:
        node = nasgwlab.Node(bins=bins, luns=2, size="1G", tag="crash", metrics=True)
        node.start()
        node.format()
        lab = nfslab.Lab(clients=2)
        cfg = nfslab.GaneshaConfig(exports=[nfslab.nasgw_export(1, "vol1", "/vol1")], plugins={"nasgw": fsal},
                                   nasgw_socket=node.head_socket, lease_lifetime=15)
        lab.start_server(cfg)
        py = nfslab.ensure_venv()
        lab.client(1).nfsrs("client.open('/verf', 'wb').close()", "/vol1")
        fh = lab.client(1).run([tool, "--url", lab.client(1).url("/vol1/verf", "4"), "get"]).stdout.split()[-1]
        fh3 = lab.client(1).run([tool, "--url", lab.client(1).url("/vol1/verf", "3"), "get"]).stdout.split()[-1]
        node.mount()
        verifiers = [write_verifier(lab.client(1), tool, fh)]
        v3s = [write_verifier(lab.client(1), tool, fh3, "3")]
        restarts = 0       # rounds in which ganesha.nfsd restarted in place
        done = []          # the loaders of every round so far, checked every round
        replayed = 0       # rounds whose crash left changes in the intent log
        acks = {}
        for rnd in range(1, a.rounds + 1):
            loaders = []
            for name, kind, version, client in LOADERS:
                tag = "r%02d-%s" % (rnd, name)
                s = str(rng.randrange(1 << 30))
                if version:
                    c = lab.client(client)
                    argv = c.argv([py, LOADER, kind, c.url("/vol1", version), tag, s])
                else:
                    argv = [sys.executable, LOADER, kind, node.mount_path, tag, s]
                loaders.append(Loader(name, kind, argv, tag))
            for ld in loaders:
                if not ld.acked.wait(FIRST_ACK_TIMEOUT_S):
                    raise RuntimeError("loader %s answered nothing in %ds" % (ld.tag, FIRST_ACK_TIMEOUT_S))
            time.sleep(rng.uniform(*LOAD_S))  # the moment of the crash, chosen at random
            try:
                dirty = node.metric("nasgw_cache_dirty_bytes")
            except OSError:
                dirty = None
            t_kill = time.monotonic()
            log_at = lab.server.log_size()
            node.kill()  # SIGKILL nasgwd, then nasgw-fuse (the mount goes, lazily)
            for ld in loaders:
                ld.kill()
            for ld in loaders:
                _, acked, _, err = ld.journal()
                acks[ld.name] = acks.get(ld.name, 0) + len(acked)
                check(err is None or err["t"] >= t_kill,
                      "round %d: %s did not fail before the crash (%s)" % (rnd, ld.tag, err))
                if any("garbage" in j for j in ld.lines) or "Traceback" in ld.stderr:
                    check(False, "round %d: %s wrote no garbage: %s" % (rnd, ld.tag, ld.stderr[-800:]))
            clean, waiting, out = fsck(node)
            check(clean, "round %d: nasgw-fsck is clean after the crash%s" % (rnd, "" if clean else ":\n" + out))
            replayed += waiting > 0
            node.start()
            restarted = lab.server.await_verifier_change(log_at)
            restarts += restarted
            node.mount()
            done.extend(loaders)
            problems, t_check, tries = verify(node, done), time.monotonic(), 1
            while problems and time.monotonic() < t_check + SETTLE_S:
                # A request Ganesha took before the crash waits in FSAL_NASGW
                # for nasgwd and is done by the new one, perhaps while the
                # directories are read (allowed: it was never answered). The
                # check is repeated until such requests have ended; nothing
                # tells when they have.
                time.sleep(0.5)
                problems, tries = verify(node, done), tries + 1
            if tries > 1:
                print("round %d: checked %d times (%s)" % (rnd, tries, "settled" if not problems else "never"))
            v = write_verifier(lab.client(1), tool, fh)
            v3 = write_verifier(lab.client(1), tool, fh3, "3")
            print("round %d: killed after %s answered changes (%s dirty bytes in the cache, %d changes in the "
                  "intent log past the last transaction group); %d directories checked" %
                  (rnd, sum(len(ld.journal()[1]) for ld in loaders), "?" if dirty is None else int(dirty),
                   waiting, len(done)) + (" (ganesha.nfsd restarted in place)" if restarted else ""), flush=True)
            check(not problems, "round %d: everything answered durable is there%s" %
                  (rnd, "" if not problems else ":\n  " + "\n  ".join(problems[:10])))
            check(v not in verifiers, "round %d: a new write verifier (%s; earlier %s)" % (rnd, v, verifiers[-3:]))
            verifiers.append(v)
            if restarted:
                check(v3 not in v3s, "round %d: ganesha restarted: a new NFSv3 write verifier (%s; earlier %s)" %
                      (rnd, v3, v3s[-3:]))
            else:
                check(v3 == v3s[-1], "round %d: ganesha carried on: the same NFSv3 write verifier (%s; before %s)" %
                      (rnd, v3, v3s[-1]))
            v3s.append(v3)
            if failures:
                break
        if failures:
            raise RuntimeError("stopped after round %d" % rnd)
        print("answered changes per loader over all rounds: %s; ganesha.nfsd restarted in place in %d rounds" %
              (acks, restarts), flush=True)
        check(all(acks.get(n, 0) >= a.rounds for n, _, _, _ in LOADERS),
              "every loader had changes answered (%s)" % acks)
        check(replayed * 2 >= a.rounds, "the crash left changes in the intent log in at least half the rounds "
              "(%d of %d)" % (replayed, a.rounds))
        # The checks can fail: a journal that claims one more answered change
        # than was made is caught, for data and for names.
        for ld in done[-len(LOADERS):]:
            ops, acked, _, _ = ld.journal()
            seq = max(ops) + 1
            if ld.kind.endswith("data"):
                fake = {"begin": seq, "op": "w", "f": 0, "off": 100, "n": 4000}
            else:
                fake = {"begin": seq, "op": "create", "a": "never-made", "b": seq}
            ld.lines = [j for j in ld.lines if not ("begin" in j and j["begin"] not in acked)]
            ld.lines += [fake, {"ack": [seq], "mode": 0o644}]
            check((check_data if ld.kind.endswith("data") else check_ns)(node.mount_path, ld),
                  "the check finds a change %s claims and never made" % ld.tag)
        node.unmount()
        node.stop()
        clean, waiting, out = fsck(node)
        check(clean and waiting == 0, "after a clean stop nasgw-fsck is clean, nothing left in the log%s" %
              ("" if clean else ":\n" + out))
    except Exception:
        traceback.print_exc()
        failures.append("exception")
    finally:
        for ld in loaders:
            ld.kill()
        rc = nasgwlab.finish(failures, node=node, lab=lab)
    return rc


if __name__ == "__main__":
    sys.exit(main())
