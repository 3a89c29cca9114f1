#!/usr/bin/env python3
"""Snapshots survive nasgwd being killed while it creates or deletes one, or
rolls the volume back to one (issue 14's crash test), through the real
path: tgtd LUNs -> nasgwd -> nasgw-fuse.

Each round changes files through FUSE (fsynced: what the model holds is
durable), starts `nasgw snapshot create`, `nasgw snapshot delete` or
`nasgw snapshot rollback` and SIGKILLs nasgwd (and the FUSE head) a random
moment later. Then:

  - nasgw-fsck checks the reserve read-only as the crash left it;
  - nasgwd starts again (replaying its log, finishing a deletion it had
    begun) and every snapshot is either fully there, reading through
    `.snapshot/<name>` exactly what the files held when it was taken, or
    fully gone: a snapshot being created is there or not, one being deleted
    is gone (its deletion finished at the open) or still whole;
  - after a rollback the volume reads either exactly as at the snapshot
    (the rollback happened: a file made since is gone) or exactly as before
    the rollback (it did not: that file is there), never anything between:
    a rollback is one transaction. Both outcomes are counted.

A deletion has work for the kill to land in: before each, thousands of 4 KiB
overwrites give the snapshot dead entries across several release batches;
a rollback too: thousands of overwrites since the newest snapshot, and a
new file, for it to undo.
At the end nasgwd stops cleanly, every snapshot is deleted, and nasgw-fsck
checks that no dead entry, history key or byte of their space is left.

  snapshot_crash_lab.py --build BUILD_DIR [--rounds N] [--seed S]
"""

import argparse
import math
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nasgwlab  # noqa: E402

FILES = 6
FILE_BYTES = 1 << 20
BLOCK = 4096


def overwrite(root, model, rng, n):
    """n random 4 KiB overwrites, each file fsynced: durable when this returns."""
    touched = set()
    fds = {}
    try:
        for _ in range(n):
            f = rng.randrange(FILES)
            off = rng.randrange(FILE_BYTES // BLOCK) * BLOCK
            data = rng.randbytes(BLOCK)
            if f not in fds:
                fds[f] = os.open(os.path.join(root, "f%d" % f), os.O_WRONLY)
            os.pwrite(fds[f], data, off)
            buf = model[f]
            buf[off:off + BLOCK] = data
            touched.add(f)
        for f in touched:
            os.fsync(fds[f])
    finally:
        for fd in fds.values():
            os.close(fd)


def snapshot_reads_as(root, name, files):
    for f, want in files.items():
        with open(os.path.join(root, ".snapshot", name, "f%d" % f), "rb") as fh:
            if fh.read() != want:
                return "f%d differs" % f
    return None


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reads_as(root, files):
    """None when the live files f0.. hold `files`, else which one differs."""
    for f, want in files.items():
        with open(os.path.join(root, "f%d" % f), "rb") as fh:
            if fh.read() != want:
                return "f%d differs" % f
    return None


def listed(node):
    return {s["name"] for s in node.cli("snapshot", "list", "vol1", json_out=True).get("snapshots", [])}


def crash_during(node, args, delay):
    """Runs `nasgw snapshot ARGS` and SIGKILLs the node after `delay` s (or
    once the command ended, if sooner)."""
    p = subprocess.Popen([node.s["bins"]["cli"], "--socket", node.admin_socket, "snapshot"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.wait(timeout=delay)
        finished = True
    except subprocess.TimeoutExpired:
        finished = False
    node.kill()
    out, err = p.communicate(timeout=60)
    return finished and p.returncode == 0, out + err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=20, help="rounds of each: create, delete, rollback")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    bins = {"nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw", "fsck": b + "/fs/nasgw-fsck",
            "fuse": b + "/fsal/fuse/nasgw-fuse"}
    rng = random.Random(a.seed)
    print("seed %d" % a.seed, flush=True)
    c = nasgwlab.Checks()
    node = nasgwlab.Node(bins=bins, luns=2, size="512M", tag="snapcrash")
    try:
        node.start()
        node.format(volume="vol1", record="64K")
        node.mount()
        root = node.mount_path
        model = {}
        for f in range(FILES):
            data = bytearray(rng.randbytes(FILE_BYTES))
            with open(os.path.join(root, "f%d" % f), "wb") as fh:
                fh.write(data)
                os.fsync(fh.fileno())
            model[f] = data
        # How long a create and a deletion with work take here, uncut: the
        # kills land at random within 1.5 times that.
        t0 = time.monotonic()
        node.cli("snapshot", "create", "vol1", "calibrate")
        t_create = time.monotonic() - t0
        overwrite(root, model, rng, 3000)
        t0 = time.monotonic()
        node.cli("snapshot", "delete", "vol1", "calibrate")
        t_delete = time.monotonic() - t0
        # ... and a rollback with as much to undo (outside the mount: the
        # kernel's caches of the files it changes are not the question). Its
        # commit comes early, a bare CLI call and the scan after the start,
        # and most of the call is after it (the space given back): so its
        # kills are spread evenly over the logarithm of the time, from a
        # quarter of a bare CLI call to 1.5 times the uncut rollback, and
        # land before the commit about a third of the time.
        t0 = time.monotonic()
        listed(node)
        t_cli = time.monotonic() - t0
        frozen = {f: bytes(v) for f, v in model.items()}
        node.cli("snapshot", "create", "vol1", "calibrate")
        overwrite(root, model, rng, 3000)
        node.unmount()
        t0 = time.monotonic()
        node.cli("snapshot", "rollback", "vol1", "calibrate")
        t_rollback = time.monotonic() - t0
        node.mount()
        model = {f: bytearray(v) for f, v in frozen.items()}
        c("an uncut rollback: the files read as at the snapshot", reads_as(root, model) is None, reads_as(root, model))
        node.cli("snapshot", "delete", "vol1", "calibrate")
        print("an uncut create takes %.3f s, a deletion %.3f s, a rollback %.3f s; a bare CLI call %.3f s" % (
            t_create, t_delete, t_rollback, t_cli), flush=True)
        # The kills land at random, but both sides of a commit must be seen
        # (checked at the end): in a kind's last two rounds, a side not seen
        # yet is aimed at, with a kill at once (before the commit) or well
        # after the uncut call's time (after it). Without this a run missed
        # one side now and then (6 log-uniform rollback kills all after the
        # commit: about one run in ten).
        def steered(done, early_seen, late_seen, early, late, random_delay):
            if done > a.rounds - 2:
                if early_seen == 0:
                    return early
                if late_seen == 0:
                    return late
            return random_delay()

        expected = {}  # snapshot name -> {file: bytes} it must read as
        created = deleted_whole = deleted_gone = created_gone = rolled_back = not_rolled_back = 0
        creates = deletes = rollbacks = rnd = 0
        while creates < a.rounds or deletes < a.rounds or rollbacks < a.rounds:
            rnd += 1
            # In turn: create, delete, rollback; the latter two need a
            # snapshot (one more create when there is none).
            turn = ["create", "delete", "rollback"][rnd % 3]
            left = [k for k, n in (("create", creates), ("delete", deletes), ("rollback", rollbacks))
                    if n < a.rounds and (k == "create" or expected)]
            kind = turn if turn in left else left[0] if left else "create"
            deleting, rolling = kind == "delete", kind == "rollback"
            if deleting:
                deletes += 1
            elif rolling:
                rollbacks += 1
            else:
                creates += 1
            if rolling:
                # Work for the rollback: overwrites since the newest snapshot
                # and a file made since; both must go, or both stay.
                victim = sorted(expected)[-1]
                overwrite(root, model, rng, 3000)
                made, made_data = "n%03d" % rnd, rng.randbytes(rng.randrange(1, 300000))
                with open(os.path.join(root, made), "wb") as fh:
                    fh.write(made_data)
                    fh.flush()  # out of Python's buffer before the fsync
                    os.fsync(fh.fileno())
                fsync_dir(root)
                before = {f: bytes(v) for f, v in model.items()}
                delay = steered(rollbacks, not_rolled_back, rolled_back, t_cli / 4, 3 * t_rollback,
                                lambda: math.exp(rng.uniform(math.log(t_cli / 4), math.log(1.5 * t_rollback))))
                ok, said = crash_during(node, ["rollback", "vol1", victim], delay)
            elif deleting:
                # Work for the deletion: dead entries of the victim over
                # several release batches (1,024 entries each).
                victim = sorted(expected)[-1]
                overwrite(root, model, rng, 3000)
                delay = rng.uniform(0.0, 1.5 * t_delete)
                ok, said = crash_during(node, ["delete", "vol1", victim], delay)
            else:
                overwrite(root, model, rng, rng.randrange(50, 400))
                victim = "c%03d" % rnd
                frozen = {f: bytes(v) for f, v in model.items()}
                delay = steered(creates, created_gone, created, 0.0, 4 * t_create,
                                lambda: rng.uniform(0.0, 1.5 * t_create))
                ok, said = crash_during(node, ["create", "vol1", victim], delay)
            fsck = node.fsck(check=False)
            c("round %d (%s %s, killed after %.3f s): fsck of the crashed reserve is clean" % (
                rnd, kind, victim, delay), fsck.returncode == 0, (fsck.stdout + fsck.stderr)[-2000:])
            node.start()
            node.mount()
            now = listed(node)
            if rolling:
                # Exactly one of the two states, whole: the files and the
                # file made since agree on which.
                at_snapshot = reads_as(root, expected[victim]) is None
                as_before = reads_as(root, before) is None
                try:
                    with open(os.path.join(root, made), "rb") as fh:
                        made_now = fh.read()
                except FileNotFoundError:
                    made_now = None
                if at_snapshot and made_now is None:
                    rolled_back += 1
                    model = {f: bytearray(v) for f, v in expected[victim].items()}
                elif as_before and made_now == made_data and not ok:
                    not_rolled_back += 1
                    os.unlink(os.path.join(root, made))  # the model has only the f files
                    fsync_dir(root)
                else:
                    c("round %d: the volume reads as at snapshot %s or as before the rollback, nothing between" % (
                        rnd, victim), False,
                      {"answered": ok, "files at the snapshot": at_snapshot, "files as before": as_before,
                       "made since": "gone" if made_now is None else
                       "whole" if made_now == made_data else "%d bytes, differs" % len(made_now),
                       "files": reads_as(root, before), "said": said})
                    break
            elif deleting:
                if victim in now:
                    deleted_whole += 1
                    c("round %d: the snapshot being deleted is still whole" % rnd,
                      snapshot_reads_as(root, victim, expected[victim]) is None and not ok, said)
                else:
                    deleted_gone += 1
                    del expected[victim]
            else:
                if victim in now:
                    created += 1
                    expected[victim] = frozen
                    c("round %d: the snapshot created is whole" % rnd,
                      snapshot_reads_as(root, victim, frozen) is None)
                else:
                    created_gone += 1
                    c("round %d: a create that was answered is not lost" % rnd, not ok, said)
            c("round %d: the snapshots are exactly those expected" % rnd, now == set(expected),
              (sorted(now), sorted(expected)))
            # The older snapshots are untouched (a few of them each round).
            for name in rng.sample(sorted(expected), min(3, len(expected))):
                c("round %d: snapshot %s still reads as it was" % (rnd, name),
                  snapshot_reads_as(root, name, expected[name]) is None)
            for f in range(FILES):
                with open(os.path.join(root, "f%d" % f), "rb") as fh:
                    if fh.read() != model[f]:
                        c("round %d: f%d reads as written" % (rnd, f), False)
        print("creates: %d whole, %d gone; deletes: %d finished (at the call or the open), %d still whole; "
              "rollbacks: %d done, %d not" % (created, created_gone, deleted_gone, deleted_whole, rolled_back,
                                               not_rolled_back), flush=True)
        c("the kills landed both before and after the creates' commit", created > 0 and created_gone > 0,
          (created, created_gone))
        c("the kills landed both before and after the rollbacks' commit", rolled_back > 0 and not_rolled_back > 0,
          (rolled_back, not_rolled_back))
        # A deletion the kill cut after it began is finished by the next
        # open, which says so in the log.
        with open(node.log_path) as lf:
            resumed = lf.read().count("snapshot deletion finished")
        # Whether a kill landed there is chance: the window (after the
        # deletion's mark commits, before its last batch is released) is a
        # short tail of the call, most of which flushes the cache. Not a
        # failure when none did (a CI run failed so with seed 1795944021);
        # DomainTest.ACutShortSnapshotDeletionIsFinishedAtOpen covers that
        # finish deterministically, and every round above checks the state
        # a kill left, wherever it landed.
        print("deletions cut short mid-way and finished at the next open: %d%s" % (
            resumed, "" if resumed else " (no kill landed in that window this run; seed %d)" % a.seed), flush=True)
        free_before = node.cli("volume", "show", "vol1", json_out=True)["volume"]
        for name in sorted(expected):
            node.cli("snapshot", "delete", "vol1", name)
        after = node.cli("volume", "show", "vol1", json_out=True)["volume"]
        c("no snapshot space is left after deleting them all", after.get("snapshot_bytes", 0) == 0 and
          after.get("snapshots", 0) == 0, (free_before, after))
        node.unmount()
        node.stop()
        fsck = node.fsck(check=False)
        c("fsck after the clean stop is clean", fsck.returncode == 0, (fsck.stdout + fsck.stderr)[-2000:])
    finally:
        if c.failed:
            print("nasgwd's log:\n" + node.log_tail(6000), flush=True)
        node.close()
    print("%d passed, %d failed" % (c.passed, c.failed), flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
