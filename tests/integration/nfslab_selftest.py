#!/usr/bin/env python3
"""The NFS lab's self-test (tests/lab/nfslab.py): the stock path the NFS
benchmark compares against, Debian's ganesha.nfsd with FSAL_VFS exporting a
directory on XFS on a loop device, reached from client namespaces.

  - v3 (libnfs-utils) and v4.1 (nfs-rs) writes and reads from client 1,
    checked byte for byte, also on the server's disk;
  - client 2, outside the export's CLIENT range, is refused (v3 MOUNT and v4);
  - reload(): the exports file (%include) grants client 2, SIGHUP, it gets in;
  - teardown leaves no process, namespace, loop device, mount or file;
  - a harness SIGKILLed with a lab up: `sanlab gc` removes all of it.

Prints one line per check and "N passed, N failed".
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lab"))
import nfslab  # noqa: E402
from nasgwlab import Checks  # noqa: E402

SANLAB = os.path.join(HERE, "..", "lab", "sanlab")


def leftovers(st):
    """What of a lab's state still exists on the machine."""
    out = []
    for key in ("ganesha", "rpcbind"):
        pid = st.get(key + "_pid")
        if pid and nfslab.alive(pid, st.get(key + "_start")):
            out.append("%s pid %d" % (key, pid))
    for ns in [st["ns_switch"], st["ns_server"]] + [c["ns"] for c in st["clients"]]:
        if nfslab.netns_exists(ns):
            out.append("netns " + ns)
    mounts = nfslab.mounted_paths()
    out += ["mount " + m for m in mounts if m.startswith(st["dir"])]
    p = subprocess.run(["losetup", "-n", "-O", "BACK-FILE", "-l"], stdout=subprocess.PIPE, text=True)
    out += ["loop " + l.strip() for l in p.stdout.splitlines() if l.strip().startswith(st["dir"])]
    if os.path.exists(st["dir"]):
        out.append("dir " + st["dir"])
    if os.path.exists(nfslab.state_path(st["name"])):
        out.append("state " + st["name"])
    return out


def exports_text(lab, path, clients):
    return nfslab.vfs_export(1, path, "/vfs", clients=clients)


def main_checks(c):
    lab = nfslab.Lab(clients=2)
    st = None
    local = "/tmp/nasgw-nfsself-%d.bin" % os.getpid()
    try:
        st = dict(lab.st)
        c1, c2 = lab.client(1), lab.client(2)
        c("lab: server %s, clients %s %s on %s" % (lab.server_addr, c1.addr, c2.addr, lab.subnet_cidr),
          c1.addr != c2.addr and lab.server_addr.startswith("198.19.2"))
        xfs = lab.make_xfs("512M")
        export = os.path.join(xfs, "export")
        os.makedirs(export)
        exports_file = os.path.join(lab.dir, "exports.conf")
        with open(exports_file, "w") as f:
            f.write(exports_text(lab, export, [c1.addr]))
        t0 = time.monotonic()
        server = lab.start_server(nfslab.GaneshaConfig(exports_file=exports_file))
        c("ganesha up (NFS SERVER INITIALIZED) in %.2f s, rpcbind pid %d, ganesha pid %d" % (
            time.monotonic() - t0, server.rpcbind_pid, server.pid), True)
        progs = c1.run(["rpcinfo", "-p", lab.server_addr]).stdout
        c("rpcbind in the server namespace has nfs 3, mountd on %d, nlockmgr" % nfslab.MNT_PORT,
          " 100003    3   tcp   2049  nfs" in progs and "%d  mountd" % nfslab.MNT_PORT in progs
          and "nlockmgr" in progs, progs)

        # v3, libnfs-utils
        data = os.urandom(3 << 20 | 123)
        with open(local, "wb") as f:
            f.write(data)
        c1.nfs_put(local, "vfs/v3.bin", version=3)
        back = c1.nfs_cat("vfs/v3.bin", version=3)
        c("v3 write + read (nfs-cp, nfs-cat) of %d bytes" % len(data), back == data, (len(back), len(data)))
        with open(os.path.join(export, "v3.bin"), "rb") as f:
            c("v3 file on the server's XFS", f.read() == data)
        c("v3 nfs-ls lists it", c1.nfs_ls("vfs", version=3) == ["v3.bin"], c1.nfs_ls("vfs", version=3))
        c("v4 nfs-cat reads it", c1.nfs_cat("vfs/v3.bin", version=4) == data)

        # v4.1, nfs-rs
        got = c1.nfsrs("import hashlib, os\n"
                       "d = os.urandom(2 << 20)\n"
                       "client.mkdir('dir41', exist_ok=True)\n"
                       "with client.open('dir41/v41.bin', 'wb') as f:\n"
                       "    f.write(d)\n"
                       "with client.open('dir41/v41.bin', 'rb') as f:\n"
                       "    r = f.read()\n"
                       "with client.open('v3.bin', 'rb') as f:\n"
                       "    v3 = f.read()\n"
                       "out({'version': str(client.version), 'same': r == d, 'sha': hashlib.sha256(d).hexdigest(),\n"
                       "     'v3sha': hashlib.sha256(v3).hexdigest(), 'ls': client.listdir('dir41')})",
                       "vfs", version="4.1")[0]
        c("v4.1 write + read (nfs-rs, %s) of 2 MiB" % got["version"], got["same"] and "4.1" in got["version"], got)
        with open(os.path.join(export, "dir41", "v41.bin"), "rb") as f:
            c("v4.1 file on the server's XFS", hashlib.sha256(f.read()).hexdigest() == got["sha"])
        c("v4.1 reads the v3 file", got["v3sha"] == hashlib.sha256(data).hexdigest())
        c("v4.1 listdir", got["ls"] == ["v41.bin"], got["ls"])

        # client 2 is outside the CLIENT range
        p = c2.nfs_ls("vfs", version=3, check=False)
        c("client 2 refused over v3 (MNT3ERR_ACCES)", p.returncode != 0 and "MNT3ERR_ACCES" in p.stderr,
          (p.returncode, p.stdout, p.stderr))
        p = c2.nfsrs("out(client.listdir('dir41'))", "vfs", version="4.1", check=False)
        c("client 2 refused over v4.1", p.returncode != 0 and "NFSLAB-OUT" not in p.stdout,
          (p.returncode, p.stdout, p.stderr[-500:]))

        # reload: grant client 2 in the %include'd exports file
        with open(exports_file, "w") as f:
            f.write(exports_text(lab, export, [c1.addr, c2.addr]))
        log = server.reload()
        c("reload: SIGHUP, log says the export reload finished", "Reread exports complete" in log, log[-800:])
        p = c2.nfs_ls("vfs", version=3, check=False)
        c("client 2 admitted after the reload (v3)", p.returncode == 0 and "v3.bin" in p.stdout,
          (p.returncode, p.stderr))
        got = c2.nfsrs("out(client.listdir('dir41'))", "vfs", version="4.1")
        c("client 2 admitted after the reload (v4.1)", got == [["v41.bin"]], got)
        with open(exports_file, "w") as f:
            f.write("EXPORT { this is not a valid block }\n")
        try:
            server.reload()
            c("a bad exports file makes reload() raise", False, "no error")
        except nfslab.NfsLabError as e:
            c("a bad exports file makes reload() raise", "ganesha reload" in str(e), e)

        notes = server.stop()
        c("ganesha and rpcbind stop on SIGTERM", not notes, notes)
        st = dict(lab.st)
    finally:
        if os.path.exists(local):
            os.remove(local)
        lab.close()
    left = leftovers(st or lab.st)
    c("teardown leaves nothing behind", not left, left)


CRASHER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
import nfslab, json
lab = nfslab.Lab(clients=2)
x = lab.make_xfs("512M")
lab.start_server(nfslab.GaneshaConfig(exports=[nfslab.vfs_export(1, x, "/vfs")]))
print(json.dumps(lab.st), flush=True)
time.sleep(600)
"""


def gc_checks(c):
    """A harness dies with a lab up; the next `sanlab gc` cleans it all."""
    p = subprocess.Popen([sys.executable, "-c", CRASHER, os.path.join(HERE, "..", "lab")],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    st = None
    try:
        line = p.stdout.readline()
        st = json.loads(line) if line else None
        c("crasher brought a lab up", st is not None and st.get("ganesha_pid"), line)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    if not st:
        return
    c("after the harness's SIGKILL, ganesha still runs (orphaned)", nfslab.alive(st["ganesha_pid"], st["ganesha_start"]))
    g = subprocess.run([SANLAB, "gc"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    c("sanlab gc reports the NFS lab", g.returncode == 0 and ("nfslab " + st["name"]) in g.stdout,
      (g.returncode, g.stdout, g.stderr))
    left = leftovers(st)
    c("sanlab gc removed ganesha, rpcbind, namespaces, loop, mount, files", not left, left)


def main():
    if os.geteuid() != 0:
        print("nfslab_selftest: must run as root", file=sys.stderr)
        return 2
    c = Checks()
    try:
        main_checks(c)
    except Exception as e:  # a check that could not even run is a failure, with its reason
        c("self-test ran to the end", False, "%s: %s" % (type(e).__name__, e))
    try:
        gc_checks(c)
    except Exception as e:
        c("gc test ran to the end", False, "%s: %s" % (type(e).__name__, e))
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
