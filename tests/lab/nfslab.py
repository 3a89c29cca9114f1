"""nfslab: the NFS lab. A LAN of network namespaces with NFS-Ganesha on one
side and userspace NFS clients on the other, for the integration tests, the
NFS benchmark and the demo. Standard library only; run as root.

    lab = Lab(clients=2)                      # a LAN: switch, server, 2 clients
    cfg = GaneshaConfig(exports=[vfs_export(1, "/srv/x", "/x", clients=[lab.client(1).addr])])
    server = lab.start_server(cfg)            # rpcbind + ganesha.nfsd in the server namespace
    lab.client(1).nfs_put("/etc/hostname", "x/h")        # libnfs-utils, NFSv3
    lab.client(1).nfsrs("out(client.stat('h').size)", "x", version="4.1")   # nfs-rs
    lab.client(2).nfs_ls("x", check=False)    # refused: MNT3ERR_ACCES
    lab.close()                               # stops everything, also after a failure

Topology (one lab):

    nasgwnfs-<name>-sw    the switch: bridge br0; ports s0 (server), c<i> (client i)
    nasgwnfs-<name>-srv   the server (or any namespace passed as server_ns, e.g.
                          a sanlab host namespace standing for a controller node):
                          lan0 = 198.19.<200+k>.1/24
    nasgwnfs-<name>-c<i>  client i: lan0 = 198.19.<200+k>.<10+i>/24

Addresses come from 198.19.200.0/21, a block this lab reserves inside the
lab range 198.18.0.0/15: sanlab hands out /24s from the bottom of the range
(198.18.2.0 upwards, two per netns lab), so the two meet only if sanlab ever
had 228 labs at once. Each NFS lab takes one /24 of the eight. No namespace
has a default route: nothing leaves the machine.

The server side runs in a private mount namespace on top of the server's
network namespace (entered with nsenter): rpcbind keeps its socket and lock in
/run (/run/rpcbind.sock, /run/rpcbind.lock), and a second rpcbind on the
machine aborts ("another rpcbind is already running"), so /run is a private
tmpfs there. Directories under /run that the server must reach (the nasgwd
head socket's, an exports file's) are bound back into it.

Cleanup: every lab's state (owner pid and start time, namespaces, pids, loop
devices, mounts) is kept in /run/nasgw-lab/nfslab.d/<name>.json, written
before each resource is made. gc() (also run by `sanlab gc`, so by every
`make test` and `sanlab start`) tears down labs whose owner is gone: ganesha
then rpcbind by pid (SIGTERM, SIGKILL after a bounded wait; pids checked
against their start time, never by name), mounts, loop devices, namespaces,
files. Files live in /var/tmp/nasgw-nfslab/<name>/ (the same disk as the
sanlab LUN files, which the benchmark relies on).

CLI: python3 tests/lab/nfslab.py gc | list | stop NAME
"""

import fcntl
import json
import tempfile
import os
import re
import shutil
import signal
import subprocess
import sys
import time

STATE_ROOT = "/run/nasgw-lab"                 # shared with sanlab
LOCK = os.path.join(STATE_ROOT, ".lock")      # sanlab's allocation lock
STATE_DIR = os.path.join(STATE_ROOT, "nfslab.d")  # '.' is not allowed in sanlab lab names
DATA_ROOT = "/var/tmp/nasgw-nfslab"
NS_PREFIX = "nasgwnfs-"                       # not "nasgwlab-": sanlab gc owns those
NET_FIRST = 200                               # 198.19.200.0/21: eight /24s
NET_COUNT = 8
SERVER_HOST = 1
CLIENT_HOST0 = 10                             # client i is .<10+i>
CLIENTS_MAX = 200

GANESHA = "/usr/bin/ganesha.nfsd"
RPCBIND = "/usr/sbin/rpcbind"
DEBIAN_FSAL_DIR = "/usr/lib/x86_64-linux-gnu/ganesha"
NFS_PORT = 2049
MNT_PORT = 20048       # fixed, as an administrator would, so client-side rules can name it
NLM_PORT = 32803

VENV = "/var/cache/nasgw/venv"
# The PyPI clients, pinned to versions checked here (see docs/lab.md):
# NFS (nfs-rs, libnfs) and SMB2/3 (smbprotocol, for what smbclient cannot
# script: offsets, locks, share modes, held handles; pike-smb2, an SMB2/3
# protocol test suite, for smbtorture_lab's comparison).
VENV_PACKAGES = ["nfs-rs==0.8.7", "libnfs==1.0.post4", "smbprotocol==1.14.0", "pike-smb2==0.4.6"]

SERVER_START_TIMEOUT_S = 30.0
RELOAD_TIMEOUT_S = 20.0
GANESHA_STOP_TIMEOUT_S = 15.0   # ganesha's shutdown joins its worker threads
RPCBIND_STOP_TIMEOUT_S = 5.0
SMBD_STOP_TIMEOUT_S = 15.0      # smblab's smbd
CMD_TIMEOUT_S = 120


class NfsLabError(Exception):
    pass


# ---- small helpers -----------------------------------------------------------

def run(cmd, check=True, timeout=CMD_TIMEOUT_S, input=None, text=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text,
                       timeout=timeout, input=input)
    if check and p.returncode != 0:
        err = p.stderr if text else p.stderr.decode(errors="replace")
        out = p.stdout if text else p.stdout.decode(errors="replace")
        raise NfsLabError("command failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), out[-2000:],
                                                           err[-2000:]))
    return p


def proc_stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return None


def proc_start_time(pid):
    st = proc_stat(pid)
    return int(st[19]) if st else None


def alive(pid, start_time):
    """True while `pid` is the process we recorded and not yet a zombie.
    A zombie leader with a thread still running is a process in execve (a
    thread other than the leader exec'ing waits, in the kernel's de_thread,
    for the leader to become a zombie and then takes its pid): ganesha.nfsd
    restarting in place. That is alive."""
    st = proc_stat(pid)
    if st is None:
        return False
    if start_time is not None and int(st[19]) != start_time:
        return False
    if st[0] != "Z":
        return True
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
        except (OSError, IndexError):
            pass  # gone: maybe the exec'ing thread, just become the leader
    st = proc_stat(pid)  # a true zombie stays one; the leader after an exec does not
    return st is not None and st[0] != "Z" and (start_time is None or int(st[19]) == start_time)


def reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def wait_gone(pid, start_time, timeout):
    """Waits for a recorded process to exit (our child or not); False on timeout."""
    deadline = time.monotonic() + timeout
    while alive(pid, start_time):
        reap(pid)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)  # no event for another process's exit short of pidfd; bounded
    reap(pid)
    return True


def stop_pid(pid, start_time, timeout, what):
    """SIGTERM, then SIGKILL after `timeout`; only if `pid` is still the
    process recorded (same start time). Returns a note for the log, or None."""
    if not pid:
        return None
    if not alive(pid, start_time):
        reap(pid)
        return None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    if wait_gone(pid, start_time, timeout):
        return None
    os.kill(pid, signal.SIGKILL)
    if not wait_gone(pid, start_time, 10):
        raise NfsLabError("%s pid %d did not die on SIGKILL" % (what, pid))
    return "%s pid %d ignored SIGTERM for %ss: killed" % (what, pid, timeout)


def netns_exists(ns):
    return os.path.exists("/run/netns/" + ns)


def mounted_paths():
    with open("/proc/self/mounts") as f:
        return [l.split()[1].replace("\\040", " ") for l in f]


def subnet(k):
    return "198.19.%d" % (NET_FIRST + k)


class GlobalLock:
    """sanlab's lock: allocations of both tools are serialised."""

    def __enter__(self):
        os.makedirs(STATE_ROOT, exist_ok=True)
        self.f = open(LOCK, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *a):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def state_path(name):
    return os.path.join(STATE_DIR, name + ".json")


def save_state(st):
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = state_path(st["name"]) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(st, f, indent=1)
    os.replace(tmp, state_path(st["name"]))


def all_states():
    if not os.path.isdir(STATE_DIR):
        return []
    out = []
    for n in sorted(os.listdir(STATE_DIR)):
        if not n.endswith(".json"):
            continue
        try:
            with open(os.path.join(STATE_DIR, n)) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            out.append({"name": n[:-5], "broken": True})
    return out


# ---- Ganesha configuration -----------------------------------------------------

def conf_str(s):
    """A Ganesha config string literal."""
    if '"' in s or "\n" in s:
        raise NfsLabError("unsupported character in config string %r" % s)
    return '"%s"' % s


def _client_blocks(clients, access):
    if not clients:
        return ""
    return "    CLIENT { Clients = %s; Access_Type = %s; }\n" % (", ".join(clients), access)


def export_block(export_id, path, pseudo, fsal, clients=None, access="RW", protocols="3, 4",
                 squash="No_Root_Squash", extra=""):
    """An EXPORT block. With `clients` (addresses or CIDR ranges), only they
    get `access`; everyone else gets None (refused at MOUNT / LOOKUP)."""
    return ("EXPORT {\n"
            "    Export_Id = %d;\n"
            "    Path = %s;\n"
            "    Pseudo = %s;\n"
            "    Protocols = %s;\n"
            "    Transports = TCP;\n"
            "    SecType = sys;\n"
            "    Squash = %s;\n"
            "    Access_Type = %s;\n"
            "%s%s"
            "    FSAL { %s }\n"
            "}\n") % (export_id, conf_str(path), conf_str(pseudo), protocols, squash,
                      "None" if clients else access, _client_blocks(clients, access), extra, fsal)


def vfs_export(export_id, path, pseudo, **kw):
    """Debian's FSAL_VFS exporting a local directory."""
    return export_block(export_id, path, pseudo, "Name = VFS;", **kw)


def nasgw_export(export_id, volume, pseudo=None, subpath="", **kw):
    """FSAL_NASGW exporting a nasgw volume (Path = /<volume>[/sub/path])."""
    path = "/" + volume + (("/" + subpath.strip("/")) if subpath.strip("/") else "")
    return export_block(export_id, path, pseudo or path, "Name = NASGW;", **kw)


class GaneshaConfig:
    """Renders a ganesha.conf for the lab.

    plugins: {"nasgw": "/path/to/libfsalnasgw.so", ...}: FSALs loaded from
        the lab's private Plugins_Dir (which also links every FSAL Debian ships,
        as Plugins_Dir must hold every FSAL the config names).
    nasgw_socket: writes the top-level NASGW { Socket = ...; } block.
    exports_file: %include'd (created empty if missing), e.g. what nasgwd renders.
    exports: literal EXPORT blocks (see vfs_export / nasgw_export).
    extra: literal text appended (other top-level blocks).
    delegations: NFSV4 Delegations = true (off by default, as ganesha's).
    lease_lifetime: NFSV4 Lease_Lifetime in seconds (ganesha's default: 60).
    graceless: NFSV4 Graceless (default true: tests must not wait out a grace
        period). False for a test of reclaims: ganesha then starts in a grace
        period of grace_period seconds (ganesha's default: 90; with NLM on it
        lasts that long whatever the clients do).
        Only here: a second NFSV4 block in `extra` would reset the first's
        settings to their defaults (ganesha re-initialises a block per copy).
    """

    def __init__(self, exports=(), exports_file=None, nasgw_socket=None, plugins=None,
                 log_level="EVENT", components=None, minor_versions="0, 1, 2", mount_path_pseudo=True,
                 extra="", lease_lifetime=None, delegations=False, graceless=True, grace_period=None):
        self.exports = list(exports)
        self.exports_file = exports_file
        self.nasgw_socket = nasgw_socket
        self.plugins = dict(plugins or {})
        self.log_level = log_level
        self.components = dict(components or {})
        self.minor_versions = minor_versions
        self.mount_path_pseudo = mount_path_pseudo
        self.extra = extra
        self.lease_lifetime = lease_lifetime
        self.delegations = delegations
        self.graceless = graceless
        self.grace_period = grace_period

    def render(self, plugins_dir, recovery_root):
        comps = "".join("        %s = %s;\n" % kv for kv in sorted(self.components.items()))
        out = [
            "# Written by tests/lab/nfslab.py.",
            "NFS_CORE_PARAM {",
            "    Protocols = 3, 4;",
            "    NFS_Port = %d;" % NFS_PORT,
            "    MNT_Port = %d;" % MNT_PORT,
            "    NLM_Port = %d;" % NLM_PORT,
            "    Enable_NLM = true;",
            "    Enable_RQUOTA = false;",
            "    Enable_UDP = false;",
            # One URL for both versions: v3 MOUNT takes the Pseudo path too.
            "    mount_path_pseudo = %s;" % ("true" if self.mount_path_pseudo else "false"),
            "    Plugins_Dir = %s;" % conf_str(plugins_dir),
            "}",
            "NFSV4 {",
            "    Graceless = %s;" % ("true" if self.graceless else "false"),
            "    Grace_Period = %d;" % self.grace_period if self.grace_period else "",
            # nasgw offers no pNFS layouts; Ganesha advertises itself as a pNFS
            # metadata server unless told not to, and clients then send
            # LAYOUTGET only to be refused (nfs-rs then reuses a slot's
            # sequence id: NFS4ERR_RETRY_UNCACHED_REP).
            "    PNFS_MDS = false;",
            "    Only_Numeric_Owners = true;",
            "    Minor_Versions = %s;" % self.minor_versions,
            "    RecoveryBackend = fs;",
            "    RecoveryRoot = %s;" % conf_str(recovery_root),
            "    Lease_Lifetime = %d;" % self.lease_lifetime if self.lease_lifetime else "",
            "    Delegations = true;" if self.delegations else "",
            "}",
            "NFS_KRB5 { Active_krb5 = false; }",
            "LOG {",
            "    Default_Log_Level = %s;" % self.log_level,
            "    Components {\n%s    }" % comps if comps else "",
            "}",
        ]
        if self.nasgw_socket:
            out.append("NASGW { Socket = %s; }" % conf_str(self.nasgw_socket))
        if self.exports_file:
            out.append("%%include %s" % conf_str(self.exports_file))
        out += self.exports
        if self.extra:
            out.append(self.extra)
        return "\n".join(l for l in out if l != "") + "\n"

    def run_paths(self):
        """Paths under /run the server must still reach inside its private /run."""
        out = []
        for p in (self.nasgw_socket, self.exports_file):
            if p:
                d = os.path.dirname(os.path.realpath(p))
                if d == "/run" or d.startswith("/run/"):
                    out.append(d)
        return out


# ---- the server: rpcbind + ganesha.nfsd ------------------------------------------

# Runs as `ip netns exec NS sh -c RPCBIND_SCRIPT sh STAGE DIR...`: ip netns exec
# has already made a new mount namespace (propagation slave: nothing leaks
# out). /run becomes a private tmpfs, the DIRs under /run the server needs are
# bound back through STAGE, then the shell becomes rpcbind (same pid), whose
# mount namespace ganesha later joins.
RPCBIND_SCRIPT = r"""
set -e
stage=$1; shift
i=0
for d in "$@"; do mkdir -p "$d" "$stage/$i"; mount --bind "$d" "$stage/$i"; i=$((i+1)); done
mount -t tmpfs -o mode=0755,size=16m nasgwnfs-run /run
mkdir -p /run/rpcbind /run/lock
chown _rpc /run/rpcbind 2>/dev/null || true
i=0
for d in "$@"; do mkdir -p "$d"; mount --bind "$stage/$i" "$d"; umount "$stage/$i"; i=$((i+1)); done
exec %s -f -w
""" % RPCBIND


def config_errors(log_text):
    """The log lines that say a config block (an export, an FSAL's) was
    refused. DBus and Kerberos complain at CRIT on every start here (no system
    bus, no keytab): those are not config errors."""
    return re.findall(r".*:(?:CONFIG|FSAL|EXPORT) :(?:CRIT|MAJ|FATAL) :.*", log_text)


class Server:
    """rpcbind and ganesha.nfsd in the lab's server namespace. Made by
    Lab.start_server(); stop() or Lab.close() ends both."""

    def __init__(self, lab, config, strict=True):
        self.lab = lab
        self.config = config
        self.strict = strict  # start() raises on config errors in the log
        d = lab.dir
        self.conf_path = os.path.join(d, "ganesha.conf")
        self.log_path = os.path.join(d, "ganesha.log")
        self.pid_path = os.path.join(d, "ganesha.pid")
        self.plugins_dir = os.path.join(d, "plugins")
        self.recovery_root = os.path.join(d, "recov")
        self.stage = os.path.join(d, "stage")
        self.env = {}  # more environment for ganesha.nfsd (e.g. DBUS_SYSTEM_BUS_ADDRESS)
        self.args = []  # more arguments for ganesha.nfsd (e.g. -E EPOCH)

    # pids live in the lab state, so gc finds them
    @property
    def st(self):
        return self.lab.st

    @property
    def pid(self):
        return self.st.get("ganesha_pid")

    @property
    def rpcbind_pid(self):
        return self.st.get("rpcbind_pid")

    def write_config(self, config=None):
        """Writes ganesha.conf (and the plugin links); reload() applies it."""
        if config is not None:
            self.config = config
        os.makedirs(self.plugins_dir, exist_ok=True)
        os.makedirs(self.recovery_root, exist_ok=True)
        links = {}
        if os.path.isdir(DEBIAN_FSAL_DIR):
            for n in os.listdir(DEBIAN_FSAL_DIR):
                if n.startswith("libfsal") and n.endswith(".so"):
                    links[n] = os.path.join(DEBIAN_FSAL_DIR, n)
        for name, path in self.config.plugins.items():
            if not os.path.isfile(path):
                raise NfsLabError("FSAL plugin %s: %s does not exist" % (name, path))
            links["libfsal%s.so" % name.lower()] = os.path.abspath(path)
        for n, target in links.items():
            link = os.path.join(self.plugins_dir, n)
            if os.path.islink(link) or os.path.exists(link):
                os.remove(link)
            os.symlink(target, link)
        if self.config.exports_file and not os.path.exists(self.config.exports_file):
            os.makedirs(os.path.dirname(os.path.abspath(self.config.exports_file)), exist_ok=True)
            open(self.config.exports_file, "a").close()
        text = self.config.render(self.plugins_dir, self.recovery_root)
        tmp = self.conf_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.conf_path)
        return text

    def log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_since(self, offset):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, self.log_size() - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _wait_log(self, offset, ok, bad, timeout, pid, start, what):
        """Polls the log from `offset` until a line matches `ok` (returns it) or
        `bad` (raises), or the process exits or the deadline passes (raises).
        The log is the only event ganesha offers for these."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_since(offset)
            m = re.search(ok, text)
            if m:
                return m.group(0)
            if bad:
                b = re.search(bad, text)
                if b:
                    raise NfsLabError("%s: ganesha logged %r\n--- %s (tail)\n%s" % (
                        what, b.group(0), self.log_path, text[-4000:]))
            if not alive(pid, start):
                raise NfsLabError("%s: ganesha.nfsd exited\n--- %s (tail)\n%s\n--- stderr\n%s" % (
                    what, self.log_path, self.log_tail(), self._stderr_tail()))
            if time.monotonic() > deadline:
                raise NfsLabError("%s: no %r in the log within %ss\n--- %s (tail)\n%s" % (
                    what, ok, timeout, self.log_path, self.log_tail()))
            time.sleep(0.05)

    def _stderr_tail(self):
        try:
            with open(os.path.join(self.lab.dir, "ganesha.stderr"), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def _start_rpcbind(self):
        keep = self.config.run_paths()
        for d in keep:
            os.makedirs(d, exist_ok=True)
        os.makedirs(self.stage, exist_ok=True)
        log = open(os.path.join(self.lab.dir, "rpcbind.log"), "ab")
        cmd = ["ip", "netns", "exec", self.lab.server_ns, "sh", "-c", RPCBIND_SCRIPT, "sh", self.stage] + keep
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.st["rpcbind_pid"] = p.pid
        self.st["rpcbind_start"] = proc_start_time(p.pid)
        self.lab.save()
        # Ready when it listens on 111: the namespace's own TCP table
        # (/proc/<pid>/net/tcp is per network namespace). Polled, bounded.
        deadline = time.monotonic() + 10
        while True:
            if p.poll() is not None:
                raise NfsLabError("rpcbind exited (%s): %s" % (p.returncode, self._file_tail("rpcbind.log")))
            if self._listening(p.pid, 111):
                return
            if time.monotonic() > deadline:
                raise NfsLabError("rpcbind not listening on 111 within 10 s: %s" % self._file_tail("rpcbind.log"))
            time.sleep(0.02)

    def _file_tail(self, name):
        try:
            with open(os.path.join(self.lab.dir, name), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    @staticmethod
    def _listening(pid, port):
        for table in ("tcp", "tcp6"):
            try:
                with open("/proc/%d/net/%s" % (pid, table)) as f:
                    next(f)
                    for line in f:
                        parts = line.split()
                        if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                            return True
            except (OSError, StopIteration):
                pass
        return False

    def start(self):
        """Starts rpcbind (if not running) and ganesha.nfsd; returns when the
        log says NFS SERVER INITIALIZED. Raises with the log tail otherwise
        (and leaves nothing running)."""
        if self.pid and alive(self.pid, self.st.get("ganesha_start")):
            raise NfsLabError("ganesha already runs (pid %d)" % self.pid)
        self.write_config()
        try:
            if not (self.rpcbind_pid and alive(self.rpcbind_pid, self.st.get("rpcbind_start"))):
                self._start_rpcbind()
            self._start_ganesha()
        except Exception:
            try:
                self.stop()
            except NfsLabError:
                pass
            raise
        return self

    def _start_ganesha(self):
        offset = self.log_size()
        err = open(os.path.join(self.lab.dir, "ganesha.stderr"), "ab")
        # nsenter execs (no pid namespace): the Popen pid is ganesha's.
        cmd = ["nsenter", "-t", str(self.rpcbind_pid), "-m", "-n", "--",
               GANESHA, "-F", "-f", self.conf_path, "-L", self.log_path, "-p", self.pid_path] + list(self.args)
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True,
                             cwd=self.lab.dir, env=dict(os.environ, **self.env))
        err.close()
        self.st["ganesha_pid"] = p.pid
        self.st["ganesha_start"] = proc_start_time(p.pid)
        self.lab.save()
        self._wait_log(offset, r"NFS SERVER INITIALIZED", r".*:(FATAL|Fatal) :.*", SERVER_START_TIMEOUT_S,
                       p.pid, self.st["ganesha_start"], "ganesha start")
        errors = config_errors(self.log_since(offset))
        if errors and self.strict:
            raise NfsLabError("ganesha start: config errors (the server runs without them):\n%s" %
                              "\n".join(errors))

    def await_verifier_change(self, offset, timeout=SERVER_START_TIMEOUT_S):
        """After nasgwd opened its domain again (a restart): waits until
        FSAL_NASGW saw nasgwd's new write verifier and, when NFSv3 writes
        answered UNSTABLE were awaiting a COMMIT, until ganesha.nfsd has
        restarted in place (same pid, a new epoch: the v3 verifier) and serves
        again. `offset`: log_size() from before nasgwd restarted. Returns
        True if ganesha restarted."""
        start = self.st.get("ganesha_start")
        line = self._wait_log(offset, r".*FSAL_NASGW: nasgwd's write verifier changed.*",
                              r".*:(FATAL|Fatal) :.*", timeout, self.pid, start, "ganesha sees nasgwd's new verifier")
        if "awaited a COMMIT:" not in line:
            return False
        self._wait_log(offset, r"restarts in place \(epoch[\s\S]*NFS SERVER INITIALIZED", r".*:(FATAL|Fatal) :.*",
                       timeout, self.pid, start, "ganesha restarting in place")
        return True

    def _sigmgr_tid(self):
        """ganesha's signal thread: the one thread waiting in sigtimedwait."""
        for t in sorted(os.listdir("/proc/%d/task" % self.pid)):
            try:
                with open("/proc/%d/task/%s/wchan" % (self.pid, t)) as f:
                    if "sigtimedwait" in f.read():
                        return int(t)
            except OSError:
                pass
        return None

    def reload(self, config=None, timeout=RELOAD_TIMEOUT_S):
        """Rewrites the config if one is given, SIGHUPs ganesha and waits until
        the reload has finished: its signal thread logged the SIGHUP and is
        back in sigtimedwait (the config errors of a reload are logged after
        "Reread exports complete", so that line alone does not say it is
        over). Raises with the errors if the log shows any. Returns the log
        lines of the reload."""
        if config is not None:
            self.write_config(config)
        tid = self._sigmgr_tid()
        offset = self.log_size()
        start = self.st.get("ganesha_start")
        os.kill(self.pid, signal.SIGHUP)
        self._wait_log(offset, r"Received SIGHUP", None, timeout, self.pid, start, "ganesha reload")
        deadline = time.monotonic() + timeout
        while tid is not None:
            try:
                with open("/proc/%d/task/%d/wchan" % (self.pid, tid)) as f:
                    if "sigtimedwait" in f.read():
                        break
            except OSError:
                raise NfsLabError("ganesha reload: ganesha.nfsd exited\n%s" % self.log_tail())
            if time.monotonic() > deadline:
                raise NfsLabError("ganesha reload: not finished within %ss\n%s" % (timeout, self.log_tail()))
            time.sleep(0.02)  # polling the thread's state: ganesha signals nothing else
        if tid is None:  # no wchan here: the completion line is the best there is
            self._wait_log(offset, r"Reread exports complete|Error while parsing new configuration file", None,
                           timeout, self.pid, start, "ganesha reload")
        text = self.log_since(offset)
        errors = config_errors(text) + re.findall(r".*Error while parsing new configuration file.*", text)
        if errors:
            raise NfsLabError("ganesha reload: config errors:\n%s" % "\n".join(errors))
        return text

    def kill(self):
        """ganesha.nfsd dies (SIGKILL); rpcbind stays. start_ganesha() again."""
        pid = self.pid
        if pid and alive(pid, self.st.get("ganesha_start")):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, self.st.get("ganesha_start"), 10)
        self.st["ganesha_pid"] = None
        self.lab.save()

    def start_ganesha(self):
        self.write_config()
        self._start_ganesha()

    @property
    def statd_dir(self):
        return os.path.join(self.lab.dir, "statd")

    def start_statd(self):
        """rpc.statd in ganesha's network and mount namespaces, registered
        with this server's rpcbind (through the private /run), its state in
        statd_dir (sm/: a record per client it monitors): ganesha's NLM
        grants no lock unless the server's statd monitors the client
        (NLM4_DENIED_NOLOCKS otherwise). No reboot notifications at its
        start (--no-notify: sm-notify would use the machine's /var/lib/nfs).
        Stopped by stop() and the lab's teardown (its pid is in the lab's
        state). Returns statd_dir once it is registered (bounded wait)."""
        statd = shutil.which("rpc.statd") or "/sbin/rpc.statd"
        if not os.path.exists(statd):
            raise NfsLabError("rpc.statd not found (package nfs-common, which nfs-ganesha depends on)")
        if not self.rpcbind_pid:
            raise NfsLabError("start the server (its rpcbind) before rpc.statd")
        for sub in ("sm", "sm.bak"):
            os.makedirs(os.path.join(self.statd_dir, sub), exist_ok=True)
        log = open(os.path.join(self.lab.dir, "statd.log"), "ab")
        p = subprocess.Popen(["nsenter", "-t", str(self.rpcbind_pid), "-m", "-n", "--", statd, "-F", "-d",
                              "--no-notify", "-P", self.statd_dir], stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, start_new_session=True)
        log.close()
        self.st["statd_pid"] = p.pid
        self.st["statd_start"] = proc_start_time(p.pid)
        self.lab.save()
        deadline = time.monotonic() + 10
        while True:
            if p.poll() is not None:
                raise NfsLabError("rpc.statd exited (%s): %s" % (p.returncode, self._file_tail("statd.log")))
            r = run(["nsenter", "-t", str(self.rpcbind_pid), "-m", "-n", "--", "rpcinfo", "-p", "127.0.0.1"],
                    check=False)
            if " 100024 " in r.stdout:
                return self.statd_dir
            if time.monotonic() > deadline:
                raise NfsLabError("rpc.statd not registered within 10 s: %s" % self._file_tail("statd.log"))
            time.sleep(0.05)

    def stop(self):
        """SIGTERM ganesha, then rpc.statd (if started) and rpcbind; SIGKILL
        after a bounded wait."""
        notes = []
        n = stop_pid(self.pid, self.st.get("ganesha_start"), GANESHA_STOP_TIMEOUT_S, "ganesha.nfsd")
        notes += [n] if n else []
        self.st["ganesha_pid"] = None
        n = stop_pid(self.st.get("statd_pid"), self.st.get("statd_start"), RPCBIND_STOP_TIMEOUT_S, "rpc.statd")
        notes += [n] if n else []
        self.st["statd_pid"] = None
        n = stop_pid(self.rpcbind_pid, self.st.get("rpcbind_start"), RPCBIND_STOP_TIMEOUT_S, "rpcbind")
        notes += [n] if n else []
        self.st["rpcbind_pid"] = None
        self.lab.save()
        return notes


# ---- clients -----------------------------------------------------------------------

class Client:
    """A client namespace on the lab's LAN."""

    def __init__(self, lab, index):
        self.lab = lab
        self.index = index
        self.ns = lab.st["clients"][index - 1]["ns"]
        self.addr = lab.st["clients"][index - 1]["addr"]

    def argv(self, cmd):
        return ["ip", "netns", "exec", self.ns] + list(cmd)

    def run(self, cmd, check=True, timeout=CMD_TIMEOUT_S, input=None, text=True, env=None):
        """Runs `cmd` in this client's namespace; CompletedProcess (stdout, stderr)."""
        full = self.argv(cmd)
        if env:
            full = self.argv(["env"] + ["%s=%s" % kv for kv in env.items()] + list(cmd))
        return run(full, check=check, timeout=timeout, input=input, text=text)

    def popen(self, cmd, **kw):
        return subprocess.Popen(self.argv(cmd), **kw)

    # ---- libnfs-utils (nfs-ls, nfs-cp, nfs-cat): v3 fully; v4 reads only
    def url(self, path="", version=3, server=None):
        """nfs://<server>/<path>?version=N; path is the export's Pseudo (or
        Path) plus a file path in it."""
        return "nfs://%s/%s?version=%s" % (server or self.lab.server_addr, path.lstrip("/"), version)

    def nfs_ls(self, path="", version=3, check=True):
        """Names in a directory (nfs-ls). With check=False, the CompletedProcess."""
        p = self.run(["nfs-ls", self.url(path, version)], check=check)
        if not check:
            return p
        names = []
        for line in p.stdout.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5] not in (".", ".."):
                names.append(parts[5])
        return names

    def nfs_put(self, local, path, version=3, check=True):
        """Copies a local file to the server (nfs-cp). v4 writes of ~4 KiB and
        more fail in libnfs 4.0: use v3 or nfsrs() for those."""
        return self.run(["nfs-cp", local, self.url(path, version)], check=check)

    def nfs_get(self, path, local, version=3, check=True):
        return self.run(["nfs-cp", self.url(path, version), local], check=check)

    def nfs_cat(self, path, version=3, check=True):
        """A file's bytes (nfs-cat)."""
        p = self.run(["nfs-cat", self.url(path, version)], check=check, text=False)
        return p.stdout if check else p

    # ---- Python (the venv with nfs-rs and libnfs)
    def python(self, code, args=None, check=True, timeout=CMD_TIMEOUT_S):
        """Runs a Python snippet with the lab venv in this namespace. The
        snippet sees ARGS (the `args` dict) and out(obj), which prints obj as
        JSON; returns the list of out() values (or the CompletedProcess when
        check=False)."""
        py = ensure_venv()
        prelude = (NFSRS_UNCACHED_RETRY + "import json, os, sys\n"
                   "if 'NFSLAB_ARGS_FILE' in os.environ:\n"
                   "    with open(os.environ['NFSLAB_ARGS_FILE']) as f:\n"
                   "        ARGS = json.load(f)\n"
                   "else:\n"
                   "    ARGS = json.loads(os.environ['NFSLAB_ARGS'])\n"
                   "def out(x):\n"
                   "    print('NFSLAB-OUT ' + json.dumps(x), flush=True)\n")
        text = json.dumps(args or {})
        # One environment string holds at most 128 KiB (MAX_ARG_STRLEN): a
        # larger ARGS (a long list of acknowledged writes) goes in a file.
        args_file = None
        if len(text) > 64 * 1024:
            fd, args_file = tempfile.mkstemp(prefix="nfslab-args-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                f.write(text)
        env = {"NFSLAB_ARGS_FILE": args_file} if args_file else {"NFSLAB_ARGS": text}
        try:
            p = self.run([py, "-c", prelude + code], env=env, check=check, timeout=timeout)
        finally:
            if args_file:
                os.remove(args_file)
        if not check:
            return p
        return [json.loads(l[len("NFSLAB-OUT "):]) for l in p.stdout.splitlines()
                if l.startswith("NFSLAB-OUT ")]

    def nfsrs(self, code, path="", version="4.1", args=None, check=True, timeout=CMD_TIMEOUT_S):
        """Runs `code` with `client` = nfs_rs.Client connected to
        nfs://<server>/<path>?version=<version> (3, 4.0 or 4.1)."""
        a = dict(args or {})
        a["url"] = self.url(path, version)
        wrapped = ("import nfs_rs\n"
                   "with nfs_rs.Client.connect(ARGS['url']) as client:\n" +
                   "".join("    " + l + "\n" for l in code.splitlines()))
        return self.python(wrapped, a, check=check, timeout=timeout)


# Prepended to every client snippet. nfs-rs (0.8.7) now and then sends an
# NFSv4.1 COMPOUND on a slot with the sequence id of the previous, different,
# request on that slot (ganesha logs "Not a replay request, maybe caused by
# nfs-client's bug" with both requests: e.g. {SEQUENCE, PUTFH, READ} and then
# {SEQUENCE, PUTFH, CLOSE}, both slot 38 seqid 1). Ganesha answers SEQUENCE
# with NFS4ERR_RETRY_UNCACHED_REP and executes nothing of the compound (RFC
# 8881 2.10.6.1.2), but nfs-rs reports an uncertain outcome. So a call whose
# error chain is that reply, and only that, is sent again: the server did
# not do it. (The reuse follows a READ nfs-rs cancelled after sending it,
# e.g. the chunks past EOF of a whole-file read.) A close is not sent again:
# nfs-rs keeps a file's failed close, and the open state the server still
# holds goes when the lease does. Seen in about one run of four.
NFSRS_UNCACHED_RETRY = """
try:
    import nfs_rs._client as _nfsrs_client
except ImportError:
    _nfsrs_client = None
if _nfsrs_client is not None:
    def _nfsrs_uncached(e, depth=0):
        if e is None or depth > 8:
            return False
        if 'retry uncached reply' in str(e):
            return True
        return any(_nfsrs_uncached(x, depth + 1)
                   for x in (e.__cause__, e.__context__) + tuple(getattr(e, 'errors', None) or ()))
    _nfsrs_getattr = _nfsrs_client._AdapterContext.__getattr__
    def _nfsrs_retrying_getattr(self, name):
        a = _nfsrs_getattr(self, name)
        if not callable(a):
            return a
        def call(*args, **kwargs):
            for attempt in range(8):
                try:
                    return a(*args, **kwargs)
                except Exception as e:
                    if attempt == 7 or not _nfsrs_uncached(e):
                        raise
                    if name == 'close':
                        # the native file keeps its failed close; CLOSE's
                        # open state goes with the lease instead
                        return None
        return call
    _nfsrs_client._AdapterContext.__getattr__ = _nfsrs_retrying_getattr
"""


def ensure_venv():
    """The Python venv for NFS and SMB clients from PyPI, outside the
    repository in /var/cache/nasgw/venv; made on first use. Returns its python."""
    py = os.path.join(VENV, "bin", "python")
    stamp = os.path.join(VENV, ".nasgw-packages")
    want = " ".join(VENV_PACKAGES)
    os.makedirs(os.path.dirname(VENV), exist_ok=True)
    with open(VENV + ".lock", "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            with open(stamp) as f:
                if f.read().strip() == want and os.path.exists(py):
                    return py
        except OSError:
            pass
        if not os.path.exists(py):   # also when the interpreter it was made from is gone
            # Debian's python3 (python3-venv): a venv outlives whatever
            # interpreter happens to be first on PATH.
            base = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
            run([base, "-m", "venv", "--clear", VENV], timeout=300)
        p = run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + VENV_PACKAGES,
                check=False, timeout=600)
        if p.returncode != 0:
            raise NfsLabError("pip install %s into %s failed (network? PyPI?):\n%s" % (
                want, VENV, (p.stdout + p.stderr)[-3000:]))
        run([py, "-c", "import nfs_rs, libnfs, smbclient, smbprotocol, pike.test"])
        with open(stamp, "w") as f:
            f.write(want + "\n")
    return py


# ---- the lab -----------------------------------------------------------------------

class Lab:
    """A LAN with a server namespace and `clients` client namespaces.

    server_ns: an existing network namespace to serve from (e.g. a sanlab
        host namespace, where nasgwd reaches the array); it gets a `lan0`
        interface, removed with the lab. Default: the lab makes its own.
    owner_pid: gc tears the lab down once this process is gone (default: us).
    """

    def __init__(self, name=None, clients=2, server_ns=None, owner_pid=None):
        if not 0 <= clients <= CLIENTS_MAX:
            raise NfsLabError("clients must be 0..%d" % CLIENTS_MAX)
        name = name or "nfs%d" % os.getpid()
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,23}", name):
            raise NfsLabError("lab name: lower-case letters, digits and '-', at most 24")
        owner_pid = owner_pid or os.getpid()
        self.server = None
        gc()
        with GlobalLock():
            if os.path.exists(state_path(name)):
                raise NfsLabError("NFS lab %r exists (python3 tests/lab/nfslab.py stop %s)" % (name, name))
            used = {s.get("subnet") for s in all_states()}
            free = [k for k in range(NET_COUNT) if k not in used and not self._taken(server_ns, k)]
            if not free:
                raise NfsLabError("no free NFS lab subnet in 198.19.200.0/21 (8 labs at once)")
            k = free[0]
            net = subnet(k)
            own_server = server_ns is None
            self.st = {
                "name": name, "owner_pid": owner_pid, "owner_start": proc_start_time(owner_pid),
                "subnet": k, "dir": os.path.join(DATA_ROOT, name),
                "ns_switch": NS_PREFIX + name + "-sw",
                "ns_server": server_ns or NS_PREFIX + name + "-srv", "own_server_ns": own_server,
                "server_addr": "%s.%d" % (net, SERVER_HOST),
                "clients": [{"ns": "%s%s-c%d" % (NS_PREFIX, name, i), "addr": "%s.%d" % (net, CLIENT_HOST0 + i)}
                            for i in range(1, clients + 1)],
                "ganesha_pid": None, "rpcbind_pid": None, "loops": [], "mounts": [],
            }
            save_state(self.st)   # from here on, gc can clean up whatever follows
        try:
            os.makedirs(self.st["dir"], exist_ok=True)
            self._setup_net()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _taken(ns, k):
        """True if an existing server namespace already has an address in subnet k."""
        if not ns:
            return False
        p = run(["ip", "-n", ns, "-o", "-4", "addr", "show"], check=False)
        return (" %s." % subnet(k)) in p.stdout

    # ---- properties
    @property
    def name(self):
        return self.st["name"]

    @property
    def dir(self):
        return self.st["dir"]

    @property
    def server_ns(self):
        return self.st["ns_server"]

    @property
    def server_addr(self):
        return self.st["server_addr"]

    @property
    def subnet_cidr(self):
        return "%s.0/24" % subnet(self.st["subnet"])

    def client(self, i):
        """Client i (1-based)."""
        if not 1 <= i <= len(self.st["clients"]):
            raise NfsLabError("no client %d (the lab has %d)" % (i, len(self.st["clients"])))
        return Client(self, i)

    @property
    def clients(self):
        return [Client(self, i) for i in range(1, len(self.st["clients"]) + 1)]

    def save(self):
        save_state(self.st)

    # ---- network
    def _setup_net(self):
        sw = self.st["ns_switch"]
        for ns in [sw] + ([self.server_ns] if self.st["own_server_ns"] else []) + [c["ns"] for c in self.st["clients"]]:
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        if not netns_exists(self.server_ns):
            raise NfsLabError("server namespace %s does not exist" % self.server_ns)
        run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", sw, "link", "set", "br0", "up"])
        ends = [("s0", self.server_ns, self.server_addr)] + \
               [("c%d" % (i + 1), c["ns"], c["addr"]) for i, c in enumerate(self.st["clients"])]
        for port, ns, addr in ends:
            run(["ip", "link", "add", "name", port, "netns", sw, "type", "veth", "peer", "name", "lan0", "netns", ns])
            run(["ip", "-n", sw, "link", "set", port, "master", "br0"])
            run(["ip", "-n", sw, "link", "set", port, "up"])
            run(["ip", "-n", ns, "addr", "add", addr + "/24", "dev", "lan0"])
            run(["ip", "-n", ns, "link", "set", "lan0", "up"])

    def link(self, who, state):
        """Takes a LAN port down or up at the switch ("server" or client index):
        packets vanish, as when a cable is pulled."""
        port = "s0" if who == "server" else "c%d" % int(who)
        run(["ip", "-n", self.st["ns_switch"], "link", "set", port, state])

    def server_run(self, cmd, check=True, timeout=CMD_TIMEOUT_S):
        """Runs `cmd` in the server's network namespace (not its private /run)."""
        return run(["ip", "netns", "exec", self.server_ns] + list(cmd), check=check, timeout=timeout)

    # ---- the server
    def start_server(self, config, strict=True, env=None, args=None):
        """Starts rpcbind + ganesha.nfsd with `config` (a GaneshaConfig) in the
        server namespace; returns the Server once NFS SERVER INITIALIZED.
        strict: raise if the start-up log shows config errors (a refused
        export or FSAL block), which ganesha itself survives. env: more
        environment for ganesha.nfsd; args: more arguments (kept for its
        restarts)."""
        if self.server is None:
            self.server = Server(self, config, strict)
        else:
            self.server.config, self.server.strict = config, strict
        self.server.env = dict(env or {})
        self.server.args = list(args or [])
        return self.server.start()

    # ---- scratch file systems
    def make_xfs(self, size="4G", name="xfs", direct_io=True):
        """XFS on a loop device whose backing file is sparse in the lab's
        directory (same disk as the sanlab LUN files); returns the mount point.
        direct_io: the loop device bypasses the page cache of the backing file
        (so data is cached once, by XFS, as on a real disk)."""
        img = os.path.join(self.dir, name + ".img")
        mnt = os.path.join(self.dir, name)
        with open(img, "wb") as f:
            f.truncate(parse_size(size))
        dev = run(["losetup", "--find", "--show"] + (["--direct-io=on"] if direct_io else []) + [img]).stdout.strip()
        self.st["loops"].append(dev)
        self.save()
        run(["mkfs.xfs", "-q", "-f", dev])
        os.makedirs(mnt, exist_ok=True)
        self.st["mounts"].append(mnt)
        self.save()
        run(["mount", dev, mnt])
        return mnt

    # ---- teardown
    def close(self):
        """Stops the server, unmounts, detaches loops, deletes the namespaces
        and files. Safe to call twice; raises the first error at the end."""
        errors = teardown(self.st)
        self.server = None
        if errors:
            raise NfsLabError("; ".join(errors))

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = str(s).strip().lower()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def stop_smbd_helpers(conf_path):
    """samba-dcerpcd and its rpcd_* workers, which smbd starts on demand in
    sessions of their own, outlive it: stops those started with this lab's
    smb.conf (their command line names it), each by its pid."""
    want = ("--configfile=" + conf_path).encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if want in args:
            pid = int(d)
            stop_pid(pid, proc_start_time(pid), SMBD_STOP_TIMEOUT_S, "samba-dcerpcd")


def teardown(st):
    """Everything a lab made, in reverse: processes, mounts, loops, namespaces,
    files, state. Keeps going past errors; returns them."""
    errors = []
    for key, what, t in (("ganesha", "ganesha.nfsd", GANESHA_STOP_TIMEOUT_S),
                         ("statd", "rpc.statd", RPCBIND_STOP_TIMEOUT_S),
                         ("rpcbind", "rpcbind", RPCBIND_STOP_TIMEOUT_S),
                         ("smbd", "smbd", SMBD_STOP_TIMEOUT_S)):
        try:
            stop_pid(st.get(key + "_pid"), st.get(key + "_start"), t, what)
            st[key + "_pid"] = None
        except NfsLabError as e:
            errors.append(str(e))
    if st.get("dir"):
        try:
            stop_smbd_helpers(os.path.join(st["dir"], "smb", "smb.conf"))
        except NfsLabError as e:
            errors.append(str(e))
    # Users and groups smblab made for the lab.
    for u in reversed(st.get("users", [])):
        run(["userdel", u], check=False)
    for g in reversed(st.get("groups", [])):
        run(["groupdel", g], check=False)
    mounts = set(mounted_paths())
    for m in reversed(st.get("mounts", [])):
        if m in mounts:
            if run(["umount", m], check=False).returncode != 0:
                run(["umount", "-l", m], check=False)
    for dev in reversed(st.get("loops", [])):
        run(["losetup", "-d", dev], check=False)
    nss = [st.get("ns_switch")] + [c["ns"] for c in st.get("clients", [])]
    if st.get("own_server_ns"):
        nss.append(st.get("ns_server"))
    elif st.get("ns_server") and netns_exists(st["ns_server"]):
        # A borrowed namespace keeps living: remove our interface from it (the
        # switch's deletion would also take the veth pair away).
        run(["ip", "-n", st["ns_server"], "link", "del", "lan0"], check=False)
    for ns in nss:
        if ns and netns_exists(ns):
            p = run(["ip", "netns", "del", ns], check=False)
            if p.returncode != 0:
                errors.append("ip netns del %s: %s" % (ns, p.stderr.strip()))
    d = st.get("dir")
    if d and os.path.isdir(d):
        still = [m for m in mounted_paths() if m == d or m.startswith(d + "/")]
        if still:
            errors.append("%s still has mounts %s; left in place" % (d, still))
        else:
            shutil.rmtree(d, ignore_errors=True)
    if st.get("name"):
        try:
            os.remove(state_path(st["name"]))
        except FileNotFoundError:
            pass
    return errors


def gc():
    """Tears down the labs whose owner is gone, namespaces named nasgwnfs-*
    that no lab knows, and lab directories without a lab. Returns what went."""
    removed = []
    with GlobalLock():
        for st in all_states():
            if st.get("broken"):
                try:
                    os.remove(state_path(st["name"]))
                except OSError:
                    pass
                continue
            if alive(st.get("owner_pid"), st.get("owner_start")):
                continue
            errs = teardown(st)
            removed.append("nfslab %s%s" % (st["name"], (" (" + "; ".join(errs) + ")") if errs else ""))
        known, dirs = set(), set()
        for st in all_states():
            known.update([st.get("ns_switch"), st.get("ns_server")] + [c["ns"] for c in st.get("clients", [])])
            dirs.add(st.get("dir"))
        if os.path.isdir("/run/netns"):
            for ns in sorted(os.listdir("/run/netns")):
                if ns.startswith(NS_PREFIX) and ns not in known:
                    run(["ip", "netns", "del", ns], check=False)
                    removed.append(ns)
        if os.path.isdir(DATA_ROOT):
            mounts = mounted_paths()
            for n in sorted(os.listdir(DATA_ROOT)):
                d = os.path.join(DATA_ROOT, n)
                if d in dirs:
                    continue
                for m in sorted((m for m in mounts if m.startswith(d + "/")), reverse=True):
                    run(["umount", "-l", m], check=False)
                # Loop devices still backed by files in there.
                p = run(["losetup", "-n", "-O", "NAME,BACK-FILE", "-l"], check=False)
                for line in p.stdout.splitlines():
                    parts = line.split(None, 1)
                    if len(parts) == 2 and parts[1].strip().startswith(d + "/"):
                        run(["losetup", "-d", parts[0]], check=False)
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    return removed


def main(argv):
    if os.geteuid() != 0:
        print("nfslab: must run as root (namespaces, mounts)", file=sys.stderr)
        return 2
    if argv[:1] == ["gc"]:
        print(json.dumps({"removed": gc()}, indent=1))
    elif argv[:1] == ["list"]:
        print(json.dumps(all_states(), indent=1))
    elif argv[:1] == ["stop"] and len(argv) == 2:
        try:
            with open(state_path(argv[1])) as f:
                st = json.load(f)
        except FileNotFoundError:
            print("nfslab: no NFS lab named %r" % argv[1], file=sys.stderr)
            return 1
        errs = teardown(st)
        if errs:
            print("nfslab: %s" % "; ".join(errs), file=sys.stderr)
            return 1
        print(json.dumps({"stopped": argv[1]}))
    else:
        print("usage: nfslab.py gc | list | stop NAME", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
