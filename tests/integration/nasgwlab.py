"""A controller node on a lab SAN, for the integration suites: a tgtd lab
(tests/lab/sanlab), nasgwd with a config written for it, the `nasgw` CLI
against its admin socket, and optionally a FUSE mount of a volume through
nasgw-fuse -> fsal/client -> nasgwd.

Everything a Node starts is stopped by close(), also after a failure; the
lab is owned by this process, so `sanlab gc` cleans up after a crash of the
harness itself.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SANLAB = os.path.join(HERE, "..", "lab", "sanlab")
START_TIMEOUT_S = 60
MOUNT_TIMEOUT_S = 30


def sh(cmd, check=True, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def is_mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


UNMOUNT_BUSY_S = 20  # how long an unmount is tried again while the mount is busy


def holders(path):
    """The processes with a file, a mapping, a cwd or a root under `path`, as
    "pid (comm): what" (for an error message)."""
    found = []
    prefix = path.rstrip("/") + "/"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = ["cwd", "root", "exe"] + ["fd/" + fd for fd in os.listdir("/proc/%s/fd" % pid)]
            with open("/proc/%s/comm" % pid) as f:
                comm = f.read().strip()
            for link in links:
                try:
                    target = os.readlink("/proc/%s/%s" % (pid, link))
                except OSError:
                    continue
                if target == path or target.startswith(prefix):
                    found.append("%s (%s): %s %s" % (pid, comm, link, target))
            with open("/proc/%s/maps" % pid) as f:
                found += ["%s (%s): maps %s" % (pid, comm, line.split()[-1]) for line in f
                          if line.split()[-1].startswith(prefix)][:1]
        except OSError:
            continue
    return "; ".join(found[:10])


def wait_exit(pid, timeout):
    """Waits for a process (our child or not) to exit; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r, _ = os.waitpid(pid, os.WNOHANG)
            if r == pid:
                return True
        except ChildProcessError:
            if not os.path.exists("/proc/%d" % pid):
                return True
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        time.sleep(0.05)  # no event to wait on for a process that is not our child
    return False


class Checks:
    """One line per check ("ok: ..." / "FAILED: ... -- detail"); the suites
    end with "N passed, N failed"."""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, what, ok, detail=""):
        print("%s: %s%s" % ("ok" if ok else "FAILED", what, "" if ok else " -- " + str(detail)[-1500:]), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok


def merge_toml(base, extra):
    """base with extra's lines added: those under a [section] base already
    has go into it (TOML allows a table once), the rest at the end."""
    out, rest, section = base.rstrip("\n").split("\n"), [], None
    for line in extra.split("\n"):
        m = re.match(r"^\s*\[([A-Za-z0-9_.]+)\]\s*$", line)
        if m:
            section = m.group(1)
            if "[%s]" % section in out:
                continue
            section = None
        if section is not None:
            at = out.index("[%s]" % section) + 1
            while at < len(out) and not out[at].startswith("["):
                at += 1
            out.insert(at, line)
        else:
            rest.append(line)
    return "\n".join(out + rest).rstrip("\n") + "\n"


def toml_str(s):
    return json.dumps(s)  # a JSON string is a valid TOML basic string


class Node:
    """State is a dict so that a helper process (fsx's remount command) can
    pick it up from a file."""

    def __init__(self, bins=None, luns=3, size="512M", tag="node", state=None, metrics=False, urls=None,
                 netns=None):
        """urls: LUNs of a lab someone else owns (not stopped by close()).
        netns: the network namespace nasgwd runs in (a sanlab netns lab's
        host namespace, the controller node); its sockets are files, so heads
        and the CLI reach it from anywhere."""
        self.state_file = state
        if state and os.path.exists(state):
            with open(state) as f:
                self.s = json.load(f)
            return
        base = "/tmp/nasgw-%s-%d" % (tag, os.getpid())
        self.s = {"bins": {k: os.path.abspath(v) for k, v in (bins or {}).items() if v},
                  "dir": base, "mount": base + ".mnt", "fuse_pid": None, "daemon_pid": None,
                  "generation": 0, "tag": tag, "metrics": metrics, "netns": netns}
        os.makedirs(base, exist_ok=True)
        self.state_file = base + ".json"
        if urls:
            self.s["lab"] = None
            self.s["urls"] = list(urls)
            self.save()
            return
        lab = json.loads(sh([SANLAB, "start", "%s%d" % (tag, os.getpid()), "--luns", str(luns), "--size", size,
                             "--owner-pid", str(os.getpid())]).stdout)
        self.s["lab"] = lab["name"]
        self.s["urls"] = [l["url"] for l in lab["luns"]]
        self.save()

    # ---- paths
    @property
    def run_dir(self):
        return os.path.join(self.s["dir"], "run")

    @property
    def head_socket(self):
        return os.path.join(self.run_dir, "head.sock")

    @property
    def admin_socket(self):
        return os.path.join(self.run_dir, "admin.sock")

    @property
    def config_path(self):
        return os.path.join(self.s["dir"], "nasgwd.toml")

    @property
    def log_path(self):
        return os.path.join(self.s["dir"], "nasgwd.log")

    @property
    def mount_path(self):
        return self.s["mount"]

    def save(self):
        with open(self.state_file, "w") as f:
            json.dump(self.s, f)

    # ---- nasgwd
    def write_config(self, extra=""):
        # Each start logs in with a new initiator name: the reserve is opened
        # from the SAN alone, as another controller would after a failover.
        self.s["generation"] += 1
        urls = list(self.s["urls"])
        random.shuffle(urls)
        text = "\n".join([
            "[node]",
            "name = %s" % toml_str("lab-%s" % self.s["tag"]),
            "run_dir = %s" % toml_str(self.run_dir),
            "state_dir = %s" % toml_str(os.path.join(self.s["dir"], "state")),
            "[reserve]",
            "luns = [%s]" % ", ".join(toml_str(u) for u in urls),
            "initiator = %s" % toml_str("iqn.2026-11.org.nasgw:%s-%d-%d" % (self.s["tag"], os.getpid(),
                                                                           self.s["generation"])),
            # Short leases, so that a check after a crash (nasgw-fsck watches a
            # silent holder for two renewals) and a takeover stay quick.
            "renew_interval_ms = %d" % self.s.get("renew_ms", 250),
            "lease_ms = %d" % self.s.get("lease_ms", 1500),
            "[head]",
            "workers = 8",
            "[shutdown]",
            "drain_ms = 5000",
        ]) + "\n"
        if self.s.get("metrics"):
            text += "[metrics]\nlisten = \"127.0.0.1:%d\"\n" % self.metrics_port()
        text = merge_toml(text, extra)
        with open(self.config_path, "w") as f:
            f.write(text)

    def metrics_port(self):
        if "metrics_port" not in self.s:
            import socket
            with socket.socket() as so:
                so.bind(("127.0.0.1", 0))
                self.s["metrics_port"] = so.getsockname()[1]
        return self.s["metrics_port"]

    def metric(self, name, **labels):
        """The sum of a Prometheus metric's samples (of nasgwd's endpoint:
        metrics=True) whose labels include these; 0 when there are none."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port(), timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if ((line.startswith(name + "{") or line.startswith(name + " "))
                    and all('%s="%s"' % kv in line for kv in labels.items())):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def start(self, extra_config=None):
        """extra_config: TOML appended to the config; None: what the last
        start used (so a restart keeps e.g. an [nfs] section)."""
        if extra_config is None:
            extra_config = self.s.get("extra_config", "")
        self.s["extra_config"] = extra_config
        self.write_config(extra_config)
        log = open(self.log_path, "a")
        # nsenter joins only the network namespace: `ip netns exec` would also
        # give nasgwd a mount namespace holding a copy of every FUSE mount
        # there is, and a copy keeps its nasgw-fuse alive after the unmount.
        # (nsenter execs nasgwd: the pid is nasgwd's)
        prefix = (["nsenter", "--net=/run/netns/" + self.s["netns"]] if self.s.get("netns") else [])
        p = subprocess.Popen(prefix + [self.s["bins"]["nasgwd"], "--config", self.config_path], stdout=log,
                             stderr=log, start_new_session=True)
        self.s["daemon_pid"] = p.pid
        self.save()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            # Ready when the admin API answers (polling: there is no event
            # for "another process is ready" short of its log).
            if self.cli("node", "status", check=False).returncode == 0 and os.path.exists(self.head_socket):
                return
            if p.poll() is not None:
                raise RuntimeError("nasgwd exited (%s): %s" % (p.returncode, self.log_tail()))
            if time.monotonic() > deadline:
                p.kill()
                raise RuntimeError("nasgwd not ready within %ds: %s" % (START_TIMEOUT_S, self.log_tail()))
            time.sleep(0.1)

    def log_tail(self, n=3000):
        try:
            with open(self.log_path) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=60):
        pid = self.s["daemon_pid"]
        if not pid:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        if not wait_exit(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            wait_exit(pid, 10)
            raise RuntimeError("nasgwd did not stop within %ds on %s" % (timeout, sig))
        self.s["daemon_pid"] = None
        self.save()

    def cli(self, *args, check=True, json_out=False):
        cmd = [self.s["bins"]["cli"], "--socket", self.admin_socket]
        if json_out:
            cmd.append("--json")
        p = sh(cmd + list(args), check=check)
        if json_out and p.returncode == 0:
            return json.loads(p.stdout)
        return p

    def format(self, ag="16M", volume="vol1", record="64K", domains=1):
        """domains > 1: the reserve split into that many, `volume` in the
        last one (not domain 0), and a volume d<i> in each other domain i."""
        self.cli("reserve", "format", "--name", "lab", "--ag-size", ag,
                 *(["--domains", str(domains)] if domains > 1 else []))
        if volume:
            self.cli("volume", "create", volume, "--record-size", record,
                     *(["--domain", str(domains - 1)] if domains > 1 else []))
        for i in range(domains - 1):
            self.cli("volume", "create", "d%d" % i, "--domain", str(i))

    # ---- FUSE
    def mount(self, volume="vol1", options=None):
        """options: more nasgw-fuse arguments (e.g. --allow-other); None: what
        the last mount used (so a remount keeps them)."""
        if options is None:
            options = self.s.get("mount_options", [])
        self.s["mount_options"] = list(options)
        os.makedirs(self.mount_path, exist_ok=True)
        log = open(self.mount_path + ".log", "a")
        p = subprocess.Popen([self.s["bins"]["fuse"], "--socket", self.head_socket, "--volume", volume] +
                             list(options) + ["-f", self.mount_path], stdout=log, stderr=log,
                             start_new_session=True)
        self.s["fuse_pid"] = p.pid
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not is_mounted(self.mount_path):
            if p.poll() is not None:
                raise RuntimeError("nasgw-fuse exited (%s); see %s.log" % (p.returncode, self.mount_path))
            if time.monotonic() > deadline:
                p.kill()
                raise RuntimeError("nasgw-fuse did not mount within %ds" % MOUNT_TIMEOUT_S)
            time.sleep(0.05)  # polling /proc/mounts: the mount has no event to wait on
        self.save()

    def unmount(self):
        said = ""
        if is_mounted(self.mount_path):
            # EBUSY can be brief: a file closed just before (by us or by a
            # child we killed) may still hold the mount while the kernel
            # finishes its release. The mount's references have no event
            # to wait on, so busy is tried again for a bounded time; past
            # it, the error names who holds the mount.
            deadline = time.monotonic() + UNMOUNT_BUSY_S
            while True:
                p = sh(["fusermount3", "-u", self.mount_path], check=False)
                busy = p.returncode != 0 and "busy" in (p.stdout + p.stderr)
                if not busy or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if p.returncode != 0:
                said = " (fusermount3 -u exited %d: %s; holders: %s)" % (
                    p.returncode, (p.stdout + p.stderr).strip()[-300:], holders(self.mount_path) or "none seen")
        if self.s["fuse_pid"]:
            if not wait_exit(self.s["fuse_pid"], 60):
                raise RuntimeError("nasgw-fuse pid %d did not exit within 60 s of its unmount%s; still mounted: %s" % (
                    self.s["fuse_pid"], said, is_mounted(self.mount_path)))
            self.s["fuse_pid"] = None
            self.save()

    # ---- whole node
    def kill(self):
        """The controller dies: nasgwd and the head are SIGKILLed."""
        for key in ("daemon_pid", "fuse_pid"):
            pid = self.s[key]
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                wait_exit(pid, 30)
                self.s[key] = None
        sh(["fusermount3", "-u", "-z", self.mount_path], check=False)
        self.save()

    def fsck(self, check=True):
        """Checks the reserve while nasgwd is stopped (read-only); raises
        with findings, or with check=False returns the CompletedProcess."""
        fsck = self.s["bins"].get("fsck")
        if not fsck:
            return None
        cmd = [fsck, "--initiator", "iqn.2026-11.org.nasgw:fsck-%d" % os.getpid()]
        for u in self.s["urls"]:
            cmd += ["--lun", u]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        if check and p.returncode != 0:
            raise RuntimeError("nasgw-fsck exit %d:\n%s%s" % (p.returncode, p.stdout[-3000:], p.stderr[-2000:]))
        return p

    def remount(self):
        """Clean stop of head and daemon, fsck, start again (new initiator)."""
        self.unmount()
        self.stop()
        self.fsck()
        self.start()
        self.mount()

    def close(self):
        try:
            self.unmount()
        except Exception:
            pass
        try:
            self.stop(timeout=30)
        except Exception:
            pass
        self.kill()
        if self.s["lab"]:
            sh([SANLAB, "stop", self.s["lab"]], check=False)
        if os.path.isdir(self.mount_path) and not is_mounted(self.mount_path):
            shutil.rmtree(self.mount_path, ignore_errors=True)
        for p in (self.mount_path + ".log",):
            if os.path.exists(p):
                os.remove(p)
        if os.environ.get("NASGW_KEEP_LOGS") is None:
            shutil.rmtree(self.s["dir"], ignore_errors=True)
        if self.state_file and os.path.exists(self.state_file):
            os.remove(self.state_file)


def nfs_lab_args(more=None):
    """The NFS labs' command line: --build BUILD_DIR (the FSAL and the CLI),
    and what `more(parser)` adds. Returns (args, the build dir, the FSAL);
    None when the FSAL (or a file named by an argument ending in "nasgwd")
    is not built, after saying so."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="the build with the FSAL and the CLI")
    if more:
        more(ap)
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    fsal = b + "/fsal/ganesha/libfsalnasgw.so"
    for need in [fsal] + [v for k, v in vars(a).items() if k.endswith("nasgwd") and v]:
        if not os.path.exists(need):
            print("FAIL: %s is not built (make release builds a Release nasgwd)" % need, flush=True)
            return None
    return a, b, fsal


def run_parts(parts, only, ctx, failures):
    """Runs a suite's parts ((name, fn(ctx)) in order; only those named in
    `only` when it is not empty), each after a "== name" line; an exception
    is printed and counted as the part's failure, and the next part runs."""
    for name, fn in parts:
        if only and name not in only:
            continue
        print("== %s" % name, flush=True)
        try:
            fn(ctx)
        except Exception:
            traceback.print_exc()
            failures.append(name + ": exception")


def finish(failures, node=None, lab=None, server=None, after=None):
    """The end of a suite with a node and an NFS lab, also after an
    exception: on failure ganesha's and nasgwd's log tails, then the NFS lab,
    the node and `after` (e.g. a lab SAN the node used) stopped, and the
    summary line. Returns the exit code."""
    if failures and server is not None:
        print("--- ganesha log tail\n" + server.log_tail(3000))
    if failures and node is not None:
        print("--- nasgwd log tail\n" + node.log_tail(3000))
    if lab is not None:
        lab.close()
    if node is not None:
        node.close()
    if after is not None:
        after()
    print(summary(failures))
    return 1 if failures else 0


def summary(failures):
    """The last line of a suite: "all passed", or the count and every failed
    check's name, so that a log cut in the middle still names them."""
    if not failures:
        return "all passed"
    return "%d failure(s):\n" % len(failures) + "\n".join("  " + str(f)[:300] for f in failures)


def matplotlib_or_redraw(script, res, path):
    """matplotlib, set up to draw into files; or None after `script` drew
    `path` from `res` with Debian's interpreter (`script --chart-from JSON
    --chart PATH`): python3-matplotlib is Debian's, and the interpreter
    running this one (e.g. a pyenv python3 first on PATH) may lack it."""
    try:
        import matplotlib
    except ImportError:
        if os.path.realpath(sys.executable) == os.path.realpath("/usr/bin/python3"):
            raise
        tmp = path + ".json"
        with open(tmp, "w") as f:
            json.dump(res, f)
        try:
            subprocess.run(["/usr/bin/python3", os.path.abspath(script), "--chart-from", tmp, "--chart", path],
                           check=True, timeout=300)
        finally:
            os.remove(tmp)
        return None
    matplotlib.use("Agg")
    return matplotlib


def statx_sync(fd):
    """statx(2) of open `fd` with AT_STATX_FORCE_SYNC: the file system is
    asked, past any cache (a FUSE mount's attributes, when another head
    changed the file). {mode, nlink, size, blocks, atime (seconds)}, or
    with "error" (an errno) when it fails."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    at_empty_path, force_sync, basic_stats = 0x1000, 0x2000, 0x7ff
    if libc.statx(fd, b"", at_empty_path | force_sync, basic_stats, buf) != 0:
        return {"error": ctypes.get_errno(), "mode": 0, "nlink": 0, "size": 0, "blocks": 0, "atime": 0}
    raw = buf.raw
    return {"nlink": int.from_bytes(raw[16:20], "little"), "mode": int.from_bytes(raw[28:30], "little"),
            "size": int.from_bytes(raw[40:48], "little"), "blocks": int.from_bytes(raw[48:56], "little"),
            "atime": int.from_bytes(raw[64:72], "little", signed=True)}
