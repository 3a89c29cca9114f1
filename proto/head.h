// The head protocol: how a protocol head (FUSE, Ganesha, Samba) asks nasgwd
// to do file-system work, and, in the controller-pair issue, how one node
// forwards a request to the node that owns a volume. docs/head-protocol.md
// is the specification; this file is its one codec.
//
// A connection carries frames. Every frame is a 24-byte header and a payload:
//
//   0  u32 magic   kMagic
//   4  u16 version kVersion
//   6  u16 op      Op
//   8  u64 id      request id, chosen by the client, echoed in the reply
//   16 u32 length  payload bytes after the header, at most kPayloadMax
//   20 u32 status  request: 0. reply: 0 or a Linux errno value
//
// Files are named by handles nasgwd issued: (volume, inode, generation,
// snapshot, scope) and a MAC over them that only nasgwd can make (it keeps
// the key; fs/handle.h). Heads carry a handle's MAC as opaque bytes. Every
// reply that carries attributes carries the MAC of their handle, in the
// scope of the request's handle (MOUNT: of the directory it names). nasgwd
// checks a request's handles before anything else.
//
// Requests may be pipelined: replies come back in any order, matched by id.
// Opens are named by a client-chosen id, so that an OPEN and the RELEASE of
// an earlier open of the same file may arrive in either order (over
// different connections) and a resent one changes nothing. Byte-range locks
// (LOCK, UNLOCK, TESTLOCK) belong to a (session, owner) and follow POSIX
// rules; they are idempotent too, and end with the session (GOODBYE, or the
// grace time after the last connection closed).
// A request's payload starts with the caller's credentials; then the op's
// arguments. A failed reply's payload is a message (Str16) only. Integers are
// little-endian; strings are a u16 length and bytes (no NUL). Decoding is
// strict: every field is range-checked and a payload must be consumed
// exactly. A frame that fails to decode is a protocol error and the server
// closes that connection (and nothing else). Values that are well-formed but
// not acceptable to the file system (a name too long) get an error reply.
//
// A WRITE says how durable its bytes must be when the reply comes (NFS's
// stable_how: unstable, data_sync, file_sync); the reply says the level
// reached. FSYNC is NFS's COMMIT: it makes what the file was written
// durable. WRITE, FSYNC and HELLO replies carry nasgwd's write verifier, a
// random value drawn each time nasgwd opens the domain: data written
// unstable is durable once an FSYNC reply carries the verifier its WRITE
// reply did; a different one means it may have been lost (nasgwd restarted
// or crashed, or the domain moved), and the head writes it again.
//
// Read and write data travel without extra copies: the bytes of a WRITE
// follow its fixed arguments and are handed to the file system in place;
// those of a READ reply are written from the buffer the file system filled
// and read by the client straight into the caller's buffer.
//
// SHARE records an open's share reservation: what it accesses and what it
// denies to other opens, as SMB share modes and NFSv4 share_access and
// share_deny say. nasgwd arbitrates them for every head, so a Windows deny
// mode refuses an NFSv4 open and the reverse (docs/head-protocol.md).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace nasgw::proto {

constexpr uint32_t kMagic = 0x3150484E;  // "NHP1"
// 2: handles carry a snapshot id, their scope and a MAC, attributes carry
// the MAC of their handle, MOUNT takes a path. 3: WRITE's stability level
// and the write verifier (WRITE, FSYNC and HELLO replies). 4: attrs'
// flags (POSIX ACLs) and CREATE's umask. 5: SHARE (docs/head-protocol.md).
constexpr uint16_t kVersion = 6;
constexpr size_t kHeaderBytes = 24;

// Largest READ or WRITE (the bytes themselves), and the largest payload: a
// full write plus its arguments and credentials, or a full READDIR page.
constexpr uint32_t kIoBytesMax = 1u << 20;
constexpr uint32_t kPayloadMax = kIoBytesMax + (64u << 10);
// Supplementary groups per caller. NFS AUTH_SYS carries 16; Windows users
// (SMB) can be in hundreds of groups; Linux's NGROUPS_MAX is 65536.
constexpr uint32_t kGroupsMax = 1024;
// Entries in one READDIR reply (with attributes: about 360 KiB at most).
constexpr uint32_t kReadDirMax = 1024;
constexpr size_t kMessageMax = 1024;  // error messages are cut here

// ---- the protocol's values
//
// What the wire carries, field for field. nasgwd converts them to and from
// the file system's own types (daemon/head_service.cc, one function per
// type), so that proto/, and the heads that link it, depend on nothing of
// fs/. The limits are the file system's, restated (head_service.cc checks
// at compile time that they agree).
constexpr size_t kNameMax = 255;  // bytes in one path component (also a volume name)
constexpr size_t kSymlinkMax = 4095;
constexpr size_t kXattrNameMax = 255;
constexpr size_t kXattrValueMax = 64 << 10;
constexpr uint64_t kFileSizeMax = (1ull << 63) - 1;  // the largest file; no WRITE or size beyond it
constexpr uint64_t kRootIno = 1;                     // a volume's root directory

// A handle's MAC: only nasgwd makes and checks it; heads hand it back.
constexpr size_t kMacBytes = 16;
using Mac = std::array<uint8_t, kMacBytes>;

// A file as nasgwd named it (docs/head-protocol.md, Handles).
struct Handle {
  uint32_t volume = 0;
  uint64_t ino = 0;
  uint64_t gen = 0;    // random, never 0
  uint32_t snap = 0;   // 0: the live file system
  uint64_t scope = 0;  // the export's directory the handle was issued in
  Mac mac{};
};

enum class FileType : uint8_t { kNone = 0, kRegular, kDirectory, kSymlink, kFifo, kSocket, kCharDevice, kBlockDevice };

struct Time {
  int64_t sec = 0;
  uint32_t nsec = 0;  // < 1,000,000,000
  bool operator==(const Time&) const = default;
};

// An object's attributes. Its handle is (the request's volume, ino, gen,
// snap, the request's scope) with the MAC the reply carries beside it.
struct Attr {
  uint64_t ino = 0;
  uint64_t gen = 0;
  uint32_t snap = 0;
  FileType type = FileType::kNone;
  uint32_t mode = 0;  // permission bits (07777)
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte units allocated
  uint64_t rdev = 0;
  Time atime, mtime, ctime, btime;
  uint64_t change = 0;  // bumps on every change (NFSv4 change attribute)
  uint8_t flags = 0;    // kAttr* bits
};
// Attr flags: the object has a POSIX access ACL, a default ACL (read them
// with GETXATTR system.posix_acl_access / _default). A head that maps ACLs
// (FSAL_NASGW's NFSv4 ACLs) asks only for objects that have them.
constexpr uint8_t kAttrAclAccess = 1, kAttrAclDefault = 2;

// SETATTR's arguments: every field travels; `mask` (kSet* bits) says which
// apply.
struct SetAttr {
  uint32_t mask = 0;
  uint32_t mode = 0, uid = 0, gid = 0;
  uint64_t size = 0;
  Time atime, mtime;
};

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  FileType type = FileType::kNone;
  uint64_t cookie = 0;  // pass back to continue after this entry
};

struct StatFs {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t files = 0;
};

enum class Op : uint16_t {
  kHello = 1,  // must be first on a connection
  kMount = 2,  // volume name and path -> volume id, the directory (a scope)
  kStatfs = 3,
  kGoodbye = 4,  // a clean close: the session ends now (its opens and locks are released)
  kLookup = 10,
  kGetAttr = 11,
  kSetAttr = 12,
  kAccess = 13,
  // An object by inode number, issued in the scope of the request's
  // directory handle (its mount's): for heads that must turn a bare inode
  // number back into a handle (FUSE's open-by-handle and NFS re-export).
  // Privileged heads only (EPERM otherwise), as open_by_handle_at(2) is.
  kGetInode = 14,
  kCreate = 20,  // any type: file, directory, symlink, device, fifo, socket
  kLink = 21,
  kUnlink = 22,
  kRmdir = 23,
  kRename = 24,
  kReadLink = 25,
  kReadDir = 26,
  kFindCaseless = 27,
  kOpen = 30,
  kRelease = 31,
  kRead = 32,
  kWrite = 33,
  kFsync = 34,      // NFS COMMIT: what the file was written is durable on reply
  kFallocate = 35,  // allocate, punch a hole, zero a range (fallocate(2), NFSv4.2, SMB)
  kSeek = 36,       // SEEK_DATA, SEEK_HOLE
  kGetXattr = 40,
  kSetXattr = 41,
  kListXattr = 42,
  kRemoveXattr = 43,
  kLock = 50,  // byte-range locks, arbitrated by nasgwd (non-blocking)
  kUnlock = 51,
  kTestLock = 52,
  kShare = 53,  // share reservations (SMB share modes, NFSv4 share_access/share_deny)
  kLease = 54,  // caching leases (SMB oplocks and leases, NFSv4 delegations)
  // nasgwd's notice to a lease holder (a frame with id 0, never a request):
  // another head's operation needs the lease given back.
  kRecall = 55,
};
const char* OpName(Op op);  // "?" for an unknown value
bool KnownOp(uint16_t op);
// Whether repeating the request after an unknown outcome is harmless (it
// has the same effect as doing it once). The client resends these after a
// reconnect; the others fail with a retryable error instead.
bool Idempotent(Op op);

struct FrameHeader {
  Op op = Op::kHello;
  uint64_t id = 0;
  uint32_t length = 0;
  uint32_t status = 0;
};
void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]);
// Checks magic, version, op and length; `reply` says which side sent it.
Result<FrameHeader> DecodeHeader(const uint8_t in[kHeaderBytes], bool reply);

struct Creds {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary, at most kGroupsMax
};

// Access bits (as R_OK, W_OK, X_OK).
constexpr uint32_t kAccessRead = 4, kAccessWrite = 2, kAccessExec = 1;

// SetAttr mask bits.
constexpr uint32_t kSetMode = 1, kSetUid = 2, kSetGid = 4, kSetSize = 8, kSetAtime = 16, kSetAtimeNow = 32,
                   kSetMtime = 64, kSetMtimeNow = 128, kSetAll = 255;
// Create flags.
constexpr uint32_t kCreateOpen = 1;       // also open the new file for this session
constexpr uint32_t kCreateUnchecked = 2;  // an existing regular file is not an error (NFS UNCHECKED)
// The mode is not yet narrowed by the caller's umask, which travels too (in
// `count`, after the other fields): nasgwd applies it unless the directory
// has a default ACL (Linux's rule for file systems with POSIX ACLs).
constexpr uint32_t kCreateUmask = 4;
// Rename flags.
constexpr uint32_t kRenameNoReplace = 1;
constexpr uint32_t kRenameExchange = 2;  // both names exist and trade their files
// ReadDir flags.
constexpr uint32_t kReadDirPlus = 1;  // attributes with every entry
// With kReadDirPlus: every entry's extended attributes too (those the
// caller may read: names as LISTXATTR gives them, and values), when they
// fit in kReadDirXattrBytesMax (each name + 1 + 4 + value, summed) and the
// reply's budget; an entry whose are not carried is marked so, and the head
// asks with LISTXATTR/GETXATTR. Saves SMB's per-entry DOS attribute and EA
// size requests in a listing.
constexpr uint32_t kReadDirXattrs = 2;
// A live directory lists its `.snapshot` directory too (an export option
// shows it): after every other entry, with cookie kSnapshotDirCookie, which
// no entry of a directory takes.
constexpr uint32_t kReadDirSnapshotDir = 4;
constexpr uint64_t kSnapshotDirCookie = uint64_t{1} << 62;
constexpr size_t kReadDirXattrBytesMax = 1024;
constexpr size_t kReadDirXattrBudget = 256 << 10;  // per reply, all entries
// WRITE's stability (NFS's stable_how): how durable the bytes must be when
// the reply comes; the reply says the level reached (at least that).
constexpr uint32_t kUnstable = 0;  // may be held in nasgwd's memory: durable after FSYNC
constexpr uint32_t kDataSync = 1;  // the data, and what reading it back needs (the size), are durable
constexpr uint32_t kFileSync = 2;  // the data and all of the file's metadata are durable
// SetXattr flags (as XATTR_CREATE, XATTR_REPLACE).
constexpr uint32_t kXattrCreate = 1, kXattrReplace = 2;
// FALLOCATE modes (in `flags`): Linux's FALLOC_FL_* values. 0 or
// kFallocKeepSize: allocate; kFallocPunchHole | kFallocKeepSize: punch a
// hole; kFallocZeroRange (kFallocKeepSize optional): zero. Other bits, or
// other combinations, are refused with EOPNOTSUPP, as Linux does.
constexpr uint32_t kFallocKeepSize = 0x01, kFallocPunchHole = 0x02, kFallocZeroRange = 0x10;
// SEEK (in `flags`): kSeekData or kSeekHole (lseek's SEEK_DATA, SEEK_HOLE).
constexpr uint32_t kSeekData = 0, kSeekHole = 1;
// Lock types (LOCK, TESTLOCK, and a lock description's type; 0 there: none).
constexpr uint32_t kLockRead = 1, kLockWrite = 2;
// LOCK flags. kLockReclaim: a lock the client held before its head (or
// nasgwd) went away, taken again in the head's grace period; it is granted
// over conflicting locks of sessions that have no connection
// (docs/head-protocol.md, LOCK). Room for "wait"; an unknown bit is a
// protocol error.
constexpr uint32_t kLockReclaim = 1;
constexpr uint32_t kLockFlagsAll = kLockReclaim;
// SHARE: what an open does (access) and what it refuses to other opens
// (deny), each a set of these bits. access 0 and deny 0: release.
constexpr uint32_t kShareRead = 1, kShareWrite = 2, kShareDelete = 4;
constexpr uint32_t kShareAll = kShareRead | kShareWrite | kShareDelete;
// LEASE types, and RECALL's break_to: what the holder may cache. kLeaseRead:
// reads (an SMB R lease, a level II oplock, an NFSv4 read delegation);
// kLeaseWrite (always with kLeaseRead): writes too (RW leases, exclusive
// and batch oplocks, write delegations). 0: nothing (a release).
constexpr uint32_t kLeaseRead = 1, kLeaseWrite = 2;
bool LeaseTypeOk(uint32_t t);  // 0, kLeaseRead, or both

using SessionId = std::array<uint8_t, 16>;

// One request, all ops: the op says which fields are meaningful. A flat
// struct keeps the codec and its fuzzer simple.
struct Request {
  Op op = Op::kHello;
  Creds creds;
  Handle h;                         // the object (the directory for name ops)
  Handle h2;                        // LINK: the directory; RENAME: the target directory
  std::string name;                 // entry name; MOUNT: volume; xattr name
  std::string name2;                // RENAME: target name; CREATE: symlink target; HELLO: client name; MOUNT: path
  std::string value;                // SETXATTR
  uint64_t offset = 0;              // READ/WRITE/FALLOCATE/SEEK offset; READDIR cookie; CREATE rdev
  uint32_t count = 0;               // READ length; READDIR max entries; ACCESS mask; OPEN access
  uint32_t flags = 0;               // CREATE, RENAME, READDIR, SETXATTR, LOCK; FALLOCATE mode; SEEK what
  uint32_t stable = kUnstable;      // WRITE: kUnstable, kDataSync or kFileSync
  FileType type = FileType::kNone;  // CREATE
  uint32_t mode = 0;                // CREATE
  SetAttr set;                      // SETATTR
  SessionId session{};              // HELLO
  uint64_t open_id = 0;             // OPEN, RELEASE, CREATE with kCreateOpen: the client's id for this open
  // LOCK, UNLOCK, TESTLOCK: the head's lock owner (opaque, scoped to the
  // session), the lock type (not UNLOCK), and the range: `offset` is its
  // start, `length` its bytes (0: to the end of the file).
  uint64_t owner = 0;
  uint32_t lock_type = 0;
  // SHARE (with `owner`): the open's access and deny bits (kShare*).
  uint32_t share_access = 0;
  uint32_t share_deny = 0;
  // LEASE (with `owner`): the lease type (kLease*; 0 releases).
  uint32_t lease = 0;
  uint64_t length = 0;    // LOCK, UNLOCK, TESTLOCK, FALLOCATE
  std::string_view data;  // WRITE bytes, in place in the payload
  // A well-formed request whose values the file system refuses (a name
  // longer than 255 bytes, with '/', an xattr value over 64 KiB): answered
  // with this errno, not treated as a protocol error.
  int reject = 0;
  std::string reject_why;
};

// A MOUNT path: empty (the volume's root) or names joined by '/' (no
// leading, trailing or double '/'), at most kMountPathMax bytes.
constexpr size_t kMountPathMax = 4095;

// Encodes the payload of `r` (without WRITE data, which the caller sends
// after it; `data.size()` is encoded as its length).
std::string EncodeRequest(const Request& r);
// Decodes a payload. `payload` must outlive the result (WRITE data views it).
Result<Request> DecodeRequest(Op op, std::string_view payload);

struct VolumeRoot {
  uint32_t volume = 0;
  uint32_t record_bytes = 0;
  Attr root;  // the directory MOUNT named (the volume's root for an empty path)
};

// A byte-range lock as the protocol describes it: the conflicting lock of a
// TESTLOCK reply or of a LOCK refused with EAGAIN. `session` is nasgwd's
// number for the holder's session (not its id: that would let a head join
// another's session) and `owner` the holder's owner; both are for display.
struct LockInfo {
  uint32_t type = 0;  // kLockRead, kLockWrite; 0: none (TESTLOCK found no conflict; the rest is 0)
  uint64_t start = 0;
  uint64_t length = 0;  // 0: to the end of the file
  uint64_t session = 0;
  uint64_t owner = 0;
};

// The last byte of the range [start, start + length) (length 0: to the
// end, kLockEnd), or false when it would lie beyond 2^64 - 1.
constexpr uint64_t kLockEnd = UINT64_MAX;
bool LockRangeEnd(uint64_t start, uint64_t length, uint64_t* end);

struct Hello {
  std::string node_name;
  SessionId instance{};  // a new random value every time nasgwd starts
  uint32_t payload_max = kPayloadMax;
  uint32_t inflight_max = 0;
  // The session named in the HELLO was still known (its opens held); false
  // for a new session, or one nasgwd forgot (restart, grace time over).
  bool resumed = false;
  uint64_t write_verifier = 0;  // as in WRITE replies; 0 while no domain is open
};

// A successful reply, all ops. READ's bytes are not here: see ReadReplyPrefix.
struct Reply {
  Attr attr;                      // LOOKUP GETATTR SETATTR CREATE LINK OPEN WRITE FALLOCATE
  Mac mac{};                      // the MAC of attr's handle (MOUNT: of volume.root's)
  std::vector<Mac> macs;          // READDIR with kReadDirPlus, one per attrs entry
  std::vector<DirEntry> entries;  // READDIR
  std::vector<Attr> attrs;        // READDIR with kReadDirPlus, one per entry
  // READDIR with kReadDirXattrs, one per entry: carried or not, and then
  // every (name, value) the caller may read.
  struct EntryXattrs {
    bool carried = false;
    std::vector<std::pair<std::string, std::string>> list;
  };
  std::vector<EntryXattrs> xattrs;
  bool eof = false;                // READDIR, READ
  std::string text;                // READLINK, FINDCASELESS, GETXATTR
  std::vector<std::string> names;  // LISTXATTR
  uint32_t u32 = 0;                // ACCESS: granted bits; WRITE: bytes written
  uint32_t stable = kUnstable;     // WRITE: the level reached (at least the one asked)
  uint64_t verifier = 0;           // WRITE, FSYNC: the write verifier (never 0)
  uint64_t offset = 0;             // SEEK: where the data or the hole starts
  StatFs statfs;                   // STATFS
  VolumeRoot volume;               // MOUNT
  Hello hello;                     // HELLO
  LockInfo lock;                   // TESTLOCK: the conflicting lock (type 0: none)
};

std::string EncodeReply(Op op, const Reply& r);
// The packed size of an entry's carried attributes (kReadDirXattrBytesMax).
size_t EntryXattrBytes(const Reply::EntryXattrs& x);
Result<Reply> DecodeReply(Op op, std::string_view payload);

// A READ reply's payload: u8 eof, u32 n, then n bytes.
constexpr size_t kReadPrefixBytes = 5;
void EncodeReadPrefix(bool eof, uint32_t n, uint8_t out[kReadPrefixBytes]);
// Checks n against the payload length and the length asked for.
Result<std::pair<bool, uint32_t>> DecodeReadPrefix(const uint8_t in[kReadPrefixBytes], uint32_t payload_length,
                                                   uint32_t asked);

// A failed reply's payload.
std::string EncodeError(std::string_view message);
std::string DecodeError(std::string_view payload);  // best effort, never fails
// A LOCK refused with EAGAIN: the message, then the conflicting lock (its
// type is 1 or 2). Decoding is strict.
std::string EncodeLockDenied(std::string_view message, const LockInfo& conflict);

// RECALL's payload: u32 volume, u64 inode, u64 owner (the lease holder's,
// as its LEASE named it), u32 break_to (what it may keep: 0 or kLeaseRead).
struct Recall {
  uint32_t volume = 0;
  uint64_t ino = 0;
  uint64_t owner = 0;
  uint32_t break_to = 0;
};
std::string EncodeRecall(const Recall& r);
Result<Recall> DecodeRecall(std::string_view payload);
Result<LockInfo> DecodeLockDenied(std::string_view payload);

}  // namespace nasgw::proto
