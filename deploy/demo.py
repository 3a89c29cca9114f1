#!/usr/bin/env python3
"""The one-command demo (`make demo`, `make demo-stop`): a controller pair.

  demo.py up --build DIR     start the demo, prove it serves, print how to use it
  demo.py down               stop it and remove everything it made
  demo.py status             print how to use it
  demo.py fail a|b           that node's machine dies; returns once the partner serves
  demo.py revive a|b         it comes back and stands by
  demo.py watch              a client writing and reading back through the VIP

`up` starts a keeper process (detached) that owns the whole lab, so gc
(`sanlab gc`, run by every test run) removes the demo only once the keeper is
gone, and `down` is one SIGTERM to it; fail and revive are asked of it on
its control socket. The keeper builds, in namespaces (cluster_lab.Lab):

  array    tgtd with three thin 4 GiB LUNs          (sanlab netns lab "demo")
  nodes a, b   nasgwd on those LUNs, ganesha.nfsd with FSAL_NASGW and smbd
           with vfs_nasgw, in each node's namespace; Corosync, the cache
           mirror and head forwarding on their interconnect (198.18.0.1-2),
           the virtual IPs 198.18.1.50 (held by the owner) and 198.18.1.51
           (held by the other node, which relays its heads to the owner) on
           the clients' LAN
  client   a client namespace on that LAN (198.18.1.100)

then formats a reserve on a (b stands by), creates volume "demo", exports it
to the LAN with `nasgw export add`, and proves it serves through the VIP: a
file written over NFSv3 with libnfs (nfs-cp) reads back byte for byte over
NFSv3 and NFSv4 (nfs-cat), and one written over NFSv4.1 (nfs-rs) reads back
too, and both read back through the second VIP (the other node). Then a
share of the volume's directory "smb" (`nasgw share add`): a file written
over SMB (smbclient) reads back exact over SMB and over NFSv3, and over SMB
through the second VIP.
"""

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import cluster_lab  # noqa: E402
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402
import smblab  # noqa: E402

RUN = "/run/nasgw-demo"
KEEPER_PID = os.path.join(RUN, "keeper.pid")
STATUS = os.path.join(RUN, "status.json")
CONTROL = os.path.join(RUN, "control.sock")
LAN_CIDR = "198.18.1.0/24"  # the clients' LAN (sanlab --lan)
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


def prove(c, c2, tmp):
    """Writes and reads back through the real clients, over the pair's VIP
    (c), and reads back over the other node's (c2); raises on a mismatch."""
    local = os.path.join(tmp, "hello.bin")
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
        raise RuntimeError("NFSv4.1 read-back: %r" % (r,))
    listing = sorted(c.nfs_ls("demo", version=3))
    if "hello.bin" not in listing or "hello-v41.txt" not in listing:
        raise RuntimeError("the export lists %s" % listing)
    # Through the other node's VIP: its ganesha, relayed to the owner.
    if c2.nfs_cat("demo/hello.bin", version=3) != payload:
        raise RuntimeError("NFSv3 read-back through %s differs from what was written" % cluster_lab.VIP2)
    r = c2.nfsrs("with client.open('hello-v41.txt', 'rb') as f:\n    out(f.read().decode())\n", path="demo",
                 version="4.1")
    if r[0] != "written over NFSv4.1":
        raise RuntimeError("NFSv4.1 read-back through %s: %r" % (cluster_lab.VIP2, r))
    return listing


class Vip:
    """smblab's view of a server: where clients reach it."""
    addr = cluster_lab.VIP


class Vip2:
    addr = cluster_lab.VIP2


def prove_smb(c, tmp, user):
    """A file written over SMB (smbclient) reads back exact over SMB and over
    NFSv3; raises otherwise."""
    local = os.path.join(tmp, "hello-smb.bin")
    back = local + ".back"
    payload = b"hello from nasgw over SMB\n" + os.urandom(1 << 20)
    with open(local, "wb") as f:
        f.write(payload)
    smblab.smbclient(c, Vip, "demo", user, "put %s hello-smb.bin; get hello-smb.bin %s" % (local, back))
    with open(back, "rb") as f:
        if f.read() != payload:
            raise RuntimeError("SMB read-back differs from what was written")
    if c.nfs_cat("demo/smb/hello-smb.bin", version=3) != payload:
        raise RuntimeError("the file written over SMB reads back different over NFSv3")
    deadline = time.monotonic() + 30
    while True:  # the share reaches b's smbd with the owner's next catalog (no event to wait on here)
        try:
            smblab.smbclient(c, Vip2, "demo", user, "get hello-smb.bin %s.2" % back)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    with open(back + ".2", "rb") as f:
        if f.read() != payload:
            raise RuntimeError("SMB read-back through %s differs from what was written" % cluster_lab.VIP2)


class Pair:
    """The demo's controller pair (cluster_lab.Lab): two nodes on one array,
    Corosync and the cache mirror on their interconnect, the VIP on the
    clients' LAN; ganesha and smbd on each node."""

    def __init__(self, build):
        self.build = build
        self.lab = cluster_lab.Lab(build, nfs=True, name=LAB, luns=3, size="4G", tag="demo", forward=True,
                                   vips=(cluster_lab.VIP, cluster_lab.VIP2))
        self.user = smblab.User("nasgw-demo", password="nasgw-demo-1")
        self.smbds = []
        smblab.install_module(build)
        for i, n in enumerate(self.lab.nodes):
            smbd = smblab.Smbd(self.lab.nfs_labs[i], [], users=[self.user])
            shares = os.path.join(smbd.dir, "nasgw-shares.conf")
            smbd.global_options["include"] = shares
            smbd.make_dirs()
            open(shares, "a").close()  # the other node gets the owner's shares over the interconnect
            n.s["extra_config"] += "[smb]\nshares_file = %s\nsmbd_pid_file = %s\n" % (
                nasgwlab.toml_str(shares), nasgwlab.toml_str(smbd.pid_file))
            n.save()
            self.smbds.append(smbd)
        self.tmp = self.lab.nfs_labs[0].dir
        self.failed = set()

    def start(self):
        a, _ = self.lab.start_pair(ag="256M", volume="demo")
        a.cli("export", "add", "demo", "--clients", LAN_CIDR, "--no-root-squash")
        self.lab.start_ganesha()
        cluster_lab.wait_for(lambda: cluster_lab.spread_ok(self.lab), 60, "the VIPs spread over a and b")
        c, c2 = self.lab.client(), self.lab.client(cluster_lab.VIP2)
        listing = prove(c, c2, self.tmp)
        # The SMB user (made with the first smbd's user database), its
        # directory made over NFSv4.1 (root is not squashed on the demo's
        # export) and shared with 'nasgw share add'.
        self.smbds[0].write_config()
        self.smbds[0].add_users()
        c.nfsrs("client.mkdir('smb', 0o755)\nclient.chown('smb', %d, %d)\n" % (self.user.uid, self.user.gid),
                path="demo", version="4.1")
        a.cli("share", "add", "demo/smb", "--name", "demo", "--valid-users", self.user.name,
              "--comment", "the nasgw demo volume")
        for smbd in self.smbds:
            smbd.start()
        prove_smb(c, self.tmp, self.user)
        return sorted(listing + ["smb"])

    def status(self):
        lab = self.lab
        return {"vip": cluster_lab.VIP, "vip2": cluster_lab.VIP2, "client_ns": lab.lan["client_ns"],
                "cli": lab.nodes[0].s["bins"]["cli"],
                "nodes": [{"name": "ab"[i], "ns": lab.hosts[i], "admin_socket": n.admin_socket,
                           "nasgwd_log": n.log_path, "ganesha_log": os.path.join(lab.nfs_labs[i].dir, "ganesha.log"),
                           "smbd_log": self.smbds[i].log_path} for i, n in enumerate(lab.nodes)],
                "smb_user": self.user.name, "smb_password": self.user.password}

    def fail(self, i):
        """Node i's machine dies (cluster_lab's panic: nasgwd, ganesha,
        corosync SIGKILLed, its links down; smbd too). Returns once the
        partner serves, with its takeover timeline."""
        if i in self.failed:
            raise RuntimeError("node %s is already down" % "ab"[i])
        other = self.lab.nodes[1 - i]
        if 1 - i in self.failed:
            raise RuntimeError("node %s is down: failing %s too would stop the demo" % ("ab"[1 - i], "ab"[i]))
        was = cluster_lab.state(self.lab.nodes[i])
        t0 = time.monotonic()
        self.lab.panic(i)
        self.smbds[i].stop()
        self.failed.add(i)
        if was != "online":
            return "node %s (it was %s) is down; node %s serves as before" % ("ab"[i], was, "ab"[1 - i])
        cluster_lab.wait_for(lambda: cluster_lab.state(other) == "online", cluster_lab.TAKEOVER_TIMEOUT_S,
                             "node %s's takeover" % "ab"[1 - i])
        return "node %s is down; node %s took over in %.1f s and holds both VIPs:\n  %s" % (
            "ab"[i], "ab"[1 - i], time.monotonic() - t0, "\n  ".join(cluster_lab.timeline(other)))

    def revive(self, i):
        """Node i's machine comes back: it stands by for the node that serves."""
        if i not in self.failed:
            raise RuntimeError("node %s is not down" % "ab"[i])
        cluster_lab.revive(self.lab, i, forwarded=True)
        self.smbds[i].start()
        self.failed.discard(i)
        return "node %s is back, standing by for node %s (move the reserve back with: cluster giveback on %s)" % (
            "ab"[i], "ab"[1 - i], "ab"[1 - i])

    def close(self):
        self.lab.close()


def serve(pair, ctl):
    """The keeper's loop: 'fail a|b' and 'revive a|b' from the control
    socket (demo.py fail/revive), until SIGTERM or SIGINT."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    while True:
        ready, _, _ = select.select([ctl, r], [], [])
        if r in ready:
            return
        conn, _ = ctl.accept()
        with conn:
            conn.settimeout(10)
            try:
                verb, node = conn.recv(256).decode().split()
                if node not in ("a", "b") or verb not in ("fail", "revive"):
                    raise ValueError
            except (ValueError, OSError):
                conn.sendall(json.dumps({"ok": False, "error": "usage: fail|revive a|b"}).encode())
                continue
            try:
                msg = getattr(pair, verb)("ab".index(node))
                reply = {"ok": True, "message": msg}
            except Exception as e:  # said to the caller; the demo carries on
                reply = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            conn.settimeout(None)
            try:
                conn.sendall(json.dumps(reply).encode())
            except OSError:
                pass


def keep(build, fd):
    """The keeper: builds the demo, reports on fd, then serves fail/revive
    until SIGTERM."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    report = os.fdopen(fd, "w")
    b = os.path.abspath(build)
    pair = ctl = None
    try:
        for p in (b + "/daemon/nasgwd", b + "/cli/nasgw", b + "/fsal/ganesha/libfsalnasgw.so",
                  b + "/fsal/samba/nasgw.so"):
            if not os.path.exists(p):
                raise RuntimeError("%s is not built" % p)
        pair = Pair(b)
        listing = pair.start()
        if os.path.exists(CONTROL):
            os.remove(CONTROL)
        ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ctl.bind(CONTROL)
        os.chmod(CONTROL, 0o600)
        ctl.listen(4)
        status = dict(pair.status(), ok=True, listing=listing, keeper=os.getpid())
        with open(STATUS, "w") as f:
            json.dump(status, f, indent=1)
        report.write(json.dumps(status) + "\n")
        report.close()
        serve(pair, ctl)
        return 0
    except Exception as e:  # report, then tear down
        try:
            logs = "".join("--- node %s\n%s\n" % ("ab"[i], n.log_tail(1500))
                           for i, n in enumerate(pair.lab.nodes)) if pair else ""
            report.write(json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, e),
                                     "nasgwd_log": logs}) + "\n")
            report.close()
        except (OSError, ValueError):
            pass
        return 1
    finally:
        if ctl is not None:
            ctl.close()
        if pair is not None:
            pair.close()
        for p in (STATUS, KEEPER_PID, CONTROL):
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
    me = "python3 %s" % os.path.relpath(os.path.abspath(__file__))
    a, b = st["nodes"]
    cli = "{cli} --socket {sock}"
    print("""
nasgw demo: up, a controller pair. Proven through the pair's virtual IPs: a
1 MiB file written over NFSv3 (libnfs) read back exact over NFSv3 and NFSv4,
a file written over NFSv4.1 (nfs-rs) read back, and a 1 MiB file written over
SMB (smbclient) read back exact over SMB and NFSv3; each read back through
the other node's VIP too.
Volume "demo" now holds: {listing}

  nodes          a (namespace {a_ns}) owns the reserve; b ({b_ns}) stands by,
                 fed the cache mirror, and relays its heads' calls to a over
                 the interconnect. Each runs nasgwd, ganesha + FSAL_NASGW and
                 smbd + vfs_nasgw, and both serve clients.
  virtual IPs    {vip} (on a) and {vip2} (on b) on the clients' LAN; the
                 survivor holds both when a node fails
  export         nfs://{vip}/demo   (NFSv3 and NFSv4; the client LAN may write)
  SMB share      //{vip}/demo  (volume demo's directory smb;
                 user {smb_user}, password {smb_password})
  client         namespace {client_ns} (there is no kernel NFS or SMB client
                 here: use libnfs's tools, nfs-rs or smbclient)

Try:
  {c} nfs-ls nfs://{vip}/demo
  {c} nfs-cp /etc/os-release nfs://{vip}/demo/os-release
  {c} nfs-cat 'nfs://{vip}/demo/os-release?version=4'
  {c} nfs-cat 'nfs://{vip2}/demo/os-release?version=3'     (through b, relayed to a)
  {c} smbclient //{vip}/demo -U {smb_user}%{smb_password} -c 'ls; put /etc/os-release os-release'
  {a_cli} cluster status
  {a_cli} export list
  {a_cli} stats

Fail a node and watch the client carry on (in two terminals):
  {me} watch             a client writing and reading back through the VIP
  {me} fail a            node a's machine dies (SIGKILL, its links down):
                         b fences it on the SAN, replays its mirror, takes both VIPs
  {me} revive a          a comes back, stands by for b, and gets {vip2} once idle
  {b_cli} cluster giveback
                         b moves the reserve (and {vip}) back to a

Logs: {a_log}
      {b_log}   (ganesha and smbd logs: see {status})
Stop: make demo-stop     (removes the namespaces, daemons and LUN files)
""".format(c=c, me=me, vip=st["vip"], vip2=st.get("vip2", "?"), listing=", ".join(st["listing"]), a_ns=a["ns"], b_ns=b["ns"],
           client_ns=st["client_ns"], smb_user=st["smb_user"], smb_password=st["smb_password"],
           a_cli=cli.format(cli=st["cli"], sock=a["admin_socket"]),
           b_cli=cli.format(cli=st["cli"], sock=b["admin_socket"]),
           a_log=a["nasgwd_log"], b_log=b["nasgwd_log"], status=STATUS))
    return 0


def control(verb, node):
    """Asks the keeper to fail or revive a node; prints what it says."""
    if keeper_pid() is None:
        print("demo: not running", file=sys.stderr)
        return 1
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(CONTROL)
        s.sendall(("%s %s" % (verb, node)).encode())
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    r = json.loads(out or b'{"ok": false, "error": "no answer from the keeper"}')
    if not r.get("ok"):
        print("demo: %s" % r.get("error"), file=sys.stderr)
        return 1
    print(r["message"])
    return 0


def watch(seconds):
    """A client in the LAN namespace: every half second, writes a new 16 KiB
    file through the VIP over NFSv3 (libnfs's nfs-cp, a new connection each
    time; it does not overwrite) and reads it back; prints each result and,
    at the end, the longest stretch without a successful round."""
    with open(STATUS) as f:
        st = json.load(f)
    ns, vip = st["client_ns"], st["vip"]
    data = os.path.join(RUN, "watch.bin")
    start = last_ok = time.monotonic()
    longest, n_ok, n_bad = 0.0, 0, 0
    run_id = time.strftime("%H%M%S")
    print("writing watch-%s-N.bin through nfs://%s/demo every 0.5 s (Ctrl-C to stop)" % (run_id, vip), flush=True)
    try:
        i = 0
        while seconds <= 0 or time.monotonic() - start < seconds:
            payload = os.urandom(16 << 10)
            with open(data, "wb") as f:
                f.write(payload)
            url = "nfs://%s/demo/watch-%s-%d.bin" % (vip, run_id, i)
            t0 = time.monotonic()
            try:
                subprocess.run(["ip", "netns", "exec", ns, "nfs-cp", data, url], check=True,
                               capture_output=True, timeout=20)
                back = subprocess.run(["ip", "netns", "exec", ns, "nfs-cat", url], check=True,
                                      capture_output=True, timeout=20).stdout
                ok = back == payload
                why = "" if ok else "read back differs"
            except subprocess.CalledProcessError as e:
                ok, why = False, (e.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or ["failed"]
                why = why[0] if isinstance(why, list) else why
            except subprocess.TimeoutExpired:
                ok, why = False, "no answer in 20 s"
            now = time.monotonic()
            stamp = time.strftime("%H:%M:%S")
            if ok:
                longest = max(longest, now - last_ok)
                last_ok = now
                n_ok += 1
                print("%s  write + read back 16 KiB: ok (%.0f ms)" % (stamp, (now - t0) * 1000), flush=True)
            else:
                n_bad += 1
                print("%s  FAILED: %s (%.1f s without a success)" % (stamp, why, now - last_ok), flush=True)
            i += 1
            time.sleep(max(0.0, t0 + 0.5 - time.monotonic()))  # the pace of a client, not a wait for an event
    except KeyboardInterrupt:
        pass
    finally:
        if os.path.exists(data):
            os.remove(data)
    print("%d rounds ok, %d failed; longest stretch without a success: %.1f s" % (n_ok, n_bad, longest))
    return 0 if n_bad == 0 else 1


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
    for verb in ("fail", "revive"):
        sub.add_parser(verb).add_argument("node", choices=["a", "b"])
    w = sub.add_parser("watch")
    w.add_argument("--seconds", type=float, default=0, help="stop after this long (0: at Ctrl-C)")
    a = ap.parse_args()
    if a.cmd == "up":
        return up(a.build)
    if a.cmd == "keep":
        return keep(a.build, a.fd)
    if a.cmd == "down":
        return down()
    if a.cmd in ("fail", "revive"):
        return control(a.cmd, a.node)
    if a.cmd == "watch":
        return watch(a.seconds)
    return show()


if __name__ == "__main__":
    sys.exit(main())
