#!/usr/bin/env python3
"""SMB through the real path: tgtd LUNs -> nasgwd -> Debian's smbd with
vfs_nasgw in the lab's server namespace -> smbclient and the smbprotocol
client in a client namespace. What SMB does is checked through a second
head too (nasgw-fuse on the same nasgwd): owners, bytes.

    python3 tests/integration/smb_lab.py --build build/debug [--only namespace data ...]

Parts: acl (an NT ACL set over SMB is nasgwd's POSIX ACL: it grants over
SMB and FUSE), cross (SMB and NFS through ganesha + FSAL_NASGW on the same nasgwd:
bytes both ways, byte-range locks across the heads), shares (made and removed with the CLI while smbd runs: served at
once, valid users, read-only, the rules), namespace (operations and their errors, ownership, permissions),
data (random offsets against a model, read back through FUSE), case
(case-insensitive lookups, case-preserving creates), restart (a held
handle across a nasgwd restart and a SIGKILL; DOS attributes and an
alternate data stream survive),
unlinked (a file removed over FUSE while SMB holds it open),
sharemodes (an SMB share mode refuses an NFSv4 OPEN and the reverse, both
arbitrated by nasgwd), leases (an NFS write breaks an SMB lease, and waits
for the client's acknowledgement and write-back, before it proceeds),
delegations (an SMB open recalls an NFSv4 delegation, and waits for its
return, before it proceeds), durable (a durable handle survives a pulled
cable: reconnected with its data, lease and share mode), sparse (a hole
punched over SMB is freed, found and zeros; smbtorture's sparse tests),
listing (an `ls` of 1,000 files costs a bounded number of nasgwd requests,
counted by operation), snapshots (Previous Versions: snapshots named with
a UTC time are listed as @GMT labels, an @GMT path or TWrp context reads
the file as it was, read-only; snapshots taken and deleted while a client
stays connected).
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lab"))
import nasgwlab  # noqa: E402
import nfslab  # noqa: E402
import smblab  # noqa: E402

check = nasgwlab.Checks()
failures = []


def alice_dir(ctx):
    return os.path.join(ctx["node"].mount_path, "alice")


# ---- parts

def test_namespace(ctx):
    c, srv, alice, bob = ctx["client"], ctx["smbd"], ctx["alice"], ctx["bob"]
    local = os.path.join(ctx["lab"].dir, "hello.txt")
    with open(local, "w") as f:
        f.write("hello over SMB\n")
    p = smblab.smbclient(c, srv, "alice", alice, "mkdir d1; mkdir d1/sub; put %s d1/h.txt; ls d1/*" % local)
    check("mkdir, put and ls work", p.returncode == 0 and "h.txt" in p.stdout and "sub" in p.stdout,
          p.stdout + p.stderr)
    st = os.stat(os.path.join(alice_dir(ctx), "d1", "h.txt"))
    check("a file created over SMB belongs to the SMB user (seen through FUSE)",
          st.st_uid == alice.uid and st.st_size == 15, "uid %d size %d" % (st.st_uid, st.st_size))
    p = smblab.smbclient(c, srv, "alice", alice, "rmdir d1", check=False)
    check("rmdir of a non-empty directory: DIRECTORY_NOT_EMPTY",
          "NT_STATUS_DIRECTORY_NOT_EMPTY" in smblab.statuses(p), p.stdout)
    p = smblab.smbclient(c, srv, "alice", alice, "mkdir d1", check=False)
    check("mkdir of an existing name: OBJECT_NAME_COLLISION",
          "NT_STATUS_OBJECT_NAME_COLLISION" in smblab.statuses(p), p.stdout)
    p = smblab.smbclient(c, srv, "alice", alice, "get d1/nothere.txt %s/x" % ctx["lab"].dir, check=False)
    check("get of a missing file: OBJECT_NAME_NOT_FOUND",
          "NT_STATUS_OBJECT_NAME_NOT_FOUND" in smblab.statuses(p), p.stdout)
    p = smblab.smbclient(c, srv, "alice", alice, "put %s d1/other.txt; rename d1/other.txt d1/h.txt" % local,
                         check=False)
    check("rename onto an existing file: OBJECT_NAME_COLLISION",
          "NT_STATUS_OBJECT_NAME_COLLISION" in smblab.statuses(p), p.stdout)
    p = smblab.smbclient(c, srv, "alice", alice, "rename d1/other.txt d1/sub/moved.txt; ls d1/sub/*")
    check("rename into another directory", "moved.txt" in p.stdout and
          os.path.exists(os.path.join(alice_dir(ctx), "d1", "sub", "moved.txt")), p.stdout)
    p = smblab.smbclient(c, srv, "alice", bob, "put %s d1/bob.txt" % local, check=False)
    check("another user cannot write in alice's 0755 directory: ACCESS_DENIED",
          "NT_STATUS_ACCESS_DENIED" in smblab.statuses(p) and
          not os.path.exists(os.path.join(alice_dir(ctx), "d1", "bob.txt")), p.stdout)
    p = smblab.smbclient(c, srv, "alice", bob, "get d1/h.txt %s/bob-read" % ctx["lab"].dir, check=False)
    check("... but may read alice's 0644 file", p.returncode == 0, p.stdout + p.stderr)
    p = smblab.smbclient(c, srv, "alice", alice,
                         "del d1/h.txt; del d1/sub/moved.txt; rmdir d1/sub; rmdir d1; ls", check=False)
    # (listed, not stat()ed: FUSE may still have the name in its cache)
    check("del and rmdir empty the tree", p.returncode == 0 and "d1" not in os.listdir(alice_dir(ctx)),
          p.stdout + p.stderr)
    # A symbolic link made through FUSE: Samba follows it within the share
    # and refuses one that leads out.
    os.makedirs(os.path.join(alice_dir(ctx), "real"), exist_ok=True)
    with open(os.path.join(alice_dir(ctx), "real", "f.txt"), "w") as f:
        f.write("through a link\n")
    os.symlink("real", os.path.join(alice_dir(ctx), "link"))
    os.symlink("/etc", os.path.join(alice_dir(ctx), "outside"))
    p = smblab.smbclient(c, srv, "alice", alice, "get link/f.txt %s/via-link" % ctx["lab"].dir, check=False)
    got = open(os.path.join(ctx["lab"].dir, "via-link")).read() if p.returncode == 0 else ""
    check("a relative link inside the share is followed", got == "through a link\n", p.stdout + p.stderr)
    p = smblab.smbclient(c, srv, "alice", alice, "get outside/hostname %s/escaped" % ctx["lab"].dir, check=False)
    check("a link out of the share is not followed",
          p.returncode != 0 and not os.path.exists(os.path.join(ctx["lab"].dir, "escaped")), p.stdout)


def test_data(ctx):
    c, srv, alice = ctx["client"], ctx["smbd"], ctx["alice"]
    rng = random.Random(1126)
    size = 6 << 20
    ops = []
    for _ in range(120):
        n = rng.choice([1, 511, 4096, 65536, 65537, 1 << 20, 3 << 20])
        off = rng.randrange(0, size - n)
        ops.append((off, n, rng.randrange(1 << 30)))
    model = bytearray(size)
    for off, n, seed in ops:
        model[off:off + n] = random.Random(seed).randbytes(n)
    code = """
import random
path = unc('alice', 'data.bin')
with smbclient.open_file(path, mode='wb') as f:
    f.truncate(ARGS['size'])
with smbclient.open_file(path, mode='r+b', buffering=0) as f:
    for off, n, seed in ARGS['ops']:
        f.seek(off)
        b = random.Random(seed).randbytes(n)
        assert f.write(b) == n
    f.flush()
import hashlib
h = hashlib.sha256()
with smbclient.open_file(path, mode='rb') as f:
    while True:
        b = f.read(1 << 20)
        if not b:
            break
        h.update(b)
# random-offset reads, each against the model's bytes by hash
with smbclient.open_file(path, mode='rb', buffering=0) as f:
    reads = []
    for off, n in ARGS['reads']:
        f.seek(off)
        reads.append(hashlib.sha256(f.read(n)).hexdigest())
out({'sha': h.hexdigest(), 'reads': reads})
"""
    import hashlib
    reads = [(rng.randrange(0, size - 70000), rng.choice([1, 100, 4096, 70000])) for _ in range(60)]
    r = smblab.smbpy(c, srv, alice, code, {"size": size, "ops": ops, "reads": reads}, timeout=600)[0]
    check("what SMB reads back is what it wrote (sha256 of %d MiB after %d random writes)" % (size >> 20,
                                                                                           len(ops)),
          r["sha"] == hashlib.sha256(model).hexdigest())
    want = [hashlib.sha256(bytes(model[o:o + n])).hexdigest() for o, n in reads]
    bad = [i for i, (a, b) in enumerate(zip(r["reads"], want)) if a != b]
    check("60 reads at random offsets match the model", not bad, "mismatch at %s" % bad[:5])
    with open(os.path.join(alice_dir(ctx), "data.bin"), "rb") as f:
        through_fuse = f.read()
    check("FUSE reads the same bytes SMB wrote", through_fuse == bytes(model),
          "size %d vs %d" % (len(through_fuse), len(model)))
    # And the other way: written through FUSE, read over SMB.
    blob = random.Random(7).randbytes(3 << 20)
    with open(os.path.join(alice_dir(ctx), "from-fuse.bin"), "wb") as f:
        f.write(blob)
    out = os.path.join(ctx["lab"].dir, "from-fuse.bin")
    smblab.smbclient(c, srv, "alice", alice, "get from-fuse.bin %s" % out)
    check("SMB reads the same bytes FUSE wrote", open(out, "rb").read() == blob)


def test_case(ctx):
    c, srv, alice = ctx["client"], ctx["smbd"], ctx["alice"]
    local = os.path.join(ctx["lab"].dir, "case.txt")
    with open(local, "w") as f:
        f.write("mixed case\n")
    smblab.smbclient(c, srv, "alice", alice, "mkdir CaseDir; put %s CaseDir/MixedCase.TXT" % local)
    names = os.listdir(alice_dir(ctx) + "/CaseDir")
    check("a create keeps the name's case", names == ["MixedCase.TXT"], str(names))
    out = os.path.join(ctx["lab"].dir, "case-back")
    p = smblab.smbclient(c, srv, "alice", alice, "get casedir/mixedcase.txt %s" % out, check=False)
    check("a lookup in another case finds the file",
          p.returncode == 0 and open(out).read() == "mixed case\n", p.stdout + p.stderr)
    p = smblab.smbclient(c, srv, "alice", alice, "put %s CASEDIR/MIXEDCASE.TXT; ls casedir/*" % local)
    names = os.listdir(alice_dir(ctx) + "/CaseDir")
    check("writing to another case's name overwrites the file, adds no second one", names == ["MixedCase.TXT"],
          str(names))
    # Non-ASCII: Windows maps case with Unicode's simple upper-case mapping.
    with open(os.path.join(alice_dir(ctx), "CaseDir", "ärger.txt"), "w") as f:
        f.write("umlaut\n")
    out2 = os.path.join(ctx["lab"].dir, "umlaut-back")
    p = smblab.smbclient(c, srv, "alice", alice, "get CASEDIR/ÄRGER.TXT %s" % out2, check=False)
    check("ÄRGER.TXT finds ärger.txt", p.returncode == 0 and open(out2).read() == "umlaut\n", p.stdout + p.stderr)
    p = smblab.smbclient(c, srv, "alice", alice, "get casedir/ΣΟΦΙΑ.txt %s/x" % ctx["lab"].dir, check=False)
    check("a name in no case is not found", "NT_STATUS_OBJECT_NAME_NOT_FOUND" in smblab.statuses(p), p.stdout)


def test_acl(ctx):
    """An NT ACL set over SMB is a POSIX ACL in nasgwd: it grants on SMB and
    on every other head (FUSE here), and getfacl shows it."""
    c, srv, alice, bob = ctx["client"], ctx["smbd"], ctx["alice"], ctx["bob"]
    path = os.path.join(alice_dir(ctx), "secret.txt")
    local = os.path.join(ctx["lab"].dir, "secret.txt")
    with open(local, "w") as f:
        f.write("for alice, and bob once allowed\n")
    smblab.smbclient(c, srv, "alice", alice, "put %s secret.txt" % local)
    os.chmod(path, 0o600)
    back = os.path.join(ctx["lab"].dir, "secret-bob")
    p = smblab.smbclient(c, srv, "alice", bob, "get secret.txt %s" % back, check=False)
    check("bob may not read alice's 0600 file", "NT_STATUS_ACCESS_DENIED" in smblab.statuses(p), p.stdout)
    acl = c.run(["smbcacls", "//%s/alice" % srv.addr, "secret.txt", "-U", alice.cred(), "-m", "SMB3",
                 "--add", "ACL:%s:ALLOWED/0x0/READ" % bob.name], check=False)
    check("alice grants bob READ with smbcacls", acl.returncode == 0, acl.stdout + acl.stderr)
    p = smblab.smbclient(c, srv, "alice", bob, "get secret.txt %s" % back, check=False)
    check("then bob reads it over SMB", p.returncode == 0 and open(back).read().startswith("for alice"),
          p.stdout + p.stderr)
    facl = subprocess.run(["getfacl", "-n", "-p", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # (smbcacls' READ is read and execute: r-x)
    check("the grant is a POSIX ACL entry in nasgwd (getfacl through FUSE: user:%d:r-x)" % bob.uid,
          re.search(r"^user:%d:r-x$" % bob.uid, facl.stdout, re.M) is not None, facl.stdout + facl.stderr)
    got = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(open(sys.argv[1]).read())", path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                         preexec_fn=lambda: (os.setgroups([]), os.setgid(bob.gid), os.setuid(bob.uid)))
    check("and FUSE lets bob read it too", got.returncode == 0 and "for alice" in got.stdout, got.stderr)


def test_restart(ctx):
    c, srv, alice, bob, node = ctx["client"], ctx["smbd"], ctx["alice"], ctx["bob"], ctx["node"]
    smblab.smbclient(c, srv, "alice", alice, "put %s attrs.txt" % os.path.join(HERE, "smb_lab.py"))
    # An alternate data stream (streams_xattr above vfs_nasgw keeps it in
    # nasgwd's xattrs), then the hidden attribute (in that order: a stream
    # opened to overwrite resets the file's attributes, stock Samba too).
    smblab.smbpy(c, srv, alice, "with smbclient.open_file(unc('alice', 'attrs.txt:meta'), mode='wb') as f:\n"
                                "    f.write(b'stream data')\n")
    smblab.smbclient(c, srv, "alice", alice, "setmode attrs.txt +h")
    # An NT ACL entry for bob (acl_xattr keeps the NT ACL in nasgwd's xattrs).
    acl = c.run(["smbcacls", "//%s/alice" % srv.addr, "attrs.txt", "-U", alice.cred(), "-m", "SMB3",
                 "--add", "ACL:%s:ALLOWED/0x0/READ" % bob.name], check=False)
    check("smbcacls adds an ACE for bob", acl.returncode == 0, acl.stdout + acl.stderr)
    # One SMB session holds a file open across a nasgwd restart and then a
    # SIGKILL: the client library takes the session back; the handle works.
    code = """
import sys
path = unc('alice', 'held.bin')
f = smbclient.open_file(path, mode='w+b', buffering=0)
f.write(b'A' * 70000)
print('READY', flush=True)
for step in ('restart', 'kill'):
    line = sys.stdin.readline().strip()
    assert line == step, line
    f.seek(70000)
    f.write(step.encode() * 1000)
    f.seek(0)
    data = f.read()
    print('LEN', len(data), flush=True)
f.close()
with smbclient.open_file(path, mode='rb') as g:
    out(len(g.read()))
"""
    p = smblab.smbpy_popen(c, srv, alice, code)
    try:
        line = p.stdout.readline()
        check("the handle is open", line.strip() == "READY", line + smblab.stderr_of(p) if not line else line)
        node.stop()
        node.start()
        p.stdin.write("restart\n")
        p.stdin.flush()
        line = p.stdout.readline().split()
        check("after a nasgwd restart the held handle writes and reads",
              line == ["LEN", str(70000 + 7000)], str(line))
        node.kill()   # nasgwd and nasgw-fuse
        node.start()
        node.mount()
        p.stdin.write("kill\n")
        p.stdin.flush()
        line = p.stdout.readline().split()
        check("after a nasgwd SIGKILL the held handle writes and reads", line == ["LEN", str(70000 + 7000)],
              str(line))
        rest, err = p.communicate(timeout=120)
        check("the file reads back whole after both", "NFSLAB-OUT 77000" in rest, rest + err)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    r = smblab.smbpy(c, srv, alice, "with smbclient.open_file(unc('alice', 'attrs.txt:meta'), mode='rb') as f:\n"
                                    "    out(f.read().decode())\n")
    check("an alternate data stream written before the restarts reads back", r == ["stream data"], str(r))
    acl = c.run(["smbcacls", "//%s/alice" % srv.addr, "attrs.txt", "-U", alice.cred(), "-m", "SMB3"], check=False)
    check("the NT ACL's entry for bob is still there after the restarts",
          acl.returncode == 0 and re.search(r"^ACL:[^:]*%s:ALLOWED/0x0/READ$" % re.escape(bob.name), acl.stdout, re.M),
          acl.stdout + acl.stderr)
    p = smblab.smbclient(c, srv, "alice", alice, "allinfo attrs.txt")
    attrs = re.search(r"^attributes: ([A-Z]*) ", p.stdout, re.M)
    check("DOS attributes set before the restarts are still there (hidden)", attrs and "H" in attrs.group(1),
          p.stdout + p.stderr)


def test_unlinked(ctx):
    """A file removed through another head while SMB holds it open stays
    readable through the handle, as POSIX keeps it."""
    c, srv, alice = ctx["client"], ctx["smbd"], ctx["alice"]
    path = os.path.join(alice_dir(ctx), "doomed.txt")
    with open(path, "w") as f:
        f.write("still here\n")
    code = """
import sys
f = smbclient.open_file(unc('alice', 'doomed.txt'), mode='rb', buffering=0,
                        share_access='rwd')
print('OPEN', flush=True)
sys.stdin.readline()
f.seek(0)
print('DATA', f.read().decode().strip(), flush=True)
f.close()
"""
    p = smblab.smbpy_popen(c, srv, alice, code)
    try:
        line = p.stdout.readline()
        check("SMB holds the file open", line.strip() == "OPEN", line)
        os.unlink(path)
        p.stdin.write("go\n")
        p.stdin.flush()
        rest, err = p.communicate(timeout=60)
        check("the open handle still reads the removed file", "DATA still here" in rest, rest + err)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_shares(ctx):
    """Shares made and removed with the CLI, served by the running smbd."""
    c, srv, alice, bob, node = ctx["client"], ctx["smbd"], ctx["alice"], ctx["bob"], ctx["node"]
    listed = node.cli("share", "list", json_out=True)["shares"]
    check("share list shows the share made before smbd started",
          [(x["name"], x["volume"], x["path"], x["comment"]) for x in listed] ==
          [("alice", "vol1", "/alice", "alice's files")], str(listed))
    p = smblab.smbclient(c, srv, "ALICE", alice, "ls", check=False)
    check("share names are case-insensitive", p.returncode == 0, p.stdout + p.stderr)

    offset = srv.log_size()
    node.cli("share", "add", "vol1", "--name", "Whole", "--read-only", "--valid-users", bob.name, "--encrypt")
    srv.wait_log(offset, "parent: Reloading services after SIGHUP")
    p = smblab.smbclient(c, srv, "Whole", bob, "ls", check=False)
    check("a share added while smbd runs is served at once (no restart)", p.returncode == 0 and "alice" in p.stdout,
          p.stdout + p.stderr)
    p = smblab.smbclient(c, srv, "Whole", alice, "ls", check=False)
    check("valid users keeps others out", "NT_STATUS_ACCESS_DENIED" in smblab.statuses(p), p.stdout + p.stderr)
    local = os.path.join(ctx["lab"].dir, "ro.txt")
    with open(local, "w") as f:
        f.write("x")
    p = smblab.smbclient(c, srv, "Whole", bob, "put %s ro.txt" % local, check=False)
    check("a read-only share refuses writes",
          p.returncode != 0 and "ro.txt" not in os.listdir(node.mount_path), p.stdout + p.stderr)
    r = node.cli("share", "add", "vol1", "--name", "WHOLE", check=False)
    check("a name in another case is taken", r.returncode != 0 and "taken" in r.stderr, r.stderr)
    for bad in (["--name", "homes"], ["--name", "a b"], ["--name", "x", "--comment", "50%"],
                ["--name", "x", "--valid-users", "dom\\user"]):
        r = node.cli("share", "add", "vol1", *bad, check=False)
        check("share add %s is refused with a reason" % " ".join(bad), r.returncode != 0 and r.stderr.strip(), r.stderr)
    r = node.cli("share", "add", "vol1/nothere", "--name", "x", check=False)
    check("a share of a missing directory is refused", r.returncode != 0 and "nothere" in r.stderr, r.stderr)
    r = node.cli("volume", "delete", "vol1", "--force", check=False)
    check("a shared (and exported) volume cannot be deleted; the refusal names both",
          r.returncode != 0 and "'alice'" in r.stderr and "export 1" in r.stderr, r.stderr)

    offset = srv.log_size()
    node.cli("share", "remove", "whole")
    srv.wait_log(offset, "parent: Reloading services after SIGHUP")
    p = smblab.smbclient(c, srv, "Whole", bob, "ls", check=False)
    check("a removed share is no longer served", "NT_STATUS_BAD_NETWORK_NAME" in smblab.statuses(p),
          p.stdout + p.stderr)
    with open(srv.dir + "/nasgw-shares.conf") as f:
        text = f.read()
    check("the shares file holds the remaining share only", "[alice]" in text and "[Whole]" not in text, text)


def test_cross(ctx):
    """SMB and NFS on the same files: bytes both ways, and byte-range locks
    arbitrated by nasgwd across the two heads (NFSv4 LOCK through ganesha +
    FSAL_NASGW; SMB2 LOCK through smbd + vfs_nasgw)."""
    c, srv, alice, lab = ctx["client"], ctx["smbd"], ctx["alice"], ctx["lab"]
    blob = random.Random(11).randbytes((1 << 20) + 4321)
    local = os.path.join(lab.dir, "cross-smb.bin")
    with open(local, "wb") as f:
        f.write(blob)
    smblab.smbclient(c, srv, "alice", alice, "put %s cross-smb.bin" % local)
    check("a file written over SMB reads back exact over NFSv3", c.nfs_cat("vol1/alice/cross-smb.bin", 3) == blob)
    check("... and over NFSv4", c.nfs_cat("vol1/alice/cross-smb.bin", 4) == blob)
    blob2 = random.Random(12).randbytes((1 << 20) + 17)
    local2 = os.path.join(lab.dir, "cross-nfs.bin")
    with open(local2, "wb") as f:
        f.write(blob2)
    c.nfs_put(local2, "vol1/alice/cross-nfs.bin", 3)
    # nfs-cp (as root) creates files 0660: let alice read it.
    os.chmod(os.path.join(alice_dir(ctx), "cross-nfs.bin"), 0o644)
    back = local2 + ".back"
    smblab.smbclient(c, srv, "alice", alice, "get cross-nfs.bin %s" % back)
    check("a file written over NFS reads back exact over SMB", open(back, "rb").read() == blob2)

    tool, url = ctx["lock_tool"], c.url("vol1/alice/lockme.bin", 4)

    def nfs_lock(typ, start, length, hold=False):
        argv = [tool, "--url", url, "--op", "lock", "--type", typ, "--start", str(start), "--len", str(length)]
        if hold:
            return c.popen(argv + ["--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        return c.run(argv, check=False, timeout=60).stdout.strip()

    code = """
import sys
f = smbclient.open_file(unc('alice', 'lockme.bin'), mode='w+b', buffering=0, share_access='rwd')
f.write(b'x' * 1000)
smb_lock(f, 0, 100, LOCK_EXCLUSIVE | LOCK_FAIL_IMMEDIATELY)
print('LOCKED', flush=True)
for _ in range(2):
    sys.stdin.readline()
    try:
        smb_lock(f, 205, 1, LOCK_EXCLUSIVE | LOCK_FAIL_IMMEDIATELY)
        print('GRANTED', flush=True)
    except smbprotocol.exceptions.SMBResponseException as e:
        print('REFUSED', status(e), flush=True)
smb_lock(f, 0, 100, LOCK_UNLOCK)
print('UNLOCKED', flush=True)
sys.stdin.readline()
f.close()
"""
    p = smblab.smbpy_popen(c, srv, alice, code)
    holder = None
    try:
        line = p.stdout.readline().strip()
        check("SMB holds an exclusive lock on [0,100)", line == "LOCKED", line + smblab.stderr_of(p) if not line else line)
        r = nfs_lock("write", 50, 10)
        check("an NFSv4 write lock on [50,60) is denied by the SMB lock", r.startswith("denied"), r)
        holder = nfs_lock("write", 200, 10, hold=True)
        line = holder.stdout.readline().strip()
        check("NFSv4 holds a write lock on [200,210)", line == "granted", line)
        p.stdin.write("next\n")
        p.stdin.flush()
        line = p.stdout.readline().split()
        # Samba answers a refused POSIX lock as a conflict.
        check("an SMB lock on [205,206) is refused by the NFS lock",
              line[:1] == ["REFUSED"] and line[1:] in (["0xc0000054"], ["0xc0000055"]), str(line))
        holder.stdin.close()
        holder.wait(timeout=60)
        p.stdin.write("next\n")
        p.stdin.flush()
        line = p.stdout.readline().split()
        check("once NFS releases it, the SMB lock is granted", line == ["GRANTED"], str(line))
        line = p.stdout.readline().strip()
        check("SMB unlocks [0,100)", line == "UNLOCKED", line)
        r = nfs_lock("write", 50, 10)
        check("then the NFSv4 lock on [50,60) is granted", r == "granted", r)
        p.stdin.write("done\n")
        p.stdin.flush()
        p.wait(timeout=60)
    finally:
        smblab.kill_all(p, holder)


def test_sharemodes(ctx):
    """Share reservations across the heads, both arbitrated by nasgwd: an
    SMB open that denies writers refuses an NFSv4 OPEN for write (and not
    one for read), an NFSv4 OPEN that denies writers refuses an SMB open for
    write (and not one for read); released at close. NFSv4 OPENs with a
    deny mode refuse each other too."""
    c, srv, alice = ctx["client"], ctx["smbd"], ctx["alice"]
    path = os.path.join(alice_dir(ctx), "shared.bin")
    with open(path, "wb") as f:
        f.write(b"s" * 4096)
    os.chown(path, alice.uid, alice.gid)
    os.chmod(path, 0o666)
    tool, url = ctx["lock_tool"], c.url("vol1/alice/shared.bin", 4)
    ok_statuses = ("0xc0000043",)  # STATUS_SHARING_VIOLATION

    def nfs_open(access, deny, hold=False):
        argv = [tool, "--url", url, "--op", "open", "--access", access, "--deny", deny]
        if hold:
            return c.popen(argv + ["--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        return c.run(argv, check=False, timeout=60).stdout.strip()

    def release(proc):
        proc.stdin.close()
        proc.wait(timeout=60)
        return proc.returncode

    # SMB first: read access, sharing read only (denies write and delete).
    code = """
import sys
f = smbclient.open_file(unc('alice', 'shared.bin'), mode='rb', share_access='r')
print('OPEN', flush=True)
sys.stdin.readline()
f.close()
print('CLOSED', flush=True)
sys.stdin.readline()
"""
    p = smblab.smbpy_popen(c, srv, alice, code)
    holders = [p]
    try:
        line = smblab.readline(p)
        check("SMB opens for read, sharing read only", line == "OPEN", line or smblab.stderr_of(p))
        r = nfs_open("write", "none")
        check("an NFSv4 OPEN for write is refused by the SMB share mode (NFS4ERR_SHARE_DENIED)",
              r == "denied", r)
        r = nfs_open("both", "none")
        check("... and one for read and write", r == "denied", r)
        r = nfs_open("read", "none")
        check("an NFSv4 OPEN for read is granted beside it", r == "granted", r)
        r = nfs_open("read", "read")
        check("an NFSv4 OPEN that denies readers is refused (SMB reads)", r == "denied", r)
        p.stdin.write("close\n")
        p.stdin.flush()
        line = smblab.readline(p)
        check("SMB closes", line == "CLOSED", line)
        r = nfs_open("write", "none")
        check("after the SMB close, the NFSv4 OPEN for write is granted", r == "granted", r)
        p.stdin.write("done\n")
        p.stdin.flush()
        p.wait(timeout=60)

        # NFSv4 first: read access, denying writers.
        h = nfs_open("read", "write", hold=True)
        holders.append(h)
        line = smblab.readline(h)
        check("NFSv4 opens for read, denying write", line == "granted", line or smblab.stderr_of(h))
        out = smblab.smbpy(c, srv, alice, """
for mode, share in (('r+b', 'rwd'), ('ab', 'rwd'), ('rb', 'rwd'), ('rb', 'r')):
    try:
        f = smbclient.open_file(unc('alice', 'shared.bin'), mode=mode, share_access=share)
        f.close()
        out([mode, share, 'OK'])
    except Exception as e:
        out([mode, share, status(e)])
""")
        got = {(m, sh): st for m, sh, st in out}
        check("an SMB open for write is refused by the NFSv4 deny (STATUS_SHARING_VIOLATION)",
              got.get(("r+b", "rwd")) in ok_statuses, str(got))
        check("... and one for append", got.get(("ab", "rwd")) in ok_statuses, str(got))
        check("an SMB open for read sharing everything is granted", got.get(("rb", "rwd")) == "OK", str(got))
        check("an SMB open for read sharing read only is granted (NFS only reads)",
              got.get(("rb", "r")) == "OK", str(got))
        r = nfs_open("write", "none")
        check("an NFSv4 OPEN for write from another client is refused by the NFSv4 deny", r == "denied", r)
        check("the NFSv4 holder closes cleanly", release(h) == 0, smblab.stderr_of(h))
        out = smblab.smbpy(c, srv, alice, """
with smbclient.open_file(unc('alice', 'shared.bin'), mode='r+b', share_access='rwd') as f:
    f.write(b'after')
out('OK')
""")
        check("after the NFSv4 CLOSE, the SMB open for write is granted", out == ["OK"], str(out))
    finally:
        smblab.kill_all(*holders)


def test_leases(ctx):
    """An NFS write to a file an SMB client holds a read-write-handle lease
    on: nasgwd recalls the lease, Samba breaks it (the client is told), and
    the NFS write waits (NFS3ERR_JUKEBOX, retried) until the client has
    written back what it cached and acknowledged; so the NFS bytes land
    after the SMB client's write-back, not under it."""
    c, srv, alice, lab = ctx["client"], ctx["smbd"], ctx["alice"], ctx["lab"]
    path = os.path.join(alice_dir(ctx), "leased.bin")
    with open(path, "wb") as f:
        f.write(b"o" * 64)
    os.chown(path, alice.uid, alice.gid)
    os.chmod(path, 0o666)
    code = """
h = chan.create(tree, 'leased.bin', share=SHARE_ALL, disposition=smb2.FILE_OPEN,
                oplock_level=smb2.SMB2_OPLOCK_LEVEL_LEASE, lease_key=array.array('B', range(16)),
                lease_state=RWH).result()
print('LEASE', int(h.lease.lease_state), flush=True)
notify = h.lease.future.result(timeout=120)
print('BREAK', int(notify[0].new_lease_state), flush=True)
sys.stdin.readline()
# the write-back of what the client cached under its write lease
chan.write(h, 0, b'SMB-FLUSH')
ack = chan.lease_break_acknowledgement(tree, notify)
ack.lease_state = notify[0].new_lease_state
chan.connection.transceive(ack.parent.parent)
print('ACKED', flush=True)
sys.stdin.readline()
chan.close(h)
print('CLOSED', flush=True)
"""
    holder = smblab.pike_popen(c, srv, alice, "alice", code)
    writer = None
    try:
        line = smblab.readline(holder)
        check("the SMB client holds a read-write-handle lease", line == "LEASE 7",
              line or smblab.stderr_of(holder))
        writer = c.popen([ctx["lock_tool"], "--url", c.url("vol1/alice/leased.bin", 3), "--op", "write",
                          "--start", "0", "--data", "NFS!", "--timeout-ms", "90000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = smblab.readline(holder)
        check("an NFSv3 write makes Samba break the lease to none", line == "BREAK 0", line)
        check("the NFS write has not completed while the break is unacknowledged", writer.poll() is None,
              writer.stdout.read() if writer.poll() is not None else "")
        holder.stdin.write("ack\n")
        holder.stdin.flush()
        line = smblab.readline(holder)
        check("the SMB client writes back and acknowledges", line == "ACKED", line or smblab.stderr_of(holder))
        out, err = writer.communicate(timeout=120)
        m = re.match(r"written retries=(\d+)", out.strip())
        check("then the NFS write completes, after being told to wait at least once",
              m is not None and int(m.group(1)) >= 1,
              out + err + ("" if m else "\n--- ganesha log tail\n" + lab.server.log_tail(3000)))
        with open(path, "rb") as f:
            head = f.read(9)
        check("the NFS bytes landed after the SMB write-back (NFS!FLUSH)", head == b"NFS!FLUSH", repr(head))
        holder.stdin.write("close\n")
        holder.stdin.flush()
        line = smblab.readline(holder)
        check("the SMB client closes", line == "CLOSED", line or smblab.stderr_of(holder))
        holder.wait(timeout=60)
        # No lease now: an NFS write goes straight through.
        r = c.run([ctx["lock_tool"], "--url", c.url("vol1/alice/leased.bin", 3), "--op", "write", "--start", "4",
                   "--data", "++"], check=False, timeout=60).stdout.strip()
        check("without a lease, the NFS write is not held up", r == "written retries=0", r)
    finally:
        smblab.kill_all(holder, writer)


LIST_OPS = ("lookup", "getattr", "getxattr", "listxattr", "readdir", "open", "release", "access", "findcaseless")


def test_listing(ctx):
    """What a directory listing over SMB costs in nasgwd requests: an `ls`
    of 1,000 files, each with DOS attributes set over SMB, counted by
    operation with nasgwd's metrics. Samba reads every entry's DOS
    attributes; the listing's READDIR batches carry them (and the
    attributes), so the cost per entry stays under a bound."""
    c, srv, alice, node = ctx["client"], ctx["smbd"], ctx["alice"], ctx["node"]
    n = 1000
    top = os.path.join(alice_dir(ctx), "many")
    os.mkdir(top)
    os.chown(top, alice.uid, alice.gid)
    for i in range(n):
        p = os.path.join(top, "f%04d" % i)
        with open(p, "wb"):
            pass
        os.chown(p, alice.uid, alice.gid)
    # DOS attributes on every file, set by Samba (user.DOSATTRIB).
    smblab.smbclient(c, srv, "alice", alice, "cd many; " + "; ".join("setmode f%04d +a" % i for i in range(n)),
                     timeout=600)
    with_dos = sum(1 for i in range(n) if "user.DOSATTRIB" in os.listxattr(os.path.join(top, "f%04d" % i)))
    check("Samba stored DOS attributes on the files (%d of %d)" % (with_dos, n), with_dos == n)
    before = {op: node.metric("nasgw_volume_ops_total", op=op) for op in LIST_OPS}
    p = smblab.smbclient(c, srv, "alice", alice, "cd many; ls", timeout=600)
    after = {op: node.metric("nasgw_volume_ops_total", op=op) for op in LIST_OPS}
    ops = {op: int(after[op] - before[op]) for op in LIST_OPS if after[op] - before[op]}
    listed = sum(1 for line in p.stdout.splitlines() if re.match(r"\s+f\d{4}\s", line))
    total = sum(ops.values())
    check("ls lists the %d files (%d)" % (n, listed), listed == n)
    # Each entry's attributes and extended attributes come in the listing's
    # READDIR batches: a request per entry (2 before, a GETXATTR of the DOS
    # attributes and a LISTXATTR for the EA size) would be 1,000 or more.
    check("listing %d entries costs %d nasgwd requests (%s): at most 0.2 per entry" % (n, total, ops),
          total <= 0.2 * n)
    import shutil
    shutil.rmtree(top)
    # What a listing carried is not used later: with the directory still
    # open (as Explorer keeps it), an entry made read-only since refuses an
    # open for writing.
    stale = os.path.join(alice_dir(ctx), "stale")
    os.mkdir(stale)
    for name in ("aa", "zz"):
        with open(os.path.join(stale, name), "wb"):
            pass
    for x in [stale] + [os.path.join(stale, n) for n in ("aa", "zz")]:
        os.chown(x, alice.uid, alice.gid)
    code = """
d = chan.create(tree, 'stale', access=smb2.GENERIC_READ, disposition=smb2.FILE_OPEN,
                options=smb2.FILE_DIRECTORY_FILE, share=SHARE_ALL).result()
names = sorted(i.file_name for i in chan.enum_directory(d))
h = chan.create(tree, 'stale\\zz', access=smb2.FILE_READ_ATTRIBUTES | smb2.FILE_WRITE_ATTRIBUTES,
                disposition=smb2.FILE_OPEN, share=SHARE_ALL).result()
with chan.set_file_info(h, smb2.FileBasicInformation) as fi:
    fi.file_attributes = smb2.FILE_ATTRIBUTE_READONLY
chan.close(h)
try:
    w = chan.create(tree, 'stale\\zz', access=smb2.FILE_WRITE_DATA, disposition=smb2.FILE_OPEN,
                    share=SHARE_ALL).result()
    chan.close(w)
    got = 'OPENED'
except Exception as e:
    got = str(getattr(getattr(e, 'response', None), 'status', e))
chan.close(d)
print(got, ','.join(names), flush=True)
"""
    p = smblab.pike_popen(c, srv, alice, "alice", code)
    try:
        line = smblab.readline(p)
        check("with the listed directory still open, a file made read-only since refuses an open for "
              "writing (%s)" % line, line.startswith("STATUS_ACCESS_DENIED") and line.endswith("aa,zz"),
              line or smblab.stderr_of(p))
    finally:
        smblab.kill_all(p)
    shutil.rmtree(stale)


SPARSE_TORTURE = ["smb2.ioctl." + t for t in (
    "sparse_file_flag", "sparse_file_attr", "sparse_dir_flag", "sparse_set_nobuf", "sparse_set_oversize",
    "sparse_qar", "sparse_qar_malformed", "sparse_qar_multi", "sparse_qar_ob1", "sparse_qar_overflow",
    "sparse_punch", "sparse_hole_dealloc", "sparse_lock", "sparse_punch_invalid", "sparse_perms",
    "sparse_copy_chunk")]


def test_sparse(ctx):
    """Sparse files over SMB: FSCTL_SET_SPARSE and FSCTL_SET_ZERO_DATA from
    an SMB client punch a hole that nasgwd frees (fewer blocks, zeros, a
    hole SEEK_HOLE finds, seen through FUSE); smbtorture's sparse-file tests
    (set, query allocated ranges, punch, deallocation) all pass."""
    c, srv, alice = ctx["client"], ctx["smbd"], ctx["alice"]
    path = os.path.join(alice_dir(ctx), "sparse.bin")
    with open(path, "wb") as f:
        f.write(b"\x5a" * (1 << 20))
        os.fsync(f.fileno())
    os.chown(path, alice.uid, alice.gid)
    blocks = os.stat(path).st_blocks
    code = """
h = chan.create(tree, 'sparse.bin', access=smb2.FILE_READ_DATA | smb2.FILE_WRITE_DATA | smb2.FILE_WRITE_ATTRIBUTES,
                share=SHARE_ALL, disposition=smb2.FILE_OPEN).result()
req = chan.request(obj=tree)
smb2.SetSparseRequest(chan.fsctl_request(req, h))
chan.connection.transceive(req.parent)
req = chan.request(obj=tree)
z = smb2.SetZeroDataRequest(chan.fsctl_request(req, h))
z.file_offset = 65536
z.beyond_final_zero = 65536 + (512 << 10)
chan.connection.transceive(req.parent)
chan.close(h)
print('ZEROED', flush=True)
"""
    p = smblab.pike_popen(c, srv, alice, "alice", code)
    try:
        line = smblab.readline(p)
        check("FSCTL_SET_SPARSE and FSCTL_SET_ZERO_DATA over SMB succeed", line == "ZEROED",
              line or smblab.stderr_of(p))
    finally:
        smblab.kill_all(p)
    with open(path, "rb") as f:
        st = nasgwlab.statx_sync(f.fileno())  # nasgwd's answer, not FUSE's cached one
        data = f.read()
        hole = os.lseek(f.fileno(), 0, os.SEEK_HOLE)
        after = os.lseek(f.fileno(), hole, os.SEEK_DATA)
    check("the zeroed range reads as zeros through FUSE, the rest as it was",
          data == b"\x5a" * 65536 + bytes(512 << 10) + b"\x5a" * ((1 << 20) - 65536 - (512 << 10)))
    check("its blocks are freed (%d of %d 512-byte blocks left), the size kept" % (st["blocks"], blocks),
          blocks - st["blocks"] == (512 << 10) // 512 and st["size"] == 1 << 20, st)
    check("SEEK_HOLE and SEEK_DATA find the hole (%d, %d)" % (hole, after),
          hole == 65536 and after == 65536 + (512 << 10))
    got = smblab.smbtorture(c, srv, alice, "alice", SPARSE_TORTURE, timeout=600)
    bad = {t: o for t, o in got.items() if o != "success"}
    check("smbtorture's %d sparse-file tests pass on the vfs_nasgw share (%d ran)" % (len(SPARSE_TORTURE), len(got)),
          len(got) == len(SPARSE_TORTURE) and not bad, bad)
    os.unlink(path)


def test_delegations(ctx):
    """An SMB open of a file an NFSv4 client holds a delegation on: nasgwd
    recalls the lease Ganesha took for it, Ganesha recalls the delegation
    (CB_RECALL), and the SMB open waits until the NFS client has returned it
    (DELEGRETURN). A read delegation is recalled by an SMB open for write;
    a write delegation by an SMB open for read too."""
    c, srv, alice = ctx["client"], ctx["smbd"], ctx["alice"]
    tool = ctx["lock_tool"]
    cases = (("read", "deleg-r.bin", "read", ("r+b", "write")),
             ("both", "deleg-w.bin", "write", ("rb", "read")))
    for access, name, want, (mode, what) in cases:
        path = os.path.join(alice_dir(ctx), name)
        with open(path, "wb") as f:
            f.write(b"n" * 64)
        os.chown(path, alice.uid, alice.gid)
        os.chmod(path, 0o666)
        holder = c.popen([tool, "--url", c.url("vol1/alice/" + name, 4), "--op", "deleg", "--access", access],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        opener = None
        try:
            line = smblab.readline(holder)
            check("an NFSv4 client opening for %s holds a %s delegation" % (access, want),
                  line == "granted deleg=" + want, line or smblab.stderr_of(holder))
            if line != "granted deleg=" + want:
                continue
            opener = smblab.smbpy_popen(c, srv, alice, """
f = smbclient.open_file(unc('alice', ARGS['name']), mode=ARGS['mode'], share_access='rwd')
print('OPENED', flush=True)
f.close()
""", {"name": name, "mode": mode})
            line = smblab.readline(holder)
            check("an SMB open for %s makes Ganesha recall the %s delegation" % (what, want), line == "recalled",
                  (line or smblab.stderr_of(holder)) + "\n--- ganesha log tail\n" + ctx["lab"].server.log_tail(3000))
            line = smblab.readline(opener, timeout=0.5)
            check("the SMB open waits while the delegation is out", line == "" and opener.poll() is None, line)
            holder.stdin.write("return\n")
            holder.stdin.flush()
            line = smblab.readline(holder)
            check("the NFS client returns the delegation", line == "returned", line or smblab.stderr_of(holder))
            line = smblab.readline(opener)
            check("then the SMB open completes", line == "OPENED", line or smblab.stderr_of(opener))
            opener.wait(timeout=60)
            holder.stdin.close()
            holder.wait(timeout=60)
            check("the NFS client closes cleanly", holder.returncode == 0, smblab.stderr_of(holder))
        finally:
            smblab.kill_all(holder, opener)


def test_durable(ctx):
    """A durable handle across a network drop: an SMB client holds a durable
    handle (read-write-handle lease, sharing read only) and has written to
    it; the cable is pulled and plugged back, and the client reconnects on a
    new connection, resuming its session (Samba closes the old one, which
    disconnects the handle) and reclaiming the handle: its data and lease
    are there, and nasgwd holds its share mode again (an NFSv4 OPEN for
    write first gets the client's lease broken, then is refused) until it
    closes."""
    c, srv, alice, lab = ctx["client"], ctx["smbd"], ctx["alice"], ctx["lab"]
    code = """
import select
def cue(lease=None):
    # waits for the test's line on stdin, acknowledging lease breaks meanwhile
    while not select.select([sys.stdin], [], [], 0.05)[0]:
        pike.model.loop(timeout=0.05, count=1)
        f = lease.future if lease is not None else None
        if f is not None and f.response is not None:
            notify = f.result()
            ack = chan2.lease_break_acknowledgement(tree2, notify)
            ack.lease_state = notify[0].new_lease_state
            chan2.connection.transceive(ack.parent.parent)
            lease.future = None
            sys.stderr.write('acknowledged a break to %d\\n' % notify[0].new_lease_state)
    return sys.stdin.readline()
KEY = array.array('B', range(16, 32))
h = chan.create(tree, 'durable.bin', access=smb2.FILE_READ_DATA | smb2.FILE_WRITE_DATA,
                share=smb2.FILE_SHARE_READ, disposition=smb2.FILE_OVERWRITE_IF,
                oplock_level=smb2.SMB2_OPLOCK_LEVEL_LEASE, lease_key=KEY, lease_state=RWH, durable=True).result()
chan.write(h, 0, b'before-drop')
print('READY', int(h.is_durable), flush=True)
sys.stdin.readline()
conn2 = client.connect(server=ARGS['server'], port=445).negotiate()
chan2 = conn2.session_setup(ARGS['cred'], resume=chan.session)
tree2 = chan2.tree_connect(ARGS['share'])
h2 = chan2.create(tree2, 'durable.bin', access=smb2.FILE_READ_DATA | smb2.FILE_WRITE_DATA,
                  share=smb2.FILE_SHARE_READ, disposition=smb2.FILE_OPEN,
                  oplock_level=smb2.SMB2_OPLOCK_LEVEL_LEASE, lease_key=KEY, lease_state=RWH, durable=h).result()
print('RECONNECTED', chan2.read(h2, 11, 0).tobytes().decode(), int(h2.lease.lease_state), flush=True)
cue(h2.lease)
chan2.write(h2, 11, b'+after')
chan2.close(h2)
print('CLOSED', flush=True)
"""
    holder = smblab.pike_popen(c, srv, alice, "alice", code)
    tool, url = ctx["lock_tool"], c.url("vol1/alice/durable.bin", 4)

    def nfs_open_for_write():
        return c.run([tool, "--url", url, "--op", "open", "--access", "write", "--deny", "none"], check=False,
                     timeout=120).stdout.strip()

    try:
        line = smblab.readline(holder)
        check("the SMB client holds a durable handle", line == "READY 1", line or smblab.stderr_of(holder))
        lab.link(1, "down")   # the cable: packets vanish, no FIN
        lab.link(1, "up")
        holder.stdin.write("reconnect\n")
        holder.stdin.flush()
        line = smblab.readline(holder)
        check("after the drop the client reconnects the durable handle, data and lease intact",
              line == "RECONNECTED before-drop 7", line or smblab.stderr_of(holder))
        r = nfs_open_for_write()
        check("nasgwd holds its share mode again: an NFSv4 OPEN for write (after the lease break) is refused",
              r == "denied", r)
        holder.stdin.write("close\n")
        holder.stdin.flush()
        line = smblab.readline(holder)
        check("the reconnected handle writes and closes", line == "CLOSED", line or smblab.stderr_of(holder))
        holder.wait(timeout=60)
        with open(os.path.join(alice_dir(ctx), "durable.bin"), "rb") as f:
            got = f.read()
        check("the file holds what was written before and after the drop", got == b"before-drop+after", repr(got))
        r = nfs_open_for_write()
        check("after the close, the NFSv4 OPEN for write is granted", r == "granted", r)
    finally:
        lab.link(1, "up")
        smblab.kill_all(holder)


def snap_stamp(t):
    """A snapshot name's UTC time, as nasgwd's schedules write it."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))


def gmt_label(t):
    """The @GMT label SMB shows for a snapshot of time t (UTC)."""
    return time.strftime("@GMT-%Y.%m.%d-%H.%M.%S", time.gmtime(t))


def next_second(after):
    """Waits until the clock is past second `after`; the new second."""
    while int(time.time()) <= after:
        time.sleep(0.05)
    return int(time.time())


# A client that stays connected (one smbd process, whose list of snapshots
# is kept) while the test takes and deletes snapshots. Each line it reads
# is a JSON object: "read", label times (Unix seconds) at which to read
# pv.txt (SMB2 TWrp create context), and "labels", whether to enumerate the
# labels (FSCTL_SRV_ENUMERATE_SNAPSHOTS) after the reads; it answers with
# one JSON line: {"reads": [content or 'status 0x...'], "labels": [...]}.
SNAP_CLIENT = r"""
import pike.exceptions
def twrp(t):
    return (t + 11644473600) * 10000000
def labels():
    h = chan.create(tree, 'pv.txt', access=smb2.FILE_READ_DATA | smb2.FILE_READ_ATTRIBUTES, share=SHARE_ALL,
                    disposition=smb2.FILE_OPEN).result()
    try:
        return [l for l in chan.enumerate_snapshots_list(h) if l]
    finally:
        chan.close(h)
def read_at(t):
    try:
        h = chan.create(tree, 'pv.txt', access=smb2.FILE_READ_DATA, share=SHARE_ALL, disposition=smb2.FILE_OPEN,
                        timewarp=twrp(t)).result()
    except pike.exceptions.ResponseError as e:
        return 'status 0x%08x' % e.response.status
    try:
        return chan.read(h, 4096, 0).tobytes().decode()
    finally:
        chan.close(h)
for line in sys.stdin:
    ask = json.loads(line)
    got = {'reads': [read_at(t) for t in ask.get('read', [])]}
    if ask.get('labels'):
        got['labels'] = labels()
    print(json.dumps(got), flush=True)
"""
NOT_FOUND = "status 0x%08x" % 0xC0000034


def test_snapshots(ctx):
    """SMB Previous Versions (docs/smb.md, Snapshots). A file written over
    SMB, snapshots taken with the CLI (named as nasgwd's schedules name
    theirs, `<name>-YYYYMMDDTHHMMSSZ`; named with a bare time and with an
    @GMT label; one with the same time as another, taken later; one without
    a time), the file overwritten after the first two: allinfo
    (FSCTL_SRV_ENUMERATE_SNAPSHOTS) shows one label per time, newest first
    (the untimed one by when it was taken), with the file's size in each; `get @GMT-.../pv.txt` reads each old
    content (the first snapshot taken, for a shared label) while the live
    file reads the new, in a directory of the share too, and `ls` lists a
    snapshot; writes, creates, mkdirs, deletes and renames at an @GMT path
    fail with MEDIA_WRITE_PROTECTED and change nothing; a label of no
    snapshot is not found. Then one client stays connected while a snapshot
    is taken (its label reads at once) and snapshots are deleted (a shared
    label passes to the other snapshot, then is gone)."""
    c, srv, alice, node, lab = ctx["client"], ctx["smbd"], ctx["alice"], ctx["node"], ctx["lab"]
    d = lab.dir
    v1, v2, v3 = "first version\n", "second version, longer\n", "third\n"
    made = []

    def put(text, remote):
        local = os.path.join(d, "pv-put")
        with open(local, "w") as f:
            f.write(text)
        smblab.smbclient(c, srv, "alice", alice, "put %s %s" % (local, remote))

    def get(remote):
        local = os.path.join(d, "pv-got")
        if os.path.exists(local):
            os.unlink(local)
        p = smblab.smbclient(c, srv, "alice", alice, "get %s %s" % (remote, local), check=False)
        return (open(local).read() if p.returncode == 0 and os.path.exists(local) else None), p

    def snapshot(name):
        node.cli("snapshot", "create", "vol1", name)
        made.append(name)

    def delete(name):
        node.cli("snapshot", "delete", "vol1", name)
        made.remove(name)

    holder = None
    try:
        smblab.smbclient(c, srv, "alice", alice, "mkdir pvdir")
        put(v1, "pv.txt")
        put("inner " + v1, "pvdir/inner.txt")
        ta = int(time.time())
        name_a = "smbtest-" + snap_stamp(ta)
        snapshot(name_a)
        put(v2, "pv.txt")
        put("inner " + v2, "pvdir/inner.txt")
        tb = next_second(ta)
        name_b = "hourly-" + snap_stamp(tb)
        snapshot(name_b)
        put(v3, "pv.txt")
        # Named by hand: a bare time, an @GMT label (times in the past: the
        # name's time is the label), the first snapshot's time again (its
        # label stays the first's), no time at all (labelled by its creation).
        t_bare, t_gmt = 1609459200, 1577934245  # 2021-01-01 00:00:00, 2020-01-02 03:04:05 UTC
        name_dup = "daily_" + snap_stamp(ta)
        for name in (snap_stamp(t_bare), gmt_label(t_gmt), name_dup, "before-upgrade"):
            snapshot(name)
        listed = {x["name"]: x for x in node.cli("snapshot", "list", "vol1", json_out=True)["snapshots"]}
        check("a schedule-style name's time is the snapshot's creation time (%s)" % listed,
              abs(listed[name_a]["created_unix"] - ta) <= 2 and abs(listed[name_b]["created_unix"] - tb) <= 2)
        la, lb = gmt_label(ta), gmt_label(tb)
        # The one without a time in its name is labelled with the second it
        # was taken in (nasgwd tells it), unless an earlier snapshot has
        # that label already.
        lc = gmt_label(int(listed["before-upgrade"]["created_unix"]))
        want = sorted({lb, la, gmt_label(t_bare), gmt_label(t_gmt), lc}, reverse=True)

        p = smblab.smbclient(c, srv, "alice", alice, "allinfo pv.txt")
        shown = re.findall(r"^(@GMT-\S+)\s*$", p.stdout, re.M)
        check("allinfo lists one label per time, newest first, the name without a time by its creation (%s)" % shown,
              shown == want, p.stdout + p.stderr)
        sizes, label = [], None
        for line in p.stdout.splitlines():
            if line.startswith("@GMT-"):
                label = line.strip()
            elif line.startswith("size: ") and label is not None:
                sizes.append(line.split()[1])
                label = None
        size_of = {lc: v3, gmt_label(t_gmt): v3, gmt_label(t_bare): v3, la: v1, lb: v2}  # the first taken wins
        check("... with the file's size in each (%s)" % sizes,
              sizes == [str(len(size_of[label])) for label in want], p.stdout)

        got, p = get("%s/pv.txt" % la)
        check("get @GMT-<first>/pv.txt reads the first version (the first snapshot with that time)", got == v1,
              (got, p.stdout + p.stderr))
        got, p = get("%s/pv.txt" % lb)
        check("get @GMT-<second>/pv.txt reads the second version", got == v2, (got, p.stdout + p.stderr))
        got, p = get("%s/pv.txt" % gmt_label(t_gmt))
        check("a snapshot named with an @GMT label reads by that label", got == v3, (got, p.stdout + p.stderr))
        got, p = get("pv.txt")
        check("the live file reads the third", got == v3, (got, p.stdout + p.stderr))
        got, p = get("%s/pvdir/inner.txt" % la)
        check("a file in a directory of the share reads as it was", got == "inner " + v1, (got, p.stdout + p.stderr))
        p = smblab.smbclient(c, srv, "alice", alice, "ls %s/*" % la)
        sizes = dict(re.findall(r"^\s+(\S+)\s+[A-Z]*\s+(\d+)\s", p.stdout, re.M))
        check("ls @GMT-<first>/* lists the snapshot, the file at its old size (%s)" % sizes,
              sizes.get("pv.txt") == str(len(v1)) and "pvdir" in sizes and ".snapshot" not in sizes, p.stdout)

        local = os.path.join(d, "pv-put")
        with open(local, "w") as f:
            f.write("overwrite\n")
        for what, cmd in (("a write", "put %s %s/pv.txt" % (local, la)),
                          ("a create", "put %s %s/new.txt" % (local, la)),
                          ("a mkdir", "mkdir %s/newdir" % la),
                          ("a delete", "del %s/pv.txt" % la),
                          # (out of the snapshot: smbclient sends a rename's
                          # target as a plain name, with no TWrp)
                          ("a rename", "rename %s/pv.txt moved.txt" % la)):
            p = smblab.smbclient(c, srv, "alice", alice, cmd, check=False)
            # (smbclient's exit status says nothing for mkdir and del)
            check("%s at an @GMT path fails: MEDIA_WRITE_PROTECTED (%s)" % (what, smblab.statuses(p)),
                  smblab.statuses(p) == ["NT_STATUS_MEDIA_WRITE_PROTECTED"], p.stdout + p.stderr)
        got, p = get("%s/pv.txt" % la)
        check("... and the snapshot's file is as it was", got == v1, (got, p.stdout + p.stderr))
        got, p = get("pv.txt")
        check("... and the live file too", got == v3 and not os.path.exists(os.path.join(alice_dir(ctx), "moved.txt")),
              (got, p.stdout + p.stderr))
        p = smblab.smbclient(c, srv, "alice", alice, "ls %s/*" % la)
        check("... and nothing was made in the snapshot", "new.txt" not in p.stdout and "newdir" not in p.stdout
              and "moved.txt" not in p.stdout, p.stdout)
        # A directory removed since is in the snapshot (Samba 4.17 reaches
        # its files only while it exists live: docs/smb.md).
        os.unlink(os.path.join(alice_dir(ctx), "pvdir", "inner.txt"))
        os.rmdir(os.path.join(alice_dir(ctx), "pvdir"))
        p = smblab.smbclient(c, srv, "alice", alice, "ls %s/pvdir/*" % la, check=False)
        check("a directory removed since is listed in the snapshot", "inner.txt" in p.stdout, p.stdout + p.stderr)
        got, p = get("@GMT-2001.02.03-04.05.06/pv.txt")
        check("a label of no snapshot is not found (%s)" % smblab.statuses(p),
              got is None and "NT_STATUS_OBJECT_NAME_NOT_FOUND" in smblab.statuses(p), p.stdout + p.stderr)

        # One smbd process throughout: a snapshot taken since the list it
        # keeps is found; one deleted since is gone (its label passes to a
        # snapshot with the same time, if there is one).
        holder = smblab.pike_popen(c, srv, alice, "alice", SNAP_CLIENT)

        def ask(**what):
            holder.stdin.write(json.dumps(what) + "\n")
            holder.stdin.flush()
            line = smblab.readline(holder)
            return (json.loads(line) if line.startswith("{") else {}), line or smblab.stderr_of(holder)

        r, raw = ask(read=[ta], labels=True)
        check("a connected client lists the labels (%s) and reads the first version by TWrp" % r.get("labels"),
              r.get("labels") == want and r.get("reads") == [v1], raw)
        tc = next_second(max(tb, int(time.time())))
        snapshot("smbtest-" + snap_stamp(tc))
        r, raw = ask(read=[tc])
        check("a snapshot taken since the client listed them reads by its label at once (%s)" % r,
              r.get("reads") == [v3], raw)
        delete(name_a)
        r, raw = ask(read=[ta, tb], labels=True)
        check("the first snapshot deleted, its label names the later one with its time (%s)" % r,
              r.get("reads") == [v3, v2] and r.get("labels") == [gmt_label(tc)] + want, raw)
        delete(name_dup)
        r, raw = ask(read=[ta, tb], labels=True)
        check("that one deleted too, the label is not found and leaves the list (%s)" % r,
              r.get("reads") == [NOT_FOUND, v2] and r.get("labels") == [gmt_label(tc)] + [x for x in want if x != la], raw)
        holder.stdin.close()
        holder.wait(timeout=60)
    finally:
        smblab.kill_all(holder)
        for name in list(made):
            node.cli("snapshot", "delete", "vol1", name, check=False)
        for x in ("pv.txt", os.path.join("pvdir", "inner.txt")):
            try:
                os.unlink(os.path.join(alice_dir(ctx), x))
            except OSError:
                pass
        try:
            os.rmdir(os.path.join(alice_dir(ctx), "pvdir"))
        except OSError:
            pass


TESTS = [("shares", test_shares), ("cross", test_cross), ("sharemodes", test_sharemodes), ("leases", test_leases),
         ("delegations", test_delegations), ("durable", test_durable), ("namespace", test_namespace), ("data", test_data),
         ("case", test_case), ("unlinked", test_unlinked), ("acl", test_acl), ("sparse", test_sparse),
         ("listing", test_listing), ("snapshots", test_snapshots),
         ("restart", test_restart)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--only", nargs="*", choices=[name for name, _ in TESTS], metavar="NAME",
                    help="run only these parts: " + ", ".join(name for name, _ in TESTS))
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    bins = {"nasgwd": b + "/daemon/nasgwd", "cli": b + "/cli/nasgw", "fsck": b + "/fs/nasgw-fsck",
            "fuse": b + "/fsal/fuse/nasgw-fuse"}
    fsal = b + "/fsal/ganesha/libfsalnasgw.so"
    node = lab = srv = None
    try:
        smblab.install_module(b)
        lab = nfslab.Lab(clients=1)
        tag = "%d" % os.getpid()
        alice = smblab.User("nasgw-alice-" + tag)
        bob = smblab.User("nasgw-bob-" + tag)
        # Shares come from nasgwd ('nasgw share add'): it writes them into
        # the file smb.conf includes and signals smbd.
        srv = smblab.Smbd(lab, [], users=[alice, bob])
        shares_file = os.path.join(srv.dir, "nasgw-shares.conf")
        srv.global_options["include"] = shares_file
        srv.make_dirs()
        node = nasgwlab.Node(bins=bins, luns=2, size="1G", tag="smb", metrics=True)
        exports_file = os.path.join(lab.dir, "ganesha-exports.conf")
        node.start("[smb]\nshares_file = %s\nsmbd_pid_file = %s\n[nfs]\nexports_file = %s\nganesha_pid_file = %s\n" % (
            nasgwlab.toml_str(shares_file), nasgwlab.toml_str(srv.pid_file), nasgwlab.toml_str(exports_file),
            nasgwlab.toml_str(os.path.join(lab.dir, "ganesha.pid"))))
        node.format()
        node.mount(options=["--allow-other"])  # the SMB users look through it too
        # NFS on the same nasgwd, for the cross-protocol checks.
        node.cli("export", "add", "vol1", "--no-root-squash")
        lab.start_server(nfslab.GaneshaConfig(plugins={"nasgw": fsal}, nasgw_socket=node.head_socket,
                                              exports_file=exports_file, delegations=True))
        srv.write_config()
        srv.add_users()
        home = os.path.join(node.mount_path, "alice")
        os.mkdir(home, 0o755)
        os.chown(home, alice.uid, alice.gid)
        # Before smbd runs: written, and smbd reads it when it starts.
        node.cli("share", "add", "vol1/alice", "--name", "alice", "--comment", "alice's files")
        srv.start()
        ctx = {"lab": lab, "node": node, "smbd": srv, "client": lab.client(1), "alice": alice, "bob": bob,
               "lock_tool": b + "/tests/tools/nasgw-nfs-lock"}
        nasgwlab.run_parts(TESTS, a.only, ctx, failures)
    except Exception:
        traceback.print_exc()
        failures.append("setup: exception")
    finally:
        if check.failed:
            failures.append("%d check(s) failed" % check.failed)
        if failures and srv is not None:
            print("--- smbd log tail\n" + srv.log_tail(3000))
            if lab is not None:
                print("--- smbd client log tail\n" + srv.share_log(lab.client(1).addr)[-3000:])
        rc = nasgwlab.finish(failures, node=node, lab=lab)
    return rc


if __name__ == "__main__":
    sys.exit(main())
