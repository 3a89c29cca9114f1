#!/usr/bin/env python3
"""The one-command demo (`make demo`, `make demo-stop`).

  demo.py up --build DIR     start the demo, prove it serves, print how to use it
  demo.py down               stop it and remove everything it made
  demo.py status             print the demo's addresses (JSON)

`up` starts a keeper process (detached) that owns the whole lab, so gc
(`sanlab gc`, run by every test run) removes the demo only once the keeper is
gone, and `down` is one SIGTERM to it. The keeper builds, in namespaces:

  array    tgtd with three thin 4 GiB LUNs          (sanlab netns lab "demo")
  node     nasgwd on those LUNs, ganesha.nfsd with FSAL_NASGW and smbd with
           vfs_nasgw, in the
           controller node's namespace (SAN side 198.18.x, LAN side 198.19.x)
  client   a client namespace on the LAN

then formats a reserve, creates volume "demo", exports it to the LAN with
`nasgw export add`, and proves it serves: a file written over NFSv3 with
libnfs (nfs-cp) reads back byte for byte over NFSv3 and NFSv4 (nfs-cat), and
one written over NFSv4.1 (nfs-rs) reads back too. Then smbd with vfs_nasgw
in the node's namespace serves a share of the volume's directory "smb"
(`nasgw share add`), and a file written over SMB (smbclient) reads back
exact over SMB and over NFSv3.
"""

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402
import smblab  # noqa: E402

RUN = "/run/nasgw-demo"
KEEPER_PID = os.path.join(RUN, "keeper.pid")
STATUS = os.path.join(RUN, "status.json")
SANLAB = os.path.join(ROOT, "tests", "lab", "sanlab")
LAB = "demo"
UP_TIMEOUT_S = 300
DOWN_TIMEOUT_S = 120


def keeper_pid():
    try:
        with open(KEEPER_PID) as f:
            pid = int(f.read())
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"demo.py" in f.read():
                return pid
    except (OSError, ValueError):
        pass
    return None


def prove(lab):
    """Writes and reads back through the real clients; raises on a mismatch."""
    c = lab.client(1)
    local = os.path.join(lab.dir, "hello.bin")
    payload = b"hello from nasgw over NFS\n" + os.urandom(1 << 20)
    with open(local, "wb") as f:
        f.write(payload)
    c.nfs_put(local, "demo/hello.bin", version=3)
    if c.nfs_cat("demo/hello.bin", version=3) != payload:
        raise RuntimeError("NFSv3 read-back differs from what was written")
    if c.nfs_cat("demo/hello.bin", version=4) != payload:
        raise RuntimeError("NFSv4 read-back differs from what was written")
    r = c.nfsrs("with client.open('hello-v41.txt', 'wb') as f:\n"
                "    f.write(b'written over NFSv4.1')\n"
                "with client.open('hello-v41.txt', 'rb') as f:\n"
                "    out(f.read().decode())\n", path="demo", version="4.1")
    if r[0] != "written over NFSv4.1":
        raise RuntimeError("NFSv4.1 round trip failed: %s" % r)
    listing = sorted(c.nfs_ls("demo", version=3))
    if listing != ["hello-v41.txt", "hello.bin"]:
        raise RuntimeError("the export lists %s" % listing)
    return listing


def prove_smb(lab, srv, user):
    """A file written over SMB (smbclient) reads back exact over SMB and over
    NFSv3; raises otherwise."""
    c = lab.client(1)
    local = os.path.join(lab.dir, "hello-smb.bin")
    back = local + ".back"
    payload = b"hello from nasgw over SMB\n" + os.urandom(1 << 20)
    with open(local, "wb") as f:
        f.write(payload)
    smblab.smbclient(c, srv, "demo", user, "put %s hello-smb.bin; get hello-smb.bin %s" % (local, back))
    with open(back, "rb") as f:
        if f.read() != payload:
            raise RuntimeError("SMB read-back differs from what was written")
    if c.nfs_cat("demo/smb/hello-smb.bin", version=3) != payload:
        raise RuntimeError("the file written over SMB reads back different over NFSv3")


def keep(build, fd):
    """The keeper: builds the demo, reports on fd, then waits for SIGTERM."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    report = os.fdopen(fd, "w")
    b = os.path.abspath(build)
    bins = {"nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw"}
    fsal = b + "/fsal/ganesha/libfsalnasgw.so"
    vfs = b + "/fsal/samba/nasgw.so"
    node = lab = None
    san_started = False
    try:
        for p in list(bins.values()) + [fsal, vfs]:
            if not os.path.exists(p):
                raise RuntimeError("%s is not built" % p)
        san = json.loads(subprocess.run(
            [SANLAB, "--json", "start", LAB, "--mode", "netns", "--luns", "3", "--size", "4G",
             "--owner-pid", str(os.getpid())], check=True, capture_output=True, text=True).stdout)
        san_started = True
        lab = nfslab.Lab(name="demo", clients=1, server_ns=san["ns_host"], owner_pid=os.getpid())
        node = nasgwlab.Node(bins=bins, tag="demo", urls=[l["url"] for l in san["luns"]], netns=san["ns_host"])
        exports_file = os.path.join(node.s["dir"], "ganesha-exports.conf")
        # smbd in the same namespace, its shares from nasgwd ([smb]).
        smblab.install_module(b)
        user = smblab.User("nasgw-demo", password="nasgw-demo-1")
        smbd = smblab.Smbd(lab, [], users=[user])
        shares_file = os.path.join(smbd.dir, "nasgw-shares.conf")
        smbd.global_options["include"] = shares_file
        smbd.make_dirs()
        node.start("[nfs]\nexports_file = %s\nganesha_pid_file = %s\n[smb]\nshares_file = %s\nsmbd_pid_file = %s\n" % (
            nasgwlab.toml_str(exports_file), nasgwlab.toml_str(os.path.join(lab.dir, "ganesha.pid")),
            nasgwlab.toml_str(shares_file), nasgwlab.toml_str(smbd.pid_file)))
        node.format(ag="256M", volume="demo")
        node.cli("export", "add", "demo", "--clients", lab.subnet_cidr, "--no-root-squash")
        lab.start_server(nfslab.GaneshaConfig(plugins={"nasgw": fsal}, nasgw_socket=node.head_socket,
                                              exports_file=exports_file))
        listing = prove(lab)
        # The SMB user's directory, made over NFSv4.1 (root is not squashed
        # on the demo's export), shared with 'nasgw share add'.
        smbd.write_config()
        smbd.add_users()
        lab.client(1).nfsrs("client.mkdir('smb', 0o755)\nclient.chown('smb', %d, %d)\n" % (user.uid, user.gid),
                            path="demo", version="4.1")
        node.cli("share", "add", "demo/smb", "--name", "demo", "--valid-users", user.name,
                 "--comment", "the nasgw demo volume")
        smbd.start()
        prove_smb(lab, smbd, user)
        listing = sorted(listing + ["smb"])
        status = {"ok": True, "server": lab.server_addr, "client_ns": lab.client(1).ns,
                  "node_ns": san["ns_host"], "admin_socket": node.admin_socket, "cli": bins["cli"],
                  "head_socket": node.head_socket, "listing": listing, "keeper": os.getpid(),
                  "nasgwd_log": node.log_path, "ganesha_log": os.path.join(lab.dir, "ganesha.log"),
                  "smbd_log": smbd.log_path, "smb_user": user.name, "smb_password": user.password}
        with open(STATUS, "w") as f:
            json.dump(status, f, indent=1)
        report.write(json.dumps(status) + "\n")
        report.close()
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
        return 0
    except Exception as e:  # report, then tear down
        try:
            report.write(json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, e),
                                     "nasgwd_log": node.log_tail(1500) if node else ""}) + "\n")
            report.close()
        except (OSError, ValueError):
            pass
        return 1
    finally:
        if lab is not None:
            lab.close()
        if node is not None:
            node.close()
        if san_started:
            subprocess.run([SANLAB, "stop", LAB], capture_output=True)
        for p in (STATUS, KEEPER_PID):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass


def up(build):
    os.makedirs(RUN, exist_ok=True)
    if keeper_pid():
        print("demo: already running (make demo-stop first)", file=sys.stderr)
        show()
        return 0
    subprocess.run([SANLAB, "gc"], capture_output=True)
    nfslab.ensure_venv()
    r, w = os.pipe()
    log = open(os.path.join(RUN, "keeper.log"), "w")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "keep", "--build", build, "--fd", str(w)],
                         pass_fds=(w,), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    os.close(w)
    with open(KEEPER_PID, "w") as f:
        f.write(str(p.pid))
    print("demo: starting a lab SAN, nasgwd, ganesha and smbd (up to %d s)..." % UP_TIMEOUT_S, flush=True)
    ready, _, _ = select.select([r], [], [], UP_TIMEOUT_S)
    line = os.read(r, 1 << 20).decode() if ready else ""
    os.close(r)
    try:
        st = json.loads(line.splitlines()[0]) if line.strip() else {"ok": False, "error": "no report"}
    except ValueError:
        st = {"ok": False, "error": line[:2000]}
    if not st.get("ok"):
        print("demo: FAILED: %s\n%s\nkeeper log: %s/keeper.log" % (st.get("error"), st.get("nasgwd_log", ""), RUN),
              file=sys.stderr)
        if p.poll() is None:
            p.terminate()
        p.wait(DOWN_TIMEOUT_S)
        return 1
    show()
    return 0


def show():
    try:
        with open(STATUS) as f:
            st = json.load(f)
    except OSError:
        print("demo: not running")
        return 1
    c = "ip netns exec %s" % st["client_ns"]
    print("""
nasgw demo: up. Proven: a 1 MiB file written over NFSv3 (libnfs) read back exact
over NFSv3 and NFSv4, a file written over NFSv4.1 (nfs-rs) read back, and a
1 MiB file written over SMB (smbclient) read back exact over SMB and NFSv3.
Volume "demo" now holds: {listing}

  NFS server     {server} (ganesha + FSAL_NASGW in namespace {node_ns})
  export         nfs://{server}/demo   (NFSv3 and NFSv4; the client LAN may write)
  SMB share      //{server}/demo  (smbd + vfs_nasgw; volume demo's directory smb;
                 user {smb_user}, password {smb_password})
  client         namespace {client_ns} (there is no kernel NFS or SMB client
                 here: use libnfs's tools, nfs-rs or smbclient)

Try:
  {c} nfs-ls nfs://{server}/demo
  {c} nfs-cp /etc/os-release nfs://{server}/demo/os-release
  {c} nfs-cat 'nfs://{server}/demo/os-release?version=4'
  {c} smbclient //{server}/demo -U {smb_user}%{smb_password} -c 'ls; put /etc/os-release os-release'
  {c} nfs-cat nfs://{server}/demo/smb/os-release
  {cli} --socket {admin} export list
  {cli} --socket {admin} share list
  {cli} --socket {admin} volume list
  {cli} --socket {admin} stats

Logs: {nasgwd_log}
      {ganesha_log}
      {smbd_log}
Stop: make demo-stop     (removes the namespaces, daemons and LUN files)
""".format(c=c, admin=st["admin_socket"], **dict(st, listing=", ".join(st["listing"]))))
    return 0


def down():
    pid = keeper_pid()
    if pid is None:
        subprocess.run([SANLAB, "gc"], capture_output=True)
        print("demo: not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while os.path.exists("/proc/%d" % pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            subprocess.run([SANLAB, "gc"], capture_output=True)
            print("demo: keeper did not stop in time; killed it and ran gc", file=sys.stderr)
            return 1
        time.sleep(0.2)  # another process's exit: no event to wait on
    print("demo: stopped")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--build", required=True)
    k = sub.add_parser("keep")
    k.add_argument("--build", required=True)
    k.add_argument("--fd", type=int, required=True)
    sub.add_parser("down")
    sub.add_parser("status")
    a = ap.parse_args()
    if a.cmd == "up":
        return up(a.build)
    if a.cmd == "keep":
        return keep(a.build, a.fd)
    if a.cmd == "down":
        return down()
    return show()


if __name__ == "__main__":
    sys.exit(main())
