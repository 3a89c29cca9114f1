#!/usr/bin/env python3
"""smbtorture's SMB2 suites against vfs_nasgw and against stock Samba, in
the same run: one smbd in the lab's server namespace serves a nasgw share
(nasgwd on lab LUNs; `nasgw share add`) and a stock share of a local XFS
file system on a loop device, both with `vfs objects = acl_xattr
streams_xattr` (nasgwd stacks them above vfs_nasgw by default: [smb]
vfs_objects). Every suite runs
against both, from a client namespace, as the same user.

    python3 tests/integration/smbtorture_lab.py --build build/release [--suites smb2.lock,smb2.dir]
        [--out results.json]

Then pike-smb2's suite (PyPI) on both shares (--no-pike skips it).
Prints per suite the passes, failures and skips of each share, then every
test that passes on stock and fails on nasgw. Exit 1 when such a test has
no written reason in REASONS below (the issue's rule: no regression against
stock Samba without a reason), 0 otherwise. Not part of `make test` (the
suites take ten minutes and more); `make smbtorture` runs it on a Release
build. The results of the last run are in docs/smb.md.
"""

import argparse
import json
import os
import re
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lab"))
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402
import smblab  # noqa: E402

# The suites, then the ACL and FSCTL ones (server-side copy, sparse files).
SUITES = ["smb2.connect", "smb2.read", "smb2.rw", "smb2.getinfo", "smb2.setinfo", "smb2.dir", "smb2.rename",
          "smb2.create", "smb2.lock", "smb2.durable-open", "smb2.durable-v2-open", "smb2.oplock", "smb2.lease",
          "smb2.acls", "smb2.ioctl"]
SUITE_TIMEOUT_S = 1800
STACK = "acl_xattr streams_xattr"

# Tests that pass on stock Samba and fail on nasgw, each with why; a key
# ending in '*' covers every test it begins.
REASONS = {}


def reason(test):
    if test in REASONS:
        return REASONS[test]
    for k, why in REASONS.items():
        if k.endswith("*") and test.startswith(k[:-1]):
            return why
    return None

# unittest -v: "test_name (pike.test.module.Class...) ... ok|FAIL|ERROR|skipped ..."
PIKE_RESULT = re.compile(r"^(\w+) \(([\w.]+)\)\s*(?:\n[^\n]*?)?\.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)",
                         re.M)
PIKE_TIMEOUT_S = 1800


def node_ops(node):
    """nasgwd's completed head requests so far, by operation."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % node.metrics_port(), timeout=10) as r:
        text = r.read().decode()
    out = {}
    for m in re.finditer(r'^nasgw_volume_ops_total\{[^}]*op="([a-z]+)"[^}]*\} (\S+)$', text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + int(float(m.group(2)))
    return out


def pike(client, srv, user, share):
    """pike-smb2's test suite (PyPI, in the lab venv) against //srv/share;
    {test: outcome} as smbtorture's."""
    py = nfslab.ensure_venv()
    code = ("import os, sys, unittest, pike.test\n"
            "d = os.path.dirname(pike.test.__file__)\n"
            "suite = unittest.defaultTestLoader.discover(d, pattern='*.py', top_level_dir=os.path.dirname(os.path.dirname(d)))\n"
            "unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)\n")
    p = client.run(["env", "PIKE_SERVER=" + srv.addr, "PIKE_SHARE=" + share, "PIKE_CREDS=" + user.cred(), py, "-c",
                    code], check=False, timeout=PIKE_TIMEOUT_S)
    out = {}
    for name, where, outcome in PIKE_RESULT.findall(p.stdout + p.stderr):
        out["%s.%s" % (where, name)] = {"ok": "success", "skipped": "skip"}.get(outcome, "failure")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--pike", action=argparse.BooleanOptionalAction, default=True,
                    help="also run pike-smb2's suite on both shares (--no-pike: smbtorture only)")
    ap.add_argument("--out", help="write every test's outcome on both shares here (JSON)")
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    bins = {"nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw", "fuse": b + "/fsal/fuse/nasgw-fuse"}
    lab = node = None
    rc = 1
    report = {}
    try:
        smblab.install_module(b)
        lab = nfslab.Lab(clients=1)
        user = smblab.User("nasgw-tort-%d" % os.getpid())
        srv = smblab.Smbd(lab, [], users=[user])
        shares_file = os.path.join(srv.dir, "nasgw-shares.conf")
        srv.global_options["include"] = shares_file
        srv.make_dirs()
        node = nasgwlab.Node(bins=bins, luns=2, size="2G", tag="tort", metrics=True)
        node.start("[smb]\nshares_file = %s\n" % nasgwlab.toml_str(shares_file))
        node.format()
        node.mount()
        srv.write_config()
        srv.add_users()
        os.makedirs(os.path.join(node.mount_path, "t"))
        os.chown(os.path.join(node.mount_path, "t"), user.uid, user.gid)
        # nasgwd stacks [smb] vfs_objects (by default STACK) above vfs_nasgw.
        node.cli("share", "add", "vol1/t", "--name", "nas")
        with open(shares_file) as f:
            if "vfs objects = %s nasgw" % STACK not in f.read():
                raise RuntimeError("the nasgw share does not stack %s" % STACK)
        xfs = lab.make_xfs("2G")
        os.makedirs(xfs + "/t")
        os.chown(xfs + "/t", user.uid, user.gid)
        srv.shares = [smblab.path_share("stock", xfs + "/t", **{"vfs objects": STACK})]
        srv.start()
        c = lab.client(1)
        rows = []
        ops_by_suite = {}  # nasgwd's requests by operation while each suite ran on the nasgw share

        def run_both(name, label, one):
            """Runs one(share) -> {test: outcome} on both shares; records
            and prints the counts and what passes on stock only."""
            per = {}
            for share in ("nas", "stock"):
                before = node_ops(node) if share == "nas" else None
                t0 = time.monotonic()
                per[share] = (one(share), time.monotonic() - t0)
                if before is not None:
                    ops_by_suite[name] = {op: n - before.get(op, 0) for op, n in node_ops(node).items()
                                          if n - before.get(op, 0) > 0}
            report[name] = {share: r for share, (r, _) in per.items()}
            counts = {}
            for share, (r, secs) in per.items():
                vals = list(r.values())
                counts[share] = "%3d ok %3d failed %2d skipped %5.0f s" % (
                    vals.count("success"), vals.count("failure"), vals.count("skip"), secs)
            worse = sorted(t for t, o in per["stock"][0].items()
                           if o == "success" and per["nas"][0].get(t) != "success")
            rows.append((name, counts, worse))
            print("%-22s nasgw: %s | stock: %s" % (label, counts["nas"], counts["stock"]), flush=True)
            top = sorted(ops_by_suite.get(name, {}).items(), key=lambda kv: -kv[1])[:6]
            print("%-22s nasgwd requests: %s" % ("", ", ".join("%s %d" % kv for kv in top)), flush=True)

        def torture(suite):
            return lambda share: smblab.smbtorture(c, srv, user, share, [suite], timeout=SUITE_TIMEOUT_S)

        for suite in a.suites.split(","):
            run_both(suite, suite, torture(suite))
        if a.pike:
            run_both("pike", "pike-smb2", lambda share: pike(c, srv, user, share))
        regressions = [(s, t) for s, _, worse in rows for t in worse]
        print("\npass on stock, not on nasgw: %d" % len(regressions))
        unexplained = 0
        for s, t in regressions:
            why = reason(t if t.startswith(s + ".") else "%s.%s" % (s, t))
            unexplained += why is None
            print("  %s.%s: %s" % (s, t, why or "NO REASON WRITTEN"))
        better = [(s, t) for s in report for t, o in report[s]["nas"].items()
                  if o == "success" and report[s]["stock"].get(t) != "success"]
        print("pass on nasgw, not on stock: %d%s" % (len(better), "".join("\n  %s.%s" % x for x in better)))
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"results": report, "nasgwd_requests": ops_by_suite}, f, indent=1, sort_keys=True)
        rc = 1 if unexplained else 0
    except Exception:
        traceback.print_exc()
    finally:
        if lab is not None:
            lab.close()
        if node is not None:
            node.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
