#!/usr/bin/env python3
"""nasgwd on a lab SAN, driven as an administrator would: start and stop,
bad configurations, the `nasgw` CLI end to end, the metrics endpoint, and
garbage on the head socket while a client works.

  daemon_lab.py config  --nasgwd BIN --cli BIN
  daemon_lab.py admin   --nasgwd BIN --cli BIN --fuse BIN
  daemon_lab.py exports --nasgwd BIN --cli BIN --fuse BIN

Each command starts its own lab and tears it down even when it fails.
Prints one line per check and "N passed, N failed".
"""
import argparse
import json
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nasgwlab import Checks, Node, is_mounted, sh  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def head_version():
    """The head protocol's version, from proto/head.h (kVersion)."""
    with open(os.path.join(ROOT, "proto", "head.h")) as f:
        return int(re.search(r"constexpr uint16_t kVersion = (\d+);", f.read()).group(1))


# A process that opens head connections (each says HELLO) until nasgwd
# refuses one, tries 50 more (refused too), prints {"accepted": n,
# "refused": n, "status": errno, "message": ...} and holds its connections
# until its stdin closes.
FLOOD = r"""
import json, os, socket, struct, sys
path, version, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def hello():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(path)
    name = b"flood"
    payload = struct.pack("<IIH", os.getuid(), os.getgid(), 0) + os.urandom(16) + struct.pack("<H", len(name)) + name
    s.sendall(struct.pack("<IHHQII", 0x3150484E, version, 1, 0, len(payload), 0) + payload)
    head = b""
    while len(head) < 24:
        b = s.recv(24 - len(head))
        if not b:
            raise RuntimeError("closed before the HELLO reply")
        head += b
    length, status = struct.unpack("<II", head[16:24])
    body = b""
    while len(body) < length:
        b = s.recv(length - len(body))
        if not b:
            break
        body += b
    message = body[2:2 + struct.unpack("<H", body[:2])[0]].decode(errors="replace") if status and len(body) >= 2 else ""
    return s, status, message

held = []
out = {"accepted": 0, "refused": 0, "status": 0, "message": ""}
for _ in range(limit):
    s, status, message = hello()
    if status:
        out.update(status=status, message=message)
        s.close()
        break
    held.append(s)
    out["accepted"] += 1
for _ in range(50 if out["status"] else 0):
    s, status, message = hello()
    s.close()
    out["refused"] += 1 if status == out["status"] else 0
out["refused"] += 1 if out["status"] else 0
print(json.dumps(out), flush=True)
sys.stdin.read()
"""


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def run_nasgwd(nasgwd, config_text, path, timeout=60):
    with open(path, "w") as f:
        f.write(config_text)
    p = subprocess.run([nasgwd, "--config", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def cmd_config(a):
    """Bad configurations are refused at start with a message naming the
    field and, for numbers, the range; an unreachable LUN names the LUN."""
    c = Checks()
    node = Node({"nasgwd": a.nasgwd, "cli": a.cli}, luns=1, size="64M", tag="cfg")
    try:
        node.write_config()
        with open(node.config_path) as f:
            good = f.read()
        path = os.path.join(node.s["dir"], "bad.toml")
        rc, out = run_nasgwd(a.nasgwd, good.replace('name = "lab-cfg"\n', ""), path)
        c("missing node.name refused (exit 2, names the field)", rc == 2 and "node.name" in out, (rc, out))
        rc, out = run_nasgwd(a.nasgwd, good.replace("workers = 8", "workers = 0"), path)
        c("head.workers = 0 refused with its range", rc == 2 and "head.workers" in out and "1..256" in out, (rc, out))
        rc, out = run_nasgwd(a.nasgwd, good.replace("[head]", "[head]\nworkerz = 3"), path)
        c("unknown key refused", rc == 2 and "workerz" in out, (rc, out))
        rc, out = run_nasgwd(a.nasgwd, good.replace("drain_ms = 5000", 'drain_ms = "soon"'), path)
        c("wrong type refused", rc == 2 and "shutdown.drain_ms" in out, (rc, out))
        # Nothing listens on port 9 of this host: the LUN is unreachable.
        bad_url = "iscsi://127.0.0.1:9/iqn.2026-11.org.nasgw.lab:none/1"
        text = re.sub(r"(?m)^luns = \[.*\]$", 'luns = ["%s"]' % bad_url, good)
        rc, out = run_nasgwd(a.nasgwd, text, path)
        c("unreachable LUN refused (exit 1, names the LUN)", rc == 1 and "127.0.0.1:9" in out, (rc, out))
        p = subprocess.run([a.nasgwd, "--config", node.config_path, "--check-config"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        c("--check-config accepts the good file", p.returncode == 0, p.stdout)
        p = subprocess.run([a.nasgwd, "--config", "/nonexistent/nasgwd.toml"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        c("a missing config file is named", p.returncode == 2 and "/nonexistent/nasgwd.toml" in p.stdout, p.stdout)
        # Start and a clean stop.
        node.start()
        p = subprocess.run([a.nasgwd, "--config", node.config_path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        c("a second nasgwd on the same run_dir is refused", p.returncode == 1 and "another nasgwd" in p.stdout,
          p.stdout)
        c("...and the first still serves", node.cli("node", "status", check=False).returncode == 0 and
          os.path.exists(node.head_socket))
        t0 = time.monotonic()
        node.stop(signal.SIGTERM)
        c("SIGTERM stops nasgwd cleanly", "stopped" in node.log_tail(), node.log_tail())
        c("...within the drain time", time.monotonic() - t0 < 10, time.monotonic() - t0)
        c("sockets removed on stop", not os.path.exists(node.head_socket) and not os.path.exists(node.admin_socket))
    finally:
        node.close()
    return c


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.status, r.read().decode()


def cmd_admin(a):
    c = Checks()
    node = Node({"nasgwd": a.nasgwd, "cli": a.cli, "fuse": a.fuse}, luns=2, size="256M", tag="adm", metrics=True)
    try:
        node.start()
        st = node.cli("reserve", "status", json_out=True)
        c("a blank reserve reads unformatted", "unformatted" in str(st).lower(), st)
        p = node.cli("volume", "list", check=False)
        c("volume commands refused before format (nonzero exit, says why)", p.returncode != 0 and p.stderr.strip(),
          (p.returncode, p.stderr))
        node.cli("reserve", "format", "--name", "lab", "--ag-size", "16M")
        st = node.cli("reserve", "status", json_out=True)
        c("format brings the reserve online", "online" in str(st).lower(), st)
        p = node.cli("reserve", "format", "--name", "again", check=False)
        c("formatting an online reserve without --force is refused (exit 6)", p.returncode == 6, (p.returncode,
                                                                                                  p.stderr))
        node.cli("volume", "create", "alpha", "--record-size", "64K")
        node.cli("volume", "create", "beta")
        p = node.cli("volume", "create", "alpha", check=False)
        c("a duplicate volume is refused (exit 5)", p.returncode == 5, (p.returncode, p.stderr))
        # Names must be text; sizes in range; 0 is not "the default".
        for bad, says in [(b"es\x1bc", b"control character"), (b"bad\xff", b"invalid UTF-8")]:
            p = subprocess.run([a.cli.encode(), b"--socket", node.admin_socket.encode(), b"volume", b"create", bad],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            c("volume name %r refused by the CLI (exit 2, says why, escaped)" % bad,
              p.returncode == 2 and says in p.stderr and b"\x1b" not in p.stderr, (p.returncode, p.stderr))
        p = node.cli("volume", "create", "zero", "--record-size", "0", check=False)
        c("--record-size 0 refused (exit 2)", p.returncode == 2 and "power of two" in p.stderr,
          (p.returncode, p.stderr))
        vols = node.cli("volume", "list", json_out=True)
        names = sorted(v["name"] for v in (vols.get("volumes", vols) if isinstance(vols, dict) else vols))
        c("volume list --json lists both", names == ["alpha", "beta"], vols)
        p = node.cli("volume", "list")
        c("volume list prints a table", "alpha" in p.stdout and "beta" in p.stdout and "\n" in p.stdout, p.stdout)

        # Data into alpha through the head path, so it is not empty.
        node.mount("alpha")
        data1 = os.urandom(1 << 20)
        with open(os.path.join(node.mount_path, "data"), "wb") as f:
            f.write(data1)
        show = node.cli("volume", "show", "alpha", json_out=True)
        c("volume show counts the file", "1" in str(show), show)

        # Snapshots through the CLI, the FUSE data (unstable writes, answered
        # from the write-back cache) just written: the create flushes it first.
        snap = node.cli("snapshot", "create", "alpha", "s1", json_out=True)
        c("snapshot create --json gives the snapshot", snap.get("snapshot", {}).get("name") == "s1" and
          snap["snapshot"].get("volume") == "alpha" and snap["snapshot"].get("id", 0) > 0, snap)
        c("the create logged as an admin change",
          any("create snapshot" in l and "volume=alpha" in l and "name=s1" in l
              for l in node.log_tail(200000).splitlines()), node.log_tail(2000))
        node.cli("snapshot", "create", "alpha", "s2")
        p = node.cli("snapshot", "create", "alpha", "s1", check=False)
        c("a duplicate snapshot name is refused (exit 5)", p.returncode == 5, (p.returncode, p.stderr))
        p = node.cli("snapshot", "create", "nosuch", "s1", check=False)
        c("a snapshot of a missing volume: exit 4", p.returncode == 4, (p.returncode, p.stderr))
        p = node.cli("snapshot", "create", "alpha", "a/b", check=False)
        c("a bad snapshot name: exit 2", p.returncode == 2, (p.returncode, p.stderr))
        snaps = node.cli("snapshot", "list", "alpha", json_out=True)
        c("snapshot list --json: oldest first", [x["name"] for x in snaps.get("snapshots", [])] == ["s1", "s2"],
          snaps)
        p = node.cli("snapshot", "list", "alpha")
        c("snapshot list prints a table", p.stdout.split()[:5] == ["NAME", "ID", "CREATED", "TXG", "FREES"] and
          "s2" in p.stdout, p.stdout)
        show = node.cli("snapshot", "show", "alpha", "s1", json_out=True)
        c("snapshot show", show.get("snapshot", {}).get("id") == snap["snapshot"]["id"], show)
        show = node.cli("volume", "show", "alpha", json_out=True)
        c("volume show counts the snapshots", show["volume"].get("snapshots") == 2, show)

        # The snapshots through the kernel (FUSE): .snapshot in every
        # directory, found by name, not listed; each read-only, as it was.
        m = node.mount_path
        data2 = os.urandom(1 << 20)
        with open(os.path.join(m, "data"), "r+b") as f:
            f.write(data2)
        with open(os.path.join(m, "newer"), "wb") as f:
            f.write(b"after the snapshots")
        c("ls of the volume does not list .snapshot", ".snapshot" not in os.listdir(m), os.listdir(m))
        snapdir = os.path.join(m, ".snapshot")
        c("ls .snapshot lists the snapshots", sorted(os.listdir(snapdir)) == ["s1", "s2"], os.listdir(snapdir))
        with open(os.path.join(snapdir, "s1", "data"), "rb") as f:
            c("a file read from .snapshot/s1 is its content when s1 was taken", f.read() == data1)
        with open(os.path.join(m, "data"), "rb") as f:
            c("the live file is what it became", f.read() == data2)
        c("a file made after the snapshot is not in it", sorted(os.listdir(os.path.join(snapdir, "s1"))) == ["data"],
          os.listdir(os.path.join(snapdir, "s1")))
        c("the snapshot's file is a node of its own (st_ino)",
          os.stat(os.path.join(snapdir, "s1", "data")).st_ino != os.stat(os.path.join(m, "data")).st_ino)
        for what, fn in [("open for writing", lambda: open(os.path.join(snapdir, "s1", "data"), "r+b")),
                         ("mkdir", lambda: os.mkdir(os.path.join(snapdir, "s1", "x"))),
                         ("unlink", lambda: os.unlink(os.path.join(snapdir, "s1", "data"))),
                         ("chmod", lambda: os.chmod(os.path.join(snapdir, "s1", "data"), 0o600)),
                         ("mkdir .snapshot", lambda: os.mkdir(snapdir))]:
            try:
                fn()
                got = "succeeded"
            except OSError as e:
                got = errno.errorcode.get(e.errno, e.errno)
            want = "EEXIST" if what == "mkdir .snapshot" else "EROFS"
            where = "in the live volume" if what == "mkdir .snapshot" else "in a snapshot"
            c("%s %s: %s" % (what, where, want), got == want, got)

        # A snapshot schedule: nasgwd snapshots alpha every second (the FUSE
        # writes above flushed first) and keeps the schedule's newest two;
        # s1 and s2, made by hand, are not its own and stay.
        sched = node.cli("snapshot", "schedule", "add", "alpha", "--every", "1s", "--keep", "2", json_out=True)
        c("snapshot schedule add --json: named every-1s, every second, keep 2, never run yet",
          sched.get("schedule", {}).get("name") == "every-1s" and sched["schedule"].get("every_seconds") == 1 and
          sched["schedule"].get("keep") == 2 and sched["schedule"].get("last_run_unix") == 0, sched)
        stamped = re.compile(r"^every-1s-\d{8}T\d{6}Z$")
        seen, current = [], []  # the schedule's snapshots: in the order they appeared; now
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            names = [x["name"] for x in node.cli("snapshot", "list", "alpha", json_out=True)["snapshots"]]
            current = [n for n in names if stamped.match(n)]
            seen += [n for n in current if n not in seen]
            if len(seen) >= 3 and len(current) == 2 and seen[0] not in current:
                break
            time.sleep(0.2)
        c("the schedule took a snapshot each second, named by the UTC time, and its third run deleted the oldest",
          len(seen) >= 3 and len(current) == 2 and seen[0] not in current and seen == sorted(seen), (seen, current))
        scheds = node.cli("snapshot", "schedule", "list", "alpha", json_out=True).get("schedules", [])
        c("schedule list: the last run recorded, the next a second after it",
          len(scheds) == 1 and scheds[0].get("last_run_unix", 0) > 0 and
          scheds[0].get("next_run_unix") == scheds[0]["last_run_unix"] + 1, scheds)
        p = node.cli("snapshot", "schedule", "list")
        c("schedule list prints a table", p.stdout.split()[:6] == ["VOLUME", "NAME", "EVERY", "KEEP", "LAST", "NEXT"]
          and "every-1s" in p.stdout, p.stdout)
        log = node.log_tail(400000).splitlines()
        c("each scheduled snapshot taken and deleted is logged (INFO snapshots)",
          all(any("INFO snapshots scheduled snapshot taken" in l and "snapshot=" + n in l for l in log)
              for n in seen) and
          any("INFO snapshots scheduled snapshot deleted" in l and "snapshot=" + seen[0] in l for l in log),
          [l for l in log if "snapshots" in l][-10:])
        node.cli("snapshot", "schedule", "remove", "alpha", "every-1s")
        kept = [x["name"] for x in node.cli("snapshot", "list", "alpha", json_out=True)["snapshots"]]
        time.sleep(2.5)  # no run after the removal: the one place a wait is the check
        later = [x["name"] for x in node.cli("snapshot", "list", "alpha", json_out=True)["snapshots"]]
        scheduled = [n for n in kept if stamped.match(n)]
        c("once the schedule is removed no snapshot follows; its newest two stay, s1 and s2 untouched",
          later == kept and len(scheduled) == 2 and kept[:2] == ["s1", "s2"], (kept, later))
        c("...and .snapshot lists them", sorted(os.listdir(snapdir)) == sorted(["s1", "s2"] + scheduled),
          os.listdir(snapdir))
        p = node.cli("snapshot", "schedule", "remove", "alpha", "every-1s", check=False)
        c("removing it again: exit 4", p.returncode == 4, (p.returncode, p.stderr))

        # Rollback to the newest snapshot, seen through FUSE: a file
        # overwritten and grown since reads as it was, a file made since is
        # gone. The FUSE writes are unstable (in the write-back cache): the
        # rollback flushes it first, so they are undone too.
        node.cli("snapshot", "create", "alpha", "r1")
        with open(os.path.join(m, "data"), "rb") as f:
            at_r1 = f.read()
        with open(os.path.join(m, "data"), "r+b") as f:
            f.write(os.urandom(4096))
            f.seek(0, os.SEEK_END)
            f.write(os.urandom(100000))
        with open(os.path.join(m, "made-since"), "wb") as f:
            f.write(b"made after r1")
        p = node.cli("snapshot", "rollback", "alpha", "s1", check=False)
        c("rollback to a snapshot that is not the newest: exit 6, the newer ones named",
          p.returncode == 6 and "r1" in p.stderr and "s2" in p.stderr, (p.returncode, p.stderr))
        rb = node.cli("snapshot", "rollback", "alpha", "r1", json_out=True)
        c("snapshot rollback --json: back to r1, the data written since freed",
          rb.get("rolled_back", {}).get("snapshot", {}).get("name") == "r1" and
          rb["rolled_back"].get("freed_bytes", 0) >= 100000 and rb["rolled_back"].get("removed_keys", 0) > 0, rb)
        time.sleep(1.5)  # names and attributes the kernel holds (nasgw-fuse's 1 s) run out
        with open(os.path.join(m, "data"), "rb") as f:
            got = f.read()
        c("through FUSE the file reads as at the snapshot (its size too)", got == at_r1, (len(got), len(at_r1)))
        try:
            os.stat(os.path.join(m, "made-since"))
            got = "there"
        except OSError as e:
            got = errno.errorcode.get(e.errno, e.errno)
        c("through FUSE the file made since the snapshot is ENOENT", got == "ENOENT", got)
        c("the rollback logged (INFO snapshots snapshot rollback, with its counts)",
          any("INFO snapshots snapshot rollback" in l and "volume=alpha" in l and "snapshot=r1" in l and
              "removed_keys=" in l and "freed_bytes=" in l for l in node.log_tail(400000).splitlines()),
          [l for l in node.log_tail(400000).splitlines() if "rollback" in l][-5:])
        p = node.cli("snapshot", "rollback", "alpha", "r1")
        c("rollback prints what it did", p.stdout.startswith("volume alpha rolled back to snapshot r1: ") and
          "keys removed" in p.stdout, p.stdout)
        node.cli("snapshot", "delete", "alpha", "r1")  # the snapshot stayed; gone again for the checks below

        # A clone of a snapshot through the CLI, mounted through FUSE beside
        # alpha (a second nasgw-fuse, daemonized, as beta's below): it reads
        # as at the snapshot, not as alpha since; a write to it leaves alpha
        # and the snapshot alone; the snapshot cannot be deleted while the
        # clone exists; the clone goes as any volume, then the snapshot.
        node.cli("snapshot", "create", "alpha", "c1")
        with open(os.path.join(m, "data"), "rb") as f:
            at_c1 = f.read()
        files_c1 = sorted(os.listdir(m))
        with open(os.path.join(m, "data"), "r+b") as f:
            f.write(os.urandom(8192))  # alpha after c1 (unstable: in the write-back cache, which a clone needs not)
        with open(os.path.join(m, "data"), "rb") as f:
            alpha_now = f.read()
        p = node.cli("snapshot", "clone", "alpha", "c1", "alpha-c1")
        made = re.match(r"^volume alpha-c1 cloned from alpha@c1 \((\d+) files, shares its data\)$", p.stdout.strip())
        c("snapshot clone prints what it made", made is not None and int(made.group(1)) == len(files_c1) + 1,
          (p.stdout, files_c1))
        show = node.cli("volume", "show", "alpha-c1", json_out=True)
        c("volume show --json gives the clone's origin",
          show["volume"].get("origin_volume") == "alpha" and show["volume"].get("origin_snapshot") == "c1", show)
        p = node.cli("volume", "show", "alpha-c1")
        c("volume show says the origin", re.search(r"(?m)^origin +alpha@c1 \(a clone\)$", p.stdout) is not None,
          p.stdout)
        p = node.cli("volume", "list")
        rows = {l.split()[0]: l.split()[-1] for l in p.stdout.splitlines()[1:] if l.strip()}
        c("volume list: an ORIGIN column, alpha@c1 for the clone, - for the others",
          p.stdout.split("\n")[0].split()[-1] == "ORIGIN" and rows.get("alpha-c1") == "alpha@c1" and
          rows.get("alpha") == "-", p.stdout)
        p = node.cli("snapshot", "clone", "alpha", "c1", "beta", check=False)
        c("a clone over an existing volume name: exit 5", p.returncode == 5, (p.returncode, p.stderr))
        p = node.cli("snapshot", "clone", "alpha", "nosuch", "x", check=False)
        c("a clone of a missing snapshot: exit 4", p.returncode == 4, (p.returncode, p.stderr))
        cm = node.mount_path + "-clone"
        os.makedirs(cm, exist_ok=True)
        p = subprocess.run([a.fuse, "--socket", node.head_socket, "--volume", "alpha-c1", cm], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        try:
            deadline = time.monotonic() + 30
            while p.returncode == 0 and not is_mounted(cm) and time.monotonic() < deadline:
                time.sleep(0.05)
            c("nasgw-fuse mounts the clone", p.returncode == 0 and is_mounted(cm), p.stdout)
            c("the clone holds the snapshot's files", sorted(os.listdir(cm)) == files_c1, (os.listdir(cm), files_c1))
            with open(os.path.join(cm, "data"), "rb") as f:
                got = f.read()
            c("through FUSE the clone's file reads as at the snapshot, not as alpha since",
              got == at_c1 and got != alpha_now, (len(got), len(at_c1)))
            mine = os.urandom(4096)
            with open(os.path.join(cm, "data"), "r+b") as f:
                f.write(mine)
            with open(os.path.join(cm, "clone-only"), "wb") as f:
                f.write(b"made in the clone")
            with open(os.path.join(cm, "data"), "rb") as f:
                c("the clone takes writes", f.read() == mine + at_c1[4096:])
            with open(os.path.join(m, "data"), "rb") as f:
                c("alpha's file is unchanged by the clone's write", f.read() == alpha_now)
            c("a file made in the clone is not in alpha", not os.path.exists(os.path.join(m, "clone-only")))
            with open(os.path.join(m, ".snapshot", "c1", "data"), "rb") as f:
                c("...and the snapshot still reads as it was", f.read() == at_c1)
        finally:
            subprocess.run(["fusermount3", "-u", cm])
            os.rmdir(cm)
        status, text = scrape(node.metrics_port())
        c("the clone has a volume's gauges",
          'nasgw_volume_files{volume="alpha-c1"} %d' % (len(files_c1) + 2) in text and
          'nasgw_volume_used_bytes{volume="alpha-c1"} ' in text, [l for l in text.splitlines() if "alpha-c1" in l])
        p = node.cli("snapshot", "delete", "alpha", "c1", check=False)
        c("snapshot delete refused while the clone exists (exit 6, the clone named)",
          p.returncode == 6 and "'alpha-c1'" in p.stderr and "nasgw volume delete" in p.stderr,
          (p.returncode, p.stderr))
        c("the clone logged (INFO snapshots snapshot clone)",
          any("INFO snapshots snapshot clone" in l and "volume=alpha" in l and "snapshot=c1" in l and
              "clone=alpha-c1" in l for l in node.log_tail(400000).splitlines()),
          [l for l in node.log_tail(400000).splitlines() if "clone" in l][-5:])
        p = node.cli("volume", "delete", "alpha-c1", check=False)
        c("the clone holds files: volume delete without --force is refused (exit 6)",
          p.returncode == 6 and "--force" in p.stderr, (p.returncode, p.stderr))
        node.cli("volume", "delete", "alpha-c1", "--force")
        gone = node.cli("snapshot", "delete", "alpha", "c1", json_out=True)
        c("once the clone is deleted the snapshot can be",
          gone.get("deleted", {}).get("snapshot", {}).get("name") == "c1", gone)
        with open(os.path.join(m, "data"), "rb") as f:
            c("...and alpha still reads as it is", f.read() == alpha_now)

        # Garbage on the real head socket while the FUSE client works.
        for junk in [b"\x00" * 24, os.urandom(5000), b"NHP1" + os.urandom(100)]:
            s = socket.socket(socket.AF_UNIX)
            s.connect(node.head_socket)
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(10)
            try:
                while s.recv(4096):
                    pass
            except ConnectionResetError:
                pass  # closed with our junk unread: also a close
            s.close()
        with open(os.path.join(node.mount_path, "data"), "rb") as f:
            c("the client keeps working after garbage on the socket", len(f.read()) == 1 << 20)
        c("nasgwd is still up", node.cli("node", "status", check=False).returncode == 0)

        # A head socket another user may not open: nasgw-fuse says so, at once.
        nb = node.mount_path + "-nobody"
        os.makedirs(nb, exist_ok=True)
        t0 = time.monotonic()
        p = subprocess.run([a.fuse, "--socket", node.head_socket, "--volume", "beta", "-f", nb],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
                           preexec_fn=as_nobody)
        c("nasgw-fuse as another user: 'permission denied' with the socket, at once",
          p.returncode == 1 and "permission denied" in p.stdout and node.head_socket in p.stdout and
          time.monotonic() - t0 < 4, (p.returncode, p.stdout, time.monotonic() - t0))
        os.rmdir(nb)

        # A flood of connections from one uid stops at head.max_connections_per_uid;
        # the other users' heads are still served. (The socket is opened to all
        # for this: nasgwd checks nothing more at accept.)
        os.chmod(os.path.dirname(node.head_socket), 0o755)
        os.chmod(node.head_socket, 0o666)
        # (Debian's python: another user may not run the one under /root)
        flood = subprocess.Popen(["/usr/bin/python3", "-c", FLOOD, node.head_socket, str(head_version()), "1000"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=as_nobody)
        try:
            got = json.loads(flood.stdout.readline() or "{}")
            c("a flood from one uid is refused at head.max_connections_per_uid (128), EMFILE, the limit named",
              got.get("accepted") == 128 and got.get("status") == 24 and got.get("refused") == 51 and
              "head.max_connections_per_uid" in got.get("message", ""), (got, flood.stderr.read()
                                                                           if flood.poll() is not None else ""))
            with open(os.path.join(node.mount_path, "data"), "rb") as f:
                c("...while root's head (the FUSE mount) is still served", len(f.read()) == 1 << 20)
            with open(os.path.join(node.mount_path, "after-flood"), "w") as f:
                f.write("x")
            c("...and writes", os.path.getsize(os.path.join(node.mount_path, "after-flood")) == 1)
            status, text = scrape(node.metrics_port())
            m = re.search(r'nasgw_head_connections_refused_total\{limit="max_connections_per_uid"\} (\d+)', text)
            c("the 51 refusals are counted in Prometheus", m is not None and int(m.group(1)) == 51, text[-3000:])
            lines = [l for l in node.log_tail(200000).splitlines()
                     if "connection refused: limit reached" in l and "uid=65534" in l]
            c("...and logged rate-limited (the first at once, the rest in one line after 10 s)",
              1 <= len(lines) <= 2 and " refused=1 " in lines[0], lines)
        finally:
            flood.stdin.close()
            flood.wait(timeout=30)
        os.chmod(node.head_socket, 0o660)
        os.chmod(os.path.dirname(node.head_socket), 0o750)

        # nasgw-fuse in the background (no -f): it forks, then connects. The
        # socket is given relative to the current directory: nasgw-fuse makes
        # it absolute before it daemonizes (and changes to /).
        bg = node.mount_path + "-bg"
        os.makedirs(bg, exist_ok=True)
        p = subprocess.run([a.fuse, "--socket", os.path.basename(node.head_socket), "--volume", "beta", bg],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
                           cwd=os.path.dirname(node.head_socket))
        try:
            c("nasgw-fuse daemonizes (exit 0)", p.returncode == 0, p.stdout)
            with open(os.path.join(bg, "f"), "w") as f:
                f.write("background")
            with open(os.path.join(bg, "f")) as f:
                c("a daemonized nasgw-fuse, given a relative --socket, serves", f.read() == "background")
        finally:
            subprocess.run(["fusermount3", "-u", bg])
            os.rmdir(bg)

        status, text = scrape(node.metrics_port())
        c("metrics endpoint answers 200", status == 200, status)
        c("per-volume head operations exported", 'nasgw_volume_ops_total{' in text and 'volume="alpha"' in text,
          text[:2000])
        c("per-LUN I/O exported", "nasgw_lun_ops_total{" in text and "nasgw_lun_latency_seconds{" in text, text[:2000])
        c("space and health exported", "nasgw_reserve_capacity_bytes" in text and "nasgw_up{" in text, text[:2000])
        c("latency histograms exported", "nasgw_volume_latency_seconds_bucket{" in text, text[:2000])
        c("snapshot gauges exported per volume",
          'nasgw_volume_snapshots{volume="alpha"} %d' % (2 + len(scheduled)) in text and 'nasgw_volume_snapshots{volume="beta"} 0' in text and
          'nasgw_volume_snapshot_bytes{volume="alpha"} ' in text,
          [l for l in text.splitlines() if "snapshot" in l])
        runs = node.metric("nasgw_snapshot_schedule_runs_total", volume="alpha", schedule="every-1s")
        deleted = node.metric("nasgw_snapshot_schedule_deleted_total", volume="alpha", schedule="every-1s")
        failures = node.metric("nasgw_snapshot_schedule_failures_total", volume="alpha", schedule="every-1s")
        c("the schedule's runs and deletions counted, no failure", runs >= 3 and deleted == runs - 2 and failures == 0,
          (runs, deleted, failures))
        # The changes above went through the intent log: entries, records
        # (group commits), no more records than entries.
        def metric(name):
            for line in text.splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{}"):
                    return float(line.split()[-1])
            return None
        entries, records = metric("nasgw_log_entries_total"), metric("nasgw_log_records_total")
        c("intent log metrics exported, changes logged",
          entries is not None and records is not None and entries > 0 and 0 < records <= entries,
          (entries, records))
        c("transaction groups and log write latency exported",
          metric("nasgw_txg_total") is not None and "nasgw_log_write_latency_seconds{" in text, text[:2000])
        # FUSE writes are unstable: they went through the write-back cache.
        cached = [float(l.split()[-1]) for l in text.splitlines()
                  if l.startswith('nasgw_cache_writes_total{answer="cached"}')]
        c("write-back cache metrics exported, FUSE writes answered from it",
          cached and cached[0] > 0 and metric("nasgw_cache_write_bytes_total") and
          metric("nasgw_cache_dirty_bytes") is not None and metric("nasgw_cache_flushes_total") is not None,
          [l for l in text.splitlines() if l.startswith("nasgw_cache")])

        node.unmount()
        gone = node.cli("snapshot", "delete", "alpha", "s1", json_out=True)
        c("snapshot delete --json gives what was deleted", gone.get("deleted", {}).get("snapshot", {}).get("name") ==
          "s1", gone)
        node.cli("snapshot", "delete", "alpha", "s2")
        for n in scheduled:
            node.cli("snapshot", "delete", "alpha", n)
        p = node.cli("snapshot", "delete", "alpha", "s2", check=False)
        c("deleting a missing snapshot: exit 4", p.returncode == 4, (p.returncode, p.stderr))
        snaps = node.cli("snapshot", "list", "alpha", json_out=True)
        c("no snapshots left", snaps.get("snapshots") == [], snaps)
        p = node.cli("volume", "delete", "alpha", check=False)
        c("deleting a non-empty volume without --force is refused (exit 6, suggests --force)",
          p.returncode == 6 and "--force" in p.stderr, (p.returncode, p.stderr))
        p = node.cli("volume", "delete", "nosuch", check=False)
        c("deleting a missing volume: exit 4", p.returncode == 4, (p.returncode, p.stderr))
        node.cli("volume", "delete", "alpha", "--force")
        node.cli("volume", "delete", "beta", "--force")
        vols = node.cli("volume", "list", json_out=True)
        c("both volumes gone", "alpha" not in str(vols) and "beta" not in str(vols), vols)

        # Online growth through the CLI: a LUN of a second lab target.
        cap0 = node.cli("reserve", "status", json_out=True)
        node.cli("volume", "create", "gamma")
        new_url = node.s["urls"][0]
        p = node.cli("reserve", "add-lun", new_url, check=False)
        c("adding a LUN that is already a member is refused", p.returncode != 0, (p.returncode, p.stderr))
        p = subprocess.run([a.cli, "--socket", "/nonexistent.sock", "node", "status"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        c("an unreachable daemon: exit 3 and the socket named", p.returncode == 3 and "/nonexistent.sock" in p.stderr,
          (p.returncode, p.stderr))

        # A daily schedule on gamma: its first snapshot at once, then none
        # for a day, across a restart too (the schedule and its last run
        # are kept with the reserve).
        node.cli("snapshot", "schedule", "add", "gamma", "--every", "daily", "--keep", "7")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not node.cli("snapshot", "list", "gamma", json_out=True)["snapshots"]:
            time.sleep(0.2)
        daily0 = node.cli("snapshot", "schedule", "list", "gamma", json_out=True)["schedules"]
        snaps0 = [x["name"] for x in node.cli("snapshot", "list", "gamma", json_out=True)["snapshots"]]
        c("a daily schedule takes its first snapshot at once, named daily-<time>",
          len(snaps0) == 1 and re.match(r"^daily-\d{8}T\d{6}Z$", snaps0[0]) and len(daily0) == 1 and
          daily0[0]["last_run_unix"] > 0 and daily0[0]["next_run_unix"] == daily0[0]["last_run_unix"] + 86400,
          (snaps0, daily0))

        # Restart: everything persisted.
        node.stop()
        node.start()
        vols = node.cli("volume", "list", json_out=True)
        c("volumes persist across a restart", "gamma" in str(vols), vols)
        daily1 = node.cli("snapshot", "schedule", "list", "gamma", json_out=True)["schedules"]
        snaps1 = [x["name"] for x in node.cli("snapshot", "list", "gamma", json_out=True)["snapshots"]]
        c("the schedule persists across a restart with its last run, and does not run again before it is due",
          daily1 == daily0 and snaps1 == snaps0, (daily0, daily1, snaps0, snaps1))
        cap1 = node.cli("reserve", "status", json_out=True)
        c("reserve identity persists", cap0["reserve"]["uuid"] == cap1["reserve"]["uuid"] != "",
          (cap0["reserve"]["uuid"], cap1["reserve"]["uuid"]))
        c("LUN serials are shown trimmed", all(l["serial"] == l["serial"].strip() and l["serial"]
                                               for l in cap1["reserve"]["luns"]), cap1["reserve"]["luns"])
    except Exception:
        print(node.log_tail())
        raise
    finally:
        node.close()
    return c


def parse_ganesha(text):
    """The EXPORT blocks of a Ganesha config text, as Ganesha's grammar reads
    them: [{"key": [values], "CLIENT": {...}, "FSAL": {...}}, ...]. Raises
    ValueError on a syntax error."""
    toks = re.findall(r'"[^"]*"|[{};,=]|[^\s{};,="#]+', re.sub(r"#[^\n]*", "", text))
    pos = [0]

    def nxt():
        if pos[0] >= len(toks):
            raise ValueError("unexpected end")
        pos[0] += 1
        return toks[pos[0] - 1]

    def block():
        if nxt() != "{":
            raise ValueError("expected {")
        b = {}
        while True:
            key = nxt()
            if key == "}":
                return b
            t = nxt()
            if t == "{":
                pos[0] -= 1
                b[key] = block()
                continue
            if t != "=":
                raise ValueError("expected = after %s" % key)
            values = []
            while True:
                v = nxt()
                values.append(v[1:-1] if v.startswith('"') else v)
                sep = nxt()
                if sep == ";":
                    break
                if sep != ",":
                    raise ValueError("expected , or ; after a value of %s" % key)
            b[key] = values

    out = []
    while pos[0] < len(toks):
        if nxt() != "EXPORT":
            raise ValueError("expected EXPORT")
        out.append(block())
    return out


def cmd_exports(a):
    """NFS exports through the CLI: kept in the reserve's metadata (they
    survive a restart of nasgwd from the SAN alone), rendered into the
    Ganesha exports file, and a SIGHUP to ganesha.nfsd (a stand-in: a copy of
    sleep named ganesha.nfsd, which SIGHUP ends) after every change."""
    c = Checks()
    node = Node({"nasgwd": a.nasgwd, "cli": a.cli, "fuse": a.fuse}, luns=2, size="256M", tag="exp")
    procs = []
    try:
        gdir = os.path.join(node.s["dir"], "ganesha")
        os.makedirs(gdir, exist_ok=True)
        exports_file = os.path.join(gdir, "nasgw-exports.conf")
        pid_file = os.path.join(gdir, "ganesha.pid")
        fake = os.path.join(gdir, "ganesha.nfsd")
        shutil.copy(shutil.which("sleep"), fake)

        def ganesha(binary=fake):
            p = subprocess.Popen([binary, "600"])
            procs.append(p)
            with open(pid_file, "w") as f:
                f.write("%d\n" % p.pid)
            return p

        def hupped(p, timeout=10):
            try:
                return p.wait(timeout) == -signal.SIGHUP
            except subprocess.TimeoutExpired:
                return False

        def rendered():
            with open(exports_file) as f:
                return {int(b["Export_Id"][0]): b for b in parse_ganesha(f.read())}

        extra = '[nfs]\nexports_file = "%s"\nganesha_pid_file = "%s"\n' % (exports_file, pid_file)
        node.start(extra)
        node.cli("reserve", "format", "--name", "lab", "--ag-size", "16M")
        c("the exports file is written when the reserve comes online, empty",
          os.path.exists(exports_file) and rendered() == {}, node.log_tail())
        node.cli("volume", "create", "alpha")
        node.cli("volume", "create", "beta")
        node.mount("alpha")
        os.makedirs(os.path.join(node.mount_path, "sub", "dir"))
        with open(os.path.join(node.mount_path, "file"), "w") as f:
            f.write("x")
        node.unmount()

        g = ganesha()
        node.cli("export", "add", "alpha")
        c("ganesha.nfsd gets SIGHUP after an export is added", hupped(g), node.log_tail())
        node.cli("export", "add", "alpha/sub/dir", "--pseudo", "/projects", "--clients", "198.18.2.0/24,198.18.3.7",
                 "--ro", "--no-root-squash")
        node.cli("export", "add", "beta", "--sec", "krb5i,sys", "--protocols", "4")
        lst = node.cli("export", "list", json_out=True)["exports"]
        c("export list --json shows the three exports with ids 1..3",
          [e["id"] for e in lst] == [1, 2, 3] and lst[1]["path"] == "/sub/dir" and lst[1]["read_only"], lst)
        p = node.cli("export", "list")
        c("export list prints a table", "PSEUDO" in p.stdout and "/projects" in p.stdout, p.stdout)
        show = node.cli("export", "show", "/projects", json_out=True)
        c("export show by pseudo path", show["export"]["id"] == 2 and show["export"]["clients"] ==
          ["198.18.2.0/24", "198.18.3.7"], show)
        r = rendered()
        c("the file holds an EXPORT block per export", sorted(r) == [1, 2, 3], r)
        e2 = r.get(2, {})
        c("...with the contract's fields",
          e2.get("Path") == ["/alpha/sub/dir"] and e2.get("Pseudo") == ["/projects"] and
          e2.get("Protocols") == ["3", "4"] and e2.get("Transports") == ["TCP"] and
          e2.get("SecType") == ["sys"] and e2.get("Squash") == ["No_Root_Squash"] and
          e2.get("Access_Type") == ["None"] and
          e2.get("CLIENT") == {"Clients": ["198.18.2.0/24", "198.18.3.7"], "Access_Type": ["RO"]} and
          e2.get("FSAL") == {"Name": ["NASGW"]} and r.get(1, {}).get("Path") == ["/alpha"] and
          r.get(1, {}).get("Access_Type") == ["RW"] and r.get(3, {}).get("SecType") == ["krb5i", "sys"] and
          r.get(3, {}).get("Protocols") == ["4"], r)

        for args, code, what in [
                (("export", "add", "alpha/nosuch"), 4, "a sub-path that does not exist: exit 4"),
                (("export", "add", "alpha/file"), 4, "a sub-path that is a file: exit 4"),
                (("export", "add", "gamma"), 4, "an unknown volume: exit 4"),
                (("export", "add", "beta", "--pseudo", "/projects"), 5, "a pseudo path in use: exit 5"),
                (("export", "add", "beta", "--pseudo", "/b2", "--clients", "198.18.2.1/24"), 2,
                 "a CIDR with host bits: exit 2"),
                (("export", "add", "beta", "--pseudo", "/b2", "--sec", "none"), 2, "an unknown sec flavour: exit 2"),
                (("export", "show", "9"), 4, "showing a missing export: exit 4"),
                (("volume", "delete", "alpha", "--force"), 6, "deleting an exported volume, even with --force: exit 6")]:
            p = node.cli(*args, check=False)
            c(what, p.returncode == code and p.stderr.startswith("nasgw: "), (p.returncode, p.stderr))

        other = ganesha(shutil.which("sleep"))
        node.cli("export", "remove", "3")
        c("a pid that is not ganesha.nfsd is never signalled", other.poll() is None, other.returncode)
        c("...and nasgwd says so in a WARN line", "not signalled" in node.log_tail(), node.log_tail())
        c("a removed export leaves the file", sorted(rendered()) == [1, 2], rendered())
        before = node.cli("export", "list", json_out=True)

        # Restart: the exports come from the reserve, the file is rewritten.
        node.stop()
        os.remove(exports_file)
        g = ganesha()
        node.start(extra)
        after = node.cli("export", "list", json_out=True)
        c("exports survive a nasgwd restart", after == before, (before, after))
        c("the file is written again at start", os.path.exists(exports_file) and sorted(rendered()) == [1, 2],
          node.log_tail())
        c("...and ganesha.nfsd is told", hupped(g), node.log_tail())
        e = node.cli("export", "add", "beta", json_out=True)
        c("ids are never reused across restarts", e["export"]["id"] == 4, e)
        node.cli("export", "remove", "1")
        node.cli("export", "remove", "2")
        node.cli("export", "remove", "4")
        p = node.cli("volume", "delete", "alpha", "--force", check=False)
        c("without exports the volume can be deleted", p.returncode == 0, (p.returncode, p.stderr))
        c("no exports: the file holds only comments",
          rendered() == {} and all(l.startswith("#") for l in open(exports_file).read().splitlines() if l.strip()))
    except Exception:
        print(node.log_tail())
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        node.close()
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("config", "admin", "exports"):
        p = sub.add_parser(name)
        p.add_argument("--nasgwd", required=True)
        p.add_argument("--cli", required=True)
        p.add_argument("--fuse")
    a = ap.parse_args()
    c = {"config": cmd_config, "admin": cmd_admin, "exports": cmd_exports}[a.cmd](a)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
