"""A minimal NFSv4.2 client over one TCP connection (ONC RPC, AUTH_SYS):
enough to drive the operations that nothing else here speaks. This
machine's kernel has no NFS client, libnfs 4.0 speaks NFSv4.0 only and
nfs-rs no v4.2 operations; this client sends ALLOCATE, DEALLOCATE, SEEK
(RFC 7862) and GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR (RFC 8276), on a
session of its own (EXCHANGE_ID, CREATE_SESSION, SEQUENCE,
RECLAIM_COMPLETE), with the wire formats written out from the RFCs.

    c = Client(server_addr, uid=1000, gid=1000)
    fh = c.lookup("vol1/dir/file")
    c.call(fh, deallocate(0, 4096))          # -> {"status": 0}
    sid = c.open_file(fh)                    # SEEK needs one: Ganesha answers an anonymous one with zeros
    c.call(fh, seek(0, HOLE, sid))           # -> {"status": 0, "eof": False, "offset": ...}

Every call returns the last operation's result as a dict whose "status" is
the NFS status (0: NFS4_OK); an RPC-level failure raises.
"""

import os
import socket
import struct

NFS_PROGRAM, NFS_V4, COMPOUND = 100003, 4, 1
AUTH_NONE, AUTH_SYS = 0, 1

OP_CLOSE, OP_GETFH, OP_LOOKUP, OP_OPEN, OP_PUTFH, OP_PUTROOTFH = 4, 10, 15, 18, 22, 24
OP_EXCHANGE_ID, OP_CREATE_SESSION, OP_SEQUENCE, OP_RECLAIM_COMPLETE = 42, 43, 53, 58
OP_DESTROY_SESSION, OP_DESTROY_CLIENTID = 44, 57
OP_ALLOCATE, OP_DEALLOCATE, OP_SEEK = 59, 62, 69
OP_GETXATTR, OP_SETXATTR, OP_LISTXATTRS, OP_REMOVEXATTR = 72, 73, 74, 75

DATA, HOLE = 0, 1  # SEEK's sa_what (NFS4_CONTENT_DATA, NFS4_CONTENT_HOLE)
EITHER, CREATE, REPLACE = 0, 1, 2  # SETXATTR's option

# The statuses tests look for, by name.
STATUS = {0: "NFS4_OK", 1: "NFS4ERR_PERM", 2: "NFS4ERR_NOENT", 6: "NFS4ERR_NXIO", 13: "NFS4ERR_ACCESS",
          17: "NFS4ERR_EXIST", 21: "NFS4ERR_ISDIR", 22: "NFS4ERR_INVAL", 27: "NFS4ERR_FBIG", 28: "NFS4ERR_NOSPC",
          10004: "NFS4ERR_NOTSUPP", 10008: "NFS4ERR_DELAY", 10013: "NFS4ERR_GRACE", 10038: "NFS4ERR_OPENMODE",
          10095: "NFS4ERR_NOXATTR", 10096: "NFS4ERR_XATTR2BIG"}
ANON_STATEID = bytes(16)  # seqid 0, other all zeros: the anonymous stateid
READ, WRITE, BOTH = 1, 2, 3  # OPEN's share access
WANT_NO_DELEG = 0x0400


class Enc:
    def __init__(self):
        self.b = bytearray()

    def u32(self, v):
        self.b += struct.pack(">I", v)
        return self

    def u64(self, v):
        self.b += struct.pack(">Q", v)
        return self

    def fixed(self, data):
        self.b += data + bytes(-len(data) % 4)
        return self

    def opaque(self, data):
        if isinstance(data, str):
            data = data.encode()
        return self.u32(len(data)).fixed(data)


class Dec:
    def __init__(self, data):
        self.d, self.at = data, 0

    def take(self, n):
        if self.at + n > len(self.d):
            raise ValueError("reply too short")
        out = self.d[self.at:self.at + n]
        self.at += n
        return out

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def fixed(self, n):
        out = self.take(n)
        self.take(-n % 4)
        return out

    def opaque(self):
        return self.fixed(self.u32())


# ---- operations: (op, encoded arguments) -----------------------------------

def putfh(fh):
    return OP_PUTFH, Enc().opaque(fh).b


def lookup(name):
    return OP_LOOKUP, Enc().opaque(name).b


def allocate(offset, length, stateid=ANON_STATEID):
    return OP_ALLOCATE, Enc().fixed(stateid).u64(offset).u64(length).b


def deallocate(offset, length, stateid=ANON_STATEID):
    return OP_DEALLOCATE, Enc().fixed(stateid).u64(offset).u64(length).b


def seek(offset, what, stateid=ANON_STATEID):
    return OP_SEEK, Enc().fixed(stateid).u64(offset).u32(what).b


def getxattr(name):
    return OP_GETXATTR, Enc().opaque(name).b


def setxattr(name, value, option=EITHER):
    return OP_SETXATTR, Enc().u32(option).opaque(name).opaque(value).b


def listxattrs(cookie=0, maxcount=65536):
    return OP_LISTXATTRS, Enc().u64(cookie).u32(maxcount).b


def removexattr(name):
    return OP_REMOVEXATTR, Enc().opaque(name).b


# ---- results: what follows an operation's status when it is NFS4_OK ---------

def _chan_attrs(d):
    for _ in range(6):
        d.u32()
    for _ in range(d.u32()):
        d.u32()


def _exchange_id(d):
    r = {"clientid": d.u64(), "sequenceid": d.u32()}
    d.u32()  # flags
    if d.u32() != 0:
        raise ValueError("state protection other than SP4_NONE")
    d.u64()
    d.opaque()  # server owner
    d.opaque()  # server scope
    for _ in range(d.u32()):  # implementation ids
        d.opaque()
        d.opaque()
        d.u64()
        d.u32()
    return r


def _create_session(d):
    r = {"sessionid": d.fixed(16), "sequence": d.u32()}
    d.u32()
    _chan_attrs(d)
    _chan_attrs(d)
    return r


def _sequence(d):
    r = {"sessionid": d.fixed(16), "sequenceid": d.u32()}
    for _ in range(4):  # slot, highest, target highest, status flags
        d.u32()
    return r


def _change_info(d):
    d.u32()
    d.u64()
    d.u64()
    return {}


def _open(d):
    r = {"stateid": d.fixed(16)}
    _change_info(d)
    d.u32()  # rflags
    for _ in range(d.u32()):  # attrset
        d.u32()
    deleg = d.u32()
    if deleg == 3:  # OPEN_DELEGATE_NONE_EXT: why not
        if d.u32() in (6, 7):  # WND4_CONTENTION, WND4_RESOURCE: a bool follows
            d.u32()
    elif deleg != 0:
        raise ValueError("a delegation was granted though not wanted")
    return r


def _listxattrs(d):
    cookie = d.u64()
    names = [d.opaque().decode() for _ in range(d.u32())]
    return {"cookie": cookie, "names": names, "eof": bool(d.u32())}


RESULTS = {
    OP_EXCHANGE_ID: _exchange_id,
    OP_CREATE_SESSION: _create_session,
    OP_SEQUENCE: _sequence,
    OP_GETFH: lambda d: {"fh": d.opaque()},
    OP_OPEN: _open,
    OP_CLOSE: lambda d: {"stateid": d.fixed(16)},
    OP_SEEK: lambda d: {"eof": bool(d.u32()), "offset": d.u64()},
    OP_GETXATTR: lambda d: {"value": d.opaque()},
    OP_SETXATTR: _change_info,
    OP_REMOVEXATTR: _change_info,
    OP_LISTXATTRS: _listxattrs,
}


class Error(Exception):
    pass


class Client:
    def __init__(self, server, uid=0, gid=0, groups=(), port=2049, timeout=60):
        self.uid, self.gid, self.groups = uid, gid, list(groups)
        self.sock = socket.create_connection((server, port), timeout=timeout)
        self.xid = int.from_bytes(os.urandom(4), "big")
        self.session = None
        owner = b"nasgw-nfs42-%d-%s" % (os.getpid(), os.urandom(8).hex().encode())
        r = self._compound([(OP_EXCHANGE_ID, Enc().fixed(os.urandom(8)).opaque(owner)
                             .u32(0x00010000)  # EXCHGID4_FLAG_USE_NON_PNFS
                             .u32(0).u32(0).b)])  # SP4_NONE, no implementation id
        self._ok(r, "EXCHANGE_ID")
        self.clientid = r[-1]["clientid"]
        attrs = Enc()
        for _ in range(2):  # fore and back channels: header pad, sizes, ops, requests, no RDMA
            attrs.u32(0).u32(1 << 20).u32(1 << 20).u32(4096).u32(16).u32(1).u32(0)
        r = self._compound([(OP_CREATE_SESSION, Enc().u64(r[-1]["clientid"]).u32(r[-1]["sequenceid"]).u32(0)
                             .b + attrs.b + Enc().u32(0x40000000).u32(1).u32(AUTH_NONE).b)])
        self._ok(r, "CREATE_SESSION")
        self.session, self.seq = r[-1]["sessionid"], 0
        self._ok(self.compound([(OP_RECLAIM_COMPLETE, Enc().u32(0).b)]), "RECLAIM_COMPLETE")

    def close(self):
        try:
            if self.session is not None:
                self._compound([(OP_DESTROY_SESSION, Enc().fixed(self.session).b)])
        finally:
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _ok(results, what):
        if results[-1]["status"] != 0:
            raise Error("%s: %s" % (what, STATUS.get(results[-1]["status"], results[-1]["status"])))

    def compound(self, ops):
        """SEQUENCE, then `ops`: every result, in order (the compound ends
        at the first failure)."""
        self.seq += 1
        seq = (OP_SEQUENCE, Enc().fixed(self.session).u32(self.seq).u32(0).u32(0).u32(0).b)
        r = self._compound([seq] + list(ops))
        self._ok(r[:1], "SEQUENCE")
        return r[1:]

    def lookup(self, path):
        """The file handle of `path` (names from the pseudo root)."""
        ops = [(OP_PUTROOTFH, b"")] + [lookup(n) for n in path.strip("/").split("/") if n] + [(OP_GETFH, b"")]
        r = self.compound(ops)
        self._ok(r, "LOOKUP " + path)
        return r[-1]["fh"]

    def open_file(self, fh, access=BOTH):
        """OPEN of the file `fh` names (CLAIM_FH, deny none, no delegation
        wanted): its open stateid."""
        args = (Enc().u32(0).u32(access | WANT_NO_DELEG).u32(0).u64(self.clientid).opaque(b"nasgw-nfs42-owner")
                .u32(0).u32(4).b)  # OPEN4_NOCREATE, CLAIM_FH
        r = self.compound([putfh(fh), (OP_OPEN, args)])
        self._ok(r, "OPEN")
        return r[-1]["stateid"]

    def close_file(self, fh, stateid):
        self._ok(self.compound([putfh(fh), (OP_CLOSE, Enc().u32(0).fixed(stateid).b)]), "CLOSE")

    def call(self, fh, op):
        """PUTFH fh, then op: op's result."""
        r = self.compound([putfh(fh), op])
        return r[-1] if len(r) == 2 or r[-1]["status"] != 0 else {"status": -1}

    def _compound(self, ops):
        self.xid = (self.xid + 1) & 0xffffffff
        cred = Enc().u32(0).opaque(b"nasgw-nfs42").u32(self.uid).u32(self.gid).u32(len(self.groups))
        for g in self.groups:
            cred.u32(g)
        e = Enc().u32(self.xid).u32(0).u32(2).u32(NFS_PROGRAM).u32(NFS_V4).u32(COMPOUND)
        e.u32(AUTH_SYS).opaque(bytes(cred.b)).u32(AUTH_NONE).u32(0)
        e.opaque(b"").u32(2).u32(len(ops))  # tag, minor version 2
        for op, args in ops:
            e.u32(op).b += args
        self.sock.sendall(struct.pack(">I", 0x80000000 | len(e.b)) + bytes(e.b))
        d = Dec(self._record())
        if d.u32() != self.xid or d.u32() != 1:
            raise Error("not the reply to this call")
        if d.u32() != 0:
            raise Error("RPC call denied")
        d.u32()
        d.opaque()  # verifier
        accept = d.u32()
        if accept != 0:
            raise Error("RPC not accepted (%d) for ops %s" % (accept, [op for op, _ in ops]))
        d.u32()  # the compound's status: the last result's
        d.opaque()  # tag
        out = []
        for _ in range(d.u32()):
            op, status = d.u32(), d.u32()
            r = {"op": op, "status": status}
            if status == 0 and op in RESULTS:
                r.update(RESULTS[op](d))
            out.append(r)
            if status != 0:
                break
        return out

    def _record(self):
        data = b""
        while True:
            mark = struct.unpack(">I", self._read(4))[0]
            data += self._read(mark & 0x7fffffff)
            if mark & 0x80000000:
                return data

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            got = self.sock.recv(n - len(buf))
            if not got:
                raise Error("the server closed the connection")
            buf += got
        return buf
