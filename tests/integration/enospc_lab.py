#!/usr/bin/env python3
"""A full reserve answers ENOSPC through the real path, loses nothing it
accepted, takes deletes and opens again (issue 12): tgtd -> nasgwd ->
ganesha + FSAL_NASGW -> NFS clients in lab namespaces.

A small reserve (two 96 MiB LUNs). Four clients fill it at once, each
writing 4 MiB files one after another until the server refuses: two over
NFSv4.1 (UNSTABLE WRITEs answered from the write-back cache, a COMMIT at
close), two over NFSv3 (every write stable). Then:

  - every writer ended with NOSPC, nothing else (an accepted write's space
    was reserved when it was accepted, so no flush failed for want of
    space: nasgw_cache_flush_errors_total stays 0, and nasgwd counted the
    refusals in nasgw_cache_no_space_total);
  - a new empty file can still be made, and data into it is refused;
  - a remove is accepted, and the room it gave back takes a new file;
  - nasgwd is SIGKILLed: nasgw-fsck is clean as the crash left the reserve,
    nasgwd opens it again, and every file whose writer saw its close
    succeed reads back as written.

  enospc_lab.py --build BUILD_DIR
"""

import os
import sys
import threading
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402

FILE_MIB = 4
WRITERS = (("4.1", 1), ("4.1", 2), ("3", 1), ("3", 2))  # (NFS version, lab namespace)

# The text of an error and of every error behind it (nfs-rs wraps an NFS
# status in the errors of its recovery logic).
ERRTEXT = """
def errtext(e, depth=0):
    if e is None or depth > 8:
        return ''
    t = '%s: %s' % (type(e).__name__, e)
    for x in (e.__cause__, e.__context__) + tuple(getattr(e, 'errors', None) or ()):
        inner = errtext(x, depth + 1)
        if inner:
            t += ' <- ' + inner
    return t
"""

# Writes FILE_MIB files until the server refuses one; out(): the files whose
# close (v4: COMMIT) succeeded, with their seeds, and the error that ended it.
FILLER = ERRTEXT + """
import random, nfs_rs
done, err = [], None
with nfs_rs.Client.connect(ARGS['url']) as c:
    c.mkdir(ARGS['dir'], 0o755)
    i = 0
    while err is None and i < 10000:
        path = '%s/f%d' % (ARGS['dir'], i)
        r = random.Random('%s-%d' % (ARGS['dir'], i))
        try:
            with c.open(path, 'wb') as f:
                for k in range(ARGS['mib']):
                    f.write(r.randbytes(1 << 20))
            done.append(i)
        except Exception as e:
            err = errtext(e)
        i += 1
out({'done': done, 'err': err})
"""

# Reads every file the filler finished and compares it with what it wrote.
CHECKER = """
import random, nfs_rs
bad = []
with nfs_rs.Client.connect(ARGS['url']) as c:
    for i in ARGS['done']:
        path = '%s/f%d' % (ARGS['dir'], i)
        r = random.Random('%s-%d' % (ARGS['dir'], i))
        want = b''.join(r.randbytes(1 << 20) for _ in range(ARGS['mib']))
        try:
            with c.open(path, 'rb') as f:
                got = f.read(len(want) + 1)
        except Exception as e:
            got = None
            bad.append('%s: %s' % (path, e))
            continue
        if got != want:
            bad.append('%s: %s bytes, differs' % (path, len(got)))
out(bad)
"""

failures = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        failures.append(what)


def nospc(err):
    return err is not None and ("NOSPC" in err.upper() or "NO SPACE" in err.upper())


def main():
    parsed = nasgwlab.nfs_lab_args()
    if parsed is None:
        return 1
    _, b, fsal = parsed
    node = lab = None
    try:
        node = nasgwlab.Node({"nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw", "fsck": b + "/fs/nasgw-fsck"},
                             luns=2, size="96M",
                             tag="enospc", metrics=True)
        node.start()
        node.format(ag="8M")
        lab = nfslab.Lab(name="nospc%d" % os.getpid(), clients=2)
        cfg = nfslab.GaneshaConfig(exports=[nfslab.nasgw_export(1, "vol1", "/vol1")], plugins={"nasgw": fsal},
                                   nasgw_socket=node.head_socket)
        lab.start_server(cfg)
        clients = {ns: lab.client(ns) for ns in (1, 2)}

        # The flood: every writer at once, until each is refused.
        results = [None] * len(WRITERS)

        def fill(i):
            ver, ns = WRITERS[i]
            try:
                results[i] = clients[ns].python(FILLER, {"url": clients[ns].url("/vol1", ver), "dir": "/w%d" % i,
                                                         "mib": FILE_MIB}, timeout=900)[0]
            except Exception as e:  # noqa: BLE001 - reported below
                results[i] = {"done": [], "err": "the filler failed: %s" % str(e)[-1500:]}

        threads = [threading.Thread(target=fill, args=(i,)) for i in range(len(WRITERS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = sum(len(r["done"]) for r in results)
        for i, r in enumerate(results):
            print("writer %d (NFSv%s): %d files of %d MiB, then %s" %
                  (i, WRITERS[i][0], len(r["done"]), FILE_MIB, r["err"]), flush=True)
        check(all(nospc(r["err"]) for r in results), "every writer was refused with NOSPC and nothing else")
        check(total * FILE_MIB >= 64, "the reserve held what it could before (%d MiB in whole files)" %
              (total * FILE_MIB))
        refused = node.metric("nasgw_cache_no_space_total")
        check(refused > 0, "nasgwd refused writes for want of space (%d)" % refused)
        check(node.metric("nasgw_cache_flush_errors_total") == 0,
              "no flush failed: an accepted write's space was reserved when it was accepted")

        # Full: an empty file still fits (metadata has its own room), data in
        # it does not; a remove is taken, and the room comes back.
        c = clients[1]
        after = c.python(ERRTEXT + """
import nfs_rs
res = {'create': None, 'write': None}
with nfs_rs.Client.connect(ARGS['url']) as c:
    try:
        f = c.open('/empty', 'wb')
        res['create'] = 'ok'
    except Exception as e:
        res['create'] = errtext(e)
    else:
        try:  # refused at the WRITE or at the close's COMMIT: either is the write's answer
            f.write(b'x' * (1 << 20))
            f.close()
            res['write'] = 'ok'
        except Exception as e:
            res['write'] = errtext(e)
out(res)
""", {"url": c.url("/vol1", "4.1")})[0]
        check(after["create"] == "ok", "a new empty file can be made on the full volume (%s)" % after["create"])
        check(nospc(after["write"]), "and data into it is refused with NOSPC (%s)" % after["write"])
        gone = [(i, r["done"][0]) for i, r in enumerate(results) if r["done"]][:2]
        removed = c.python("""
import nfs_rs
res = []
with nfs_rs.Client.connect(ARGS['url']) as c:
    for d, f in ARGS['files']:
        try:
            c.remove('/w%d/f%d' % (d, f))
            res.append('ok')
        except Exception as e:
            res.append('%s: %s' % (type(e).__name__, e))
    r = 'ok'
    try:
        with c.open('/again', 'wb') as f:
            f.write(b'y' * (1 << 20))
    except Exception as e:
        r = '%s: %s' % (type(e).__name__, e)
    res.append(r)
out(res)
""", {"url": c.url("/vol1", "4.1"), "files": gone})[0]
        check(removed[:-1] == ["ok"] * len(gone) and gone, "removes are accepted on the full volume (%s)" % removed)
        check(removed[-1] == "ok", "the room a remove gave back takes a new 1 MiB file (%s)" % removed[-1])
        for d, f in gone:
            results[d]["done"].remove(f)

        # A crash on the full reserve: checked as it was left, opened again,
        # everything accepted intact.
        node.kill()
        p = node.fsck(check=False)
        check(p.returncode == 0, "nasgw-fsck is clean after SIGKILL on the full reserve (exit %d: %s)" %
              (p.returncode, (p.stdout + p.stderr)[-1500:]))
        node.start()
        bad = []
        for i, r in enumerate(results):
            ver, ns = WRITERS[i]
            bad += clients[ns].python(CHECKER, {"url": clients[ns].url("/vol1", "4.1"), "dir": "/w%d" % i,
                                                "done": r["done"], "mib": FILE_MIB}, timeout=900)[0]
        check(not bad, "after the restart every file whose close succeeded reads back as written (%d files; %s)" %
              (total - len(gone), bad[:3]))
    except Exception:
        traceback.print_exc()
        failures.append("exception")
    finally:
        rc = nasgwlab.finish(failures, node=node, lab=lab)
    return rc


if __name__ == "__main__":
    sys.exit(main())
