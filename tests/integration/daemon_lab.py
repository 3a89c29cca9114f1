#!/usr/bin/env python3
"""nasgwd on a lab SAN, driven as an administrator would: start and stop,
bad configurations, the `nasgw` CLI end to end, the metrics endpoint, and
garbage on the head socket while a client works.

  daemon_lab.py config --nasgwd BIN --cli BIN
  daemon_lab.py admin  --nasgwd BIN --cli BIN --fuse BIN

Each command starts its own lab and tears it down even when it fails.
Prints one line per check and "N passed, N failed".
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nasgwlab import Node, sh  # noqa: E402


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, what, ok, detail=""):
        print("%s: %s%s" % ("ok" if ok else "FAILED", what, "" if ok else " -- " + str(detail)[-1500:]))
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok


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
        vols = node.cli("volume", "list", json_out=True)
        names = sorted(v["name"] for v in (vols.get("volumes", vols) if isinstance(vols, dict) else vols))
        c("volume list --json lists both", names == ["alpha", "beta"], vols)
        p = node.cli("volume", "list")
        c("volume list prints a table", "alpha" in p.stdout and "beta" in p.stdout and "\n" in p.stdout, p.stdout)

        # Data into alpha through the head path, so it is not empty.
        node.mount("alpha")
        with open(os.path.join(node.mount_path, "data"), "wb") as f:
            f.write(os.urandom(1 << 20))
        show = node.cli("volume", "show", "alpha", json_out=True)
        c("volume show counts the file", "1" in str(show), show)

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

        # nasgw-fuse in the background (no -f): it forks, then connects.
        bg = node.mount_path + "-bg"
        os.makedirs(bg, exist_ok=True)
        p = subprocess.run([a.fuse, "--socket", node.head_socket, "--volume", "beta", bg], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        try:
            c("nasgw-fuse daemonizes (exit 0)", p.returncode == 0, p.stdout)
            with open(os.path.join(bg, "f"), "w") as f:
                f.write("background")
            with open(os.path.join(bg, "f")) as f:
                c("a daemonized nasgw-fuse serves", f.read() == "background")
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

        node.unmount()
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

        # Restart: everything persisted.
        node.stop()
        node.start()
        vols = node.cli("volume", "list", json_out=True)
        c("volumes persist across a restart", "gamma" in str(vols), vols)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("config", "admin"):
        p = sub.add_parser(name)
        p.add_argument("--nasgwd", required=True)
        p.add_argument("--cli", required=True)
        p.add_argument("--fuse")
    a = ap.parse_args()
    c = {"config": cmd_config, "admin": cmd_admin}[a.cmd](a)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
