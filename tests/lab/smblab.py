"""smblab: Samba in the NFS lab. Debian's smbd in an nfslab.Lab's server
namespace, serving shares through vfs_nasgw (and, for baselines, stock
shares of a local directory), with smbclient and the smbprotocol client
(PyPI) in the client namespaces. Standard library only; run as root.

    lab = nfslab.Lab(clients=1, server_ns=...)
    smblab.install_module(build_dir)              # the build's nasgw.so, where smbd loads it
    srv = smblab.Smbd(lab, [smblab.nasgw_share("vol", node.head_socket, "vol1")],
                      users=[smblab.User("alice")])
    srv.start()                                   # the users (Linux + tdbsam), smbd
    smblab.smbclient(lab.client(1), srv, "vol", "alice", "put /etc/hostname h")
    smblab.smbpy(lab.client(1), srv, "alice", code)   # smbprotocol's smbclient module
    lab.close()                                   # stops smbd, removes the users

State lives in the lab's (smbd's pid and start time, the users and groups
made), so nfslab's teardown and gc end smbd and remove the users even after
a crash.
Files: <lab dir>/smb/ (smb.conf, tdbsam, locks, logs).
"""

import os
import re
import shutil
import subprocess
import time

import nfslab

SMBD = "/usr/sbin/smbd"
SMBPASSWD = "/usr/bin/smbpasswd"
# smbd loads modules by name from its modules directory only (an absolute
# path in "vfs objects" is refused): `smbd -b | grep MODULESDIR`.
VFS_DIR = "/usr/lib/x86_64-linux-gnu/samba/vfs"
SMB_PORT = 445
START_TIMEOUT_S = 30.0


def install_module(build):
    """Puts the build's vfs_nasgw (build/fsal/samba/nasgw.so) where smbd loads
    it, by rename (an smbd that has the old one mapped keeps it). Returns the
    installed path; raises when the build has no module."""
    src = os.path.join(os.path.abspath(build), "fsal", "samba", "nasgw.so")
    if not os.path.isfile(src):
        raise nfslab.NfsLabError("%s is not built (deploy/samba-headers.sh, then build)" % src)
    os.makedirs(VFS_DIR, exist_ok=True)
    dst = os.path.join(VFS_DIR, "nasgw.so")
    tmp = dst + ".tmp%d" % os.getpid()
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, dst)
    return dst


class User:
    """A Linux user (no home, no shell) with a Samba password in the lab's
    tdbsam. name: at most 32 characters."""

    def __init__(self, name, password="Nasgw-lab-1", groups=()):
        self.name = name
        self.password = password
        self.groups = list(groups)

    @property
    def uid(self):
        return int(nfslab.run(["id", "-u", self.name]).stdout)

    @property
    def gid(self):
        return int(nfslab.run(["id", "-g", self.name]).stdout)

    def cred(self):
        return "%s%%%s" % (self.name, self.password)


def nasgw_share(name, socket, volume, subpath="", **options):
    """A share served by vfs_nasgw. options: more smb.conf parameters."""
    o = {"path": "/nasgw/%s%s" % (volume, ("/" + subpath) if subpath else ""), "vfs objects": "nasgw",
         "nasgw:socket": socket, "nasgw:volume": volume, "read only": "no"}
    if subpath:
        o["nasgw:subpath"] = subpath
    o.update(options)
    return (name, o)


def path_share(name, path, **options):
    """A stock share of a local directory (the baseline)."""
    o = {"path": path, "read only": "no"}
    o.update(options)
    return (name, o)


class Smbd:
    """smbd in the lab's server namespace."""

    def __init__(self, lab, shares, users=(), global_options=None):
        self.lab = lab
        self.shares = list(shares)
        self.users = list(users)
        self.global_options = dict(global_options or {})
        self.dir = os.path.join(lab.dir, "smb")
        self.conf_path = os.path.join(self.dir, "smb.conf")
        self.log_path = os.path.join(self.dir, "smbd.log")

    @property
    def addr(self):
        return self.lab.server_addr

    @property
    def pid(self):
        return self.lab.st.get("smbd_pid")

    @property
    def pid_file(self):
        """Where smbd writes its pid (its "pid directory"), for nasgwd's
        [smb] smbd_pid_file."""
        return os.path.join(self.dir, "pid", "smbd.pid")

    def render(self):
        d = self.dir
        g = {
            "workgroup": "NASGWLAB", "server role": "standalone server", "disable netbios": "yes",
            "smb ports": str(SMB_PORT), "bind interfaces only": "no",
            "passdb backend": "tdbsam:%s/private/passdb.tdb" % d,
            "private dir": d + "/private", "lock directory": d + "/lock", "state directory": d + "/state",
            "cache directory": d + "/cache", "pid directory": d + "/pid", "ncalrpc dir": d + "/ncalrpc",
            "log file": d + "/log.%m", "log level": "1", "load printers": "no", "printing": "bsd",
            "printcap name": "/dev/null", "disable spoolss": "yes", "map to guest": "never",
            "server min protocol": "SMB2_02",
        }
        g.update(self.global_options)
        lines = ["[global]"] + ["    %s = %s" % kv for kv in g.items()]
        for name, opts in self.shares:
            lines.append("[%s]" % name)
            lines += ["    %s = %s" % kv for kv in opts.items()]
        return "\n".join(lines) + "\n"

    def make_dirs(self):
        for sub in ("private", "lock", "state", "cache", "pid", "ncalrpc"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)

    def write_config(self):
        self.make_dirs()
        tmp = self.conf_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(self.render())
        os.replace(tmp, self.conf_path)

    def add_users(self):
        st = self.lab.st
        st.setdefault("users", [])
        for u in self.users:
            if len(u.name) > 32:
                raise nfslab.NfsLabError("user name %r: at most 32 characters" % u.name)
            if nfslab.run(["id", u.name], check=False).returncode != 0:
                st["users"].append(u.name)   # recorded first: teardown removes it
                self.lab.save()
                nfslab.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group",
                            u.name])
            for grp in u.groups:
                if nfslab.run(["getent", "group", grp], check=False).returncode != 0:
                    st.setdefault("groups", []).append(grp)
                    self.lab.save()
                    nfslab.run(["groupadd", grp])
                nfslab.run(["usermod", "-a", "-G", grp, u.name])
            nfslab.run([SMBPASSWD, "-c", self.conf_path, "-a", "-s", u.name],
                       input="%s\n%s\n" % (u.password, u.password))

    def log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def start(self):
        """Writes smb.conf, makes the users, starts smbd; returns once it
        waits for connections. Raises with its log otherwise."""
        st = self.lab.st
        if self.pid and nfslab.alive(self.pid, st.get("smbd_start")):
            raise nfslab.NfsLabError("smbd already runs (pid %d)" % self.pid)
        self.write_config()
        self.add_users()
        offset = self.log_size()
        log = open(self.log_path, "ab")
        # A session of its own: smbd's exit signals its whole process group.
        # nsenter execs smbd (no pid namespace), so the pid is smbd's.
        p = subprocess.Popen(["nsenter", "--net=/run/netns/" + self.lab.server_ns, "--", SMBD, "--foreground",
                              "--no-process-group", "--debug-stdout", "-d", "2", "-s", self.conf_path],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                             cwd=self.dir)
        log.close()
        st["smbd_pid"] = p.pid
        st["smbd_start"] = nfslab.proc_start_time(p.pid)
        self.lab.save()
        deadline = time.monotonic() + START_TIMEOUT_S
        # smbd says so in its log; there is no other event to wait on.
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            if "waiting for connections" in text:
                return self
            if p.poll() is not None:
                raise nfslab.NfsLabError("smbd exited (%s):\n%s" % (p.returncode, text[-4000:]))
            if time.monotonic() > deadline:
                self.stop()
                raise nfslab.NfsLabError("smbd not ready within %ss:\n%s" % (START_TIMEOUT_S, text[-4000:]))
            time.sleep(0.05)

    def wait_log(self, offset, text, timeout=START_TIMEOUT_S):
        """Waits until smbd's log holds `text` past `offset` (log_size() taken
        before the cause): e.g. "parent: Reloading services after SIGHUP",
        which smbd logs as it reloads its configuration (new connections are
        accepted after it is done). Raises after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                if text.encode() in f.read():
                    return
            if not nfslab.alive(self.pid, self.lab.st.get("smbd_start")):
                raise nfslab.NfsLabError("smbd exited while waiting for %r:\n%s" % (text, self.log_tail()))
            if time.monotonic() > deadline:
                raise nfslab.NfsLabError("no %r in smbd's log within %ss:\n%s" % (text, timeout, self.log_tail()))
            time.sleep(0.05)

    def stop(self):
        st = self.lab.st
        nfslab.stop_pid(st.get("smbd_pid"), st.get("smbd_start"), nfslab.SMBD_STOP_TIMEOUT_S, "smbd")
        st["smbd_pid"] = None
        self.lab.save()
        nfslab.stop_smbd_helpers(self.conf_path)

    def share_log(self, client_addr):
        """The log of smbd's process serving a client (log.<address>)."""
        try:
            with open(os.path.join(self.dir, "log.%s" % client_addr), errors="replace") as f:
                return f.read()
        except OSError:
            return ""


# ---- clients

def smbclient(client, server, share, user, commands, check=True, timeout=nfslab.CMD_TIMEOUT_S):
    """Runs smbclient's `commands` (';'-separated) on //server/share as user
    from a client namespace; the CompletedProcess. smbclient exits 1 when a
    command failed; its NT_STATUS is in stdout."""
    return client.run(["smbclient", "//%s/%s" % (server.addr, share), "-U", user.cred(), "-m", "SMB3",
                       "-c", commands], check=check, timeout=timeout)


NT_STATUS = re.compile(r"NT_STATUS_[A-Z_]+")


def statuses(p):
    """The NT_STATUS codes smbclient printed."""
    return NT_STATUS.findall(p.stdout + p.stderr)


SMBPY_PRELUDE = """
import smbclient, smbprotocol.exceptions
smbclient.ClientConfig(username=ARGS['user'], password=ARGS['password'], require_secure_negotiate=False)
SERVER = ARGS['server']
def unc(share, path=''):
    return '\\\\\\\\%s\\\\%s' % (SERVER, share) + (('\\\\' + path.replace('/', '\\\\')) if path else '')
def status(e):
    if isinstance(e, smbprotocol.exceptions.SMBResponseException):
        return '0x%08x' % e.status
    if getattr(e, 'ntstatus', None) is not None:  # SMBOSError (smbclient.open_file...)
        return '0x%08x' % e.ntstatus
    return repr(e)

# SMB2 LOCK (MS-SMB2 2.2.26), which the smbprotocol package does not offer:
# one element on an open file (smbclient.open_file(..., buffering=0)).
# Raises SMBResponseException (status(e) gives its NT status) when refused.
import struct
from collections import OrderedDict
from smbprotocol.header import Commands
from smbprotocol.structure import Structure, IntField, BytesField
LOCK_SHARED, LOCK_EXCLUSIVE, LOCK_UNLOCK, LOCK_FAIL_IMMEDIATELY = 0x1, 0x2, 0x4, 0x10
class _LockRequest(Structure):
    COMMAND = Commands.SMB2_LOCK
    def __init__(self):
        self.fields = OrderedDict([
            ('structure_size', IntField(size=2, default=48)),
            ('lock_count', IntField(size=2)),
            ('lock_sequence', IntField(size=4)),
            ('file_id', BytesField(size=16)),
            ('locks', BytesField()),
        ])
        super().__init__()
def smb_lock(raw, offset, length, flags):
    o = raw.fd
    req = _LockRequest()
    req['lock_count'] = 1
    req['file_id'] = o.file_id
    req['locks'] = struct.pack('<QQII', offset, length, flags, 0)
    r = o.connection.send(req, o.tree_connect.session.session_id, o.tree_connect.tree_connect_id)
    o.connection.receive(r)
"""


def smbpy(client, server, user, code, args=None, check=True, timeout=nfslab.CMD_TIMEOUT_S):
    """Runs `code` in a client namespace with the smbprotocol package's
    smbclient module logged in as user; unc(share, path) names a file, and
    status(e) the NT status class of an exception. Returns out() values as
    Client.python does."""
    a = dict(args or {})
    a.update({"user": user.name, "password": user.password, "server": server.addr})
    return client.python(SMBPY_PRELUDE + code, a, check=check, timeout=timeout)


SMBTORTURE_RESULT = re.compile(r"^(success|failure|error|skip|xfail): (\S+)", re.M)


def smbtorture(client, server, user, share, tests, timeout=nfslab.CMD_TIMEOUT_S):
    """Runs smbtorture's `tests` (suites or single tests) from the client
    namespace against //server/share as user; {test: outcome}, outcome
    success, failure (error too), skip or xfail."""
    p = client.run(["smbtorture", "//%s/%s" % (server.addr, share), "-U", user.cred()] + list(tests), check=False,
                   timeout=timeout)
    out = {}
    for outcome, name in SMBTORTURE_RESULT.findall(p.stdout + p.stderr):
        out[name] = "failure" if outcome == "error" else outcome
    return out


def readline(p, timeout=nfslab.CMD_TIMEOUT_S):
    """The next line a smbpy_popen() script (or any text Popen) wrote, or
    "" if none came within `timeout` seconds or it ended: a script that
    hangs fails its check instead of hanging the test."""
    import select
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline().strip() if ready else ""


def stderr_of(p):
    """What a Popen wrote to stderr, once it has ended (never waits on a
    live one: its stderr has no end yet)."""
    if p.poll() is None:
        return "(still running)"
    return p.stderr.read()


def _script_popen(client, code, args):
    """Runs `code` in the lab venv's python in a client namespace, with
    pipes; it sees ARGS (the dict `args`) and out(obj)."""
    import json
    prelude = ("import json, os, sys\nARGS = json.loads(os.environ['NFSLAB_ARGS'])\n"
               "def out(x):\n    print('NFSLAB-OUT ' + json.dumps(x), flush=True)\n")
    return client.popen(["env", "NFSLAB_ARGS=" + json.dumps(args), nfslab.ensure_venv(), "-c", prelude + code],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def smbpy_popen(client, server, user, code, args=None):
    """Starts `code` as smbpy() runs it, with pipes, for a script that holds
    a handle while the test does something else (it reads its cue from
    stdin, says where it is on stdout). The Popen; out() lines start with
    "NFSLAB-OUT "."""
    a = dict(args or {})
    a.update({"user": user.name, "password": user.password, "server": server.addr})
    return _script_popen(client, SMBPY_PRELUDE + code, a)


# pike-smb2 (PyPI, in the lab venv) connected as the user to a share: for
# what the smbprotocol package does not offer (leases, their breaks,
# durable reconnects). The script sees client, conn, chan, tree, smb2,
# SHARE_ALL and RWH.
PIKE_PRELUDE = r"""
import array, pike.model, pike.smb2 as smb2
client = pike.model.Client()
conn = client.connect(server=ARGS['server'], port=445).negotiate()
chan = conn.session_setup(ARGS['cred'])
tree = chan.tree_connect(ARGS['share'])
SHARE_ALL = smb2.FILE_SHARE_READ | smb2.FILE_SHARE_WRITE | smb2.FILE_SHARE_DELETE
RWH = smb2.SMB2_LEASE_READ_CACHING | smb2.SMB2_LEASE_WRITE_CACHING | smb2.SMB2_LEASE_HANDLE_CACHING
"""


def pike_popen(client, server, user, share, code, args=None):
    """Starts `code` after PIKE_PRELUDE (logged in as `user` on `share`), with
    pipes, as smbpy_popen does; the script sees `args` in ARGS too."""
    a = dict(args or {})
    a.update({"server": server.addr, "cred": user.cred(), "share": share})
    return _script_popen(client, PIKE_PRELUDE + code, a)


def kill_all(*procs):
    """Kills and reaps the Popens (None allowed) still running: a test's
    finally, so that no client outlives a failed check."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
