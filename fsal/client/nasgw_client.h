/* nasgw client library: how a protocol head (Ganesha's FSAL, Samba's VFS
 * module, the FUSE head) reaches nasgwd over the head protocol
 * (docs/head-protocol.md). C, because those modules are C.
 *
 * A client holds a small pool of connections to one nasgwd and spreads calls
 * over them; many calls may be outstanding at once (pipelined). Every call
 * names the caller's credentials: nasgwd makes the permission checks.
 *
 * Results: 0 (or a byte count) on success, a negated Linux errno on failure.
 * nasgw_client_last_message() gives nasgwd's message for the calling
 * thread's last failure.
 *
 * Reconnection: when nasgwd goes away (restart, crash) the client reconnects
 * by itself, with backoff, for up to reconnect_timeout_ms. A call that was
 * not yet sent is sent once a connection is back. A call in flight when the
 * connection broke is sent again if repeating it is harmless (reads,
 * writes, lookups, attribute changes, opens...); otherwise (create, remove,
 * rename, link, xattr changes) it fails with -EAGAIN: it may or may not have
 * been done, and the caller decides (look, then retry). A call that cannot
 * be sent before the reconnect timeout fails with -ENOTCONN, and one whose
 * connection broke under it more than 8 times with -EIO. Open files are
 * opened again on a nasgwd that lost the session (a restart), so handles
 * and opens survive restarts; byte-range locks are taken again too (see
 * nasgw_lock). Every request is first checked with
 * nasgwd's own decoder: one it would refuse fails here, with -EINVAL or the
 * errno nasgwd would give, and never reaches the socket.
 *
 * Thread-safety: every function may be called from any thread. Async
 * callbacks run on the library's threads: they must not block, and must not
 * make synchronous calls on the same client (on a reader thread such a call
 * could wait for a reply only that thread would read: it fails at once with
 * -EDEADLK). A head whose completions may call back in (Ganesha's) hands
 * them to its own threads.
 */
#ifndef NASGW_CLIENT_H
#define NASGW_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nasgw_client nasgw_client;

#define NASGW_IO_MAX (1u << 20) /* largest read or write in one call */
#define NASGW_NAME_MAX 255
#define NASGW_READDIR_MAX 1024

enum nasgw_type {
  NASGW_TYPE_REG = 1,
  NASGW_TYPE_DIR = 2,
  NASGW_TYPE_LNK = 3,
  NASGW_TYPE_FIFO = 4,
  NASGW_TYPE_SOCK = 5,
  NASGW_TYPE_CHR = 6,
  NASGW_TYPE_BLK = 7,
};

/* A file, as nasgwd issued its handle: stable across nasgwd and head
 * restarts (inode numbers are never reused; the generation, random, tells a
 * deleted inode's handle: -ESTALE). Only nasgwd can make one: `mac` covers
 * the other fields with a key that never leaves nasgwd, and a handle it did
 * not issue (forged, altered, of another reserve, or in another scope) is
 * refused with -EBADMSG. `scope` is the directory of the export the handle
 * was issued through (nasgw_mount_path); a handle is honoured only in its
 * scope, and every handle a call returns is issued in the scope of the
 * handle the call was given. Heads keep handles whole and hand them back;
 * they may store them (docs/head-protocol.md). */
#define NASGW_MAC_BYTES 16
typedef struct nasgw_handle {
  uint32_t volume;
  uint64_t ino;
  uint64_t gen;
  uint32_t snap;  /* 0: the live file system */
  uint64_t scope; /* an inode of `volume`: the export's directory */
  uint8_t mac[NASGW_MAC_BYTES];
} nasgw_handle;

/* The number a head shows for an object (st_ino, an NFS fileid, a FUSE node
 * id): its inode number in the live volume; in a snapshot (or a .snapshot
 * directory, snap 0xFFFFFFFF) the inode number (below 2^40) with the
 * snapshot id's low 23 bits above it and the top bit set, so the same file
 * live and in each snapshot are different objects to clients. */
/* Every object reached through a snapshot has this attribute (nasgw_getxattr;
 * not listed, not settable): the snapshot's creation time as
 * "SECONDS.NANOSECONDS" since the Unix epoch (fs::kSnapshotCreatedXattr). */
#define NASGW_XATTR_SNAPSHOT_CREATED "system.nasgw.snapshot_created"

static inline uint64_t nasgw_shown_ino(const nasgw_handle* h) {
  if (h->snap == 0) return h->ino;
  return (1ull << 63) | ((uint64_t)(h->snap & 0x7FFFFFu) << 40) | (h->ino & ((1ull << 40) - 1));
}

typedef struct nasgw_time {
  int64_t sec;
  uint32_t nsec;
} nasgw_time;

typedef struct nasgw_attr {
  nasgw_handle handle;
  uint32_t type; /* enum nasgw_type */
  uint32_t mode; /* permission bits, 07777 */
  uint32_t uid, gid, nlink;
  uint64_t size, blocks /* 512-byte units */, rdev;
  uint64_t change; /* bumps on every change (NFSv4 change attribute) */
  nasgw_time atime, mtime, ctime, btime;
  uint32_t flags; /* NASGW_ATTR_* */
} nasgw_attr;
/* The object has a POSIX access ACL, a default ACL: nasgw_getxattr of
 * system.posix_acl_access, system.posix_acl_default reads them. */
#define NASGW_ATTR_ACL_ACCESS 1u
#define NASGW_ATTR_ACL_DEFAULT 2u

typedef struct nasgw_cred {
  uint32_t uid, gid;
  uint32_t ngroups; /* at most 1024 */
  const uint32_t* groups;
} nasgw_cred;

#define NASGW_SET_MODE 1u
#define NASGW_SET_UID 2u
#define NASGW_SET_GID 4u
#define NASGW_SET_SIZE 8u
#define NASGW_SET_ATIME 16u
#define NASGW_SET_ATIME_NOW 32u
#define NASGW_SET_MTIME 64u
#define NASGW_SET_MTIME_NOW 128u
typedef struct nasgw_sattr {
  uint32_t mask;
  uint32_t mode, uid, gid;
  uint64_t size;
  nasgw_time atime, mtime;
} nasgw_sattr;

#define NASGW_ACCESS_READ 4u
#define NASGW_ACCESS_WRITE 2u
#define NASGW_ACCESS_EXEC 1u

#define NASGW_CREATE_OPEN 1u      /* open the new file too (release it later) */
#define NASGW_CREATE_UNCHECKED 2u /* an existing regular file is returned, not -EEXIST */
/* The mode is not narrowed by the caller's umask m yet: nasgwd applies m
 * unless the directory has a default ACL (then the ACL narrows the mode, as
 * Linux does on file systems with POSIX ACLs). */
#define NASGW_CREATE_UMASK(m) (4u | (((uint32_t)(m)&0777u) << 16))
#define NASGW_RENAME_NOREPLACE 1u
#define NASGW_RENAME_EXCHANGE 2u /* both exist and trade their files atomically */
#define NASGW_READDIR_PLUS 1u    /* attributes with each entry */
#define NASGW_READDIR_XATTRS 2u  /* with PLUS: each entry's extended attributes (nasgw_readdir_xattrs) */
/* A live directory lists its `.snapshot` directory too, after every other
 * entry (an NFS export's Show_Snapshot_Dir). */
#define NASGW_READDIR_SNAPSHOT_DIR 4u
/* How durable a write must be when it completes (NFS's stable_how); the
 * result says the level reached, at least the one asked. */
#define NASGW_UNSTABLE 0u                  /* may be held in nasgwd's memory until nasgw_fsync */
#define NASGW_DATA_SYNC 1u                 /* the data, and what reading it back needs, are durable */
#define NASGW_FILE_SYNC 2u                 /* the data and all of the file's metadata are durable */
#define NASGW_WRITE_STABLE NASGW_FILE_SYNC /* the name from before there were levels */
/* OR'd into NASGW_UNSTABLE by a head that answers the write to its own
 * client with a write verifier that cannot follow nasgwd's (NFSv3 through
 * Ganesha, whose v3 verifier is its own): the library holds the file until
 * an nasgw_fsync of it, made after this write was answered, returns the
 * same verifier. Should nasgwd's verifier change meanwhile (it restarted,
 * crashed, opened the domain again), verifier_changed is called with lost =
 * 1 before any reply carrying the new verifier is delivered and before the
 * new connection takes a call; a head that cannot give its clients a new
 * verifier then restarts (FSAL_NASGW restarts ganesha.nfsd in place). Never
 * sent to nasgwd. */
#define NASGW_HOLD_UNSTABLE 0x100u
#define NASGW_XATTR_CREATE 1u
#define NASGW_XATTR_REPLACE 2u

typedef struct nasgw_dirent {
  char name[NASGW_NAME_MAX + 1];
  uint64_t ino;
  uint32_t type;
  uint64_t cookie; /* pass back to continue after this entry */
} nasgw_dirent;

typedef struct nasgw_fs_stats {
  uint64_t total_bytes, free_bytes, files;
} nasgw_fs_stats;

typedef struct nasgw_client_options {
  const char* socket_path;       /* nasgwd's head socket */
  const char* client_name;       /* for nasgwd's logs, e.g. "ganesha" */
  uint32_t connections;          /* 1..16; 0: 2 */
  uint32_t reconnect_timeout_ms; /* 0: 60000 */
  uint32_t connect_timeout_ms;   /* first connection; 0: 5000 */
  /* Called when nasgwd's write verifier changes (not for the first one):
   * held is the old one, now the new one; lost is 1 when writes held under
   * the old one (NASGW_HOLD_UNSTABLE) may be lost. On the library's thread,
   * before the reply or connection that brought the new verifier goes on,
   * with no lock of the library held; it may not return (a restart). While
   * it runs for a loss, no other reply carrying a verifier is delivered and
   * no connection takes calls. Held files whose WRITE or FSYNC finds them
   * gone (-ESTALE) are held no longer. */
  void (*verifier_changed)(void* arg, uint64_t held, uint64_t now, int lost);
  void* verifier_arg;
  /* Files held one by one (NASGW_HOLD_UNSTABLE) at most; 0: 1048576. Past
   * it, further held writes are held as a whole: no fsync releases them
   * until nasgwd's verifier changes, which then reports them lost. */
  uint32_t held_files_max;
  /* Called when nasgwd recalls one of this client's leases (nasgw_lease):
   * another head's operation needs all of it back (break_to 0) or all but
   * reading (NASGW_LEASE_READ). On a connection's reader thread: it must
   * not block, nor call the library synchronously; hand it to the head's
   * own thread, which then releases or downgrades the lease. NULL: recalls
   * are ignored (the lease is revoked at nasgwd's deadline). */
  void (*recall)(void* arg, uint32_t volume, uint64_t ino, uint64_t owner, uint32_t break_to);
  void* recall_arg;
  /* A call that meets another head's lease being recalled (-EINPROGRESS):
   * 0, it fails at once (the head retries: Ganesha answers NFS4ERR_DELAY,
   * as knfsd does); else the library sends it again, backing off from 5
   * to 100 ms, for up to this many ms, and then fails. */
  uint32_t recall_wait_ms;
} nasgw_client_options;

/* Fails when no connection is up within connect_timeout_ms, with why the
 * last attempt failed (nasgw_client_last_message names the socket):
 * -EACCES at once when its permissions refuse us, -EMFILE or -ENFILE when
 * nasgwd refused the HELLO at a connection limit, -ENOTCONN otherwise. */
int nasgw_client_open(const nasgw_client_options* options, nasgw_client** out);
/* Ends the session (GOODBYE: nasgwd releases its opens and locks at once;
 * if nasgwd cannot be reached within 2 s, they go when the session's grace
 * time runs out), then cuts every connection; calls still waiting fail with
 * -ENOTCONN (or -ESHUTDOWN). Call it after the last call has returned. */
void nasgw_client_close(nasgw_client* c);
const char* nasgw_client_last_message(void);
/* nasgwd's node name, from the latest connection, into buf. */
int nasgw_client_node_name(nasgw_client* c, char* buf, size_t size);
/* nasgwd's write verifier, as the latest HELLO, WRITE or FSYNC reply this
 * client received carried it: a random value nasgwd draws every time it
 * opens the domain, so it changes whenever data written NASGW_UNSTABLE may
 * have been lost (nasgwd restarted or crashed, the domain moved). 0 before
 * the first one, or while nasgwd has no domain open. A head that needs the
 * verifier of one write or fsync takes it from that call's result. */
uint64_t nasgw_client_write_verifier(nasgw_client* c);
/* Files with writes held (NASGW_HOLD_UNSTABLE) that no fsync covered yet
 * (those held as a whole past held_files_max count as one). */
uint32_t nasgw_client_held_files(nasgw_client* c);

/* A volume's root, or a directory in it by path ("a/b": names joined by
 * '/', walked with cr's search permission): the root of an export. The
 * directory is a scope: its handle, and every handle reached from it, is
 * honoured only within it (a directory outside, e.g. renamed out, is
 * -ESTALE), and LOOKUP ".." at it gives itself. nasgw_mount is path "". */
int nasgw_mount(nasgw_client* c, const nasgw_cred* cr, const char* volume, nasgw_attr* root);
int nasgw_mount_path(nasgw_client* c, const nasgw_cred* cr, const char* volume, const char* path, nasgw_attr* root);
int nasgw_statfs(nasgw_client* c, const nasgw_cred* cr, uint32_t volume, nasgw_fs_stats* out);
int nasgw_lookup(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name, nasgw_attr* out);
int nasgw_getattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, nasgw_attr* out);
/* The object with inode number ino, its handle issued in the scope of
 * directory dir (the mount's): for a head that must turn a bare inode number
 * back into a handle (FUSE's open-by-handle). -EPERM for an unprivileged
 * head; -ESTALE when there is no such object (or, in a sub-directory scope,
 * it is not a directory below it). */
int nasgw_get_inode(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, uint64_t ino, nasgw_attr* out);
int nasgw_setattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const nasgw_sattr* s, nasgw_attr* out);
int nasgw_access(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint32_t want, uint32_t* granted);
/* symlink: the target for NASGW_TYPE_LNK, else NULL. */
int nasgw_create(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name, uint32_t type,
                 uint32_t mode, uint64_t rdev, const char* symlink, uint32_t flags, nasgw_attr* out);
int nasgw_link(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const nasgw_handle* dir, const char* name,
               nasgw_attr* out);
int nasgw_unlink(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name);
int nasgw_rmdir(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name);
int nasgw_rename(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name,
                 const nasgw_handle* newdir, const char* newname, uint32_t flags);
/* Returns the target's length (NUL-terminated in buf when it fits). */
int nasgw_readlink(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, char* buf, size_t size);
/* Up to max (<= 1024) entries after cookie (0: from the start); attrs may be
 * NULL (else max of them, with NASGW_READDIR_PLUS). */
int nasgw_readdir(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, uint64_t cookie, uint32_t max,
                  uint32_t flags, nasgw_dirent* entries, nasgw_attr* attrs, uint32_t* count, int* eof);
/* An entry's extended attributes, from a listing with NASGW_READDIR_XATTRS:
 * when `carried`, every attribute the caller could read of it, names and
 * values (at most NASGW_ENTRY_XATTR_BYTES, each counted as name + 1 + 4 +
 * value); else (too many, or the caller may not read the entry) ask with
 * nasgw_listxattr/nasgw_getxattr. Read with nasgw_entry_listxattr and
 * nasgw_entry_getxattr, which answer as those do. */
#define NASGW_ENTRY_XATTR_BYTES 1024
typedef struct nasgw_entry_xattrs {
  int carried;
  uint32_t len; /* bytes of buf used: name, NUL, u32 length (little endian), value; ... */
  char buf[NASGW_ENTRY_XATTR_BYTES];
} nasgw_entry_xattrs;
/* nasgw_readdir, and with NASGW_READDIR_XATTRS (and PLUS) each entry's
 * extended attributes in xattrs (max of them). */
int nasgw_readdir_xattrs(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, uint64_t cookie, uint32_t max,
                         uint32_t flags, nasgw_dirent* entries, nasgw_attr* attrs, nasgw_entry_xattrs* xattrs,
                         uint32_t* count, int* eof);
/* -EAGAIN when x was not carried (ask nasgwd); else as nasgw_getxattr and
 * nasgw_listxattr (size 0: the length; -ERANGE: too small; -ENODATA). */
int64_t nasgw_entry_getxattr(const nasgw_entry_xattrs* x, const char* name, void* buf, size_t size);
int64_t nasgw_entry_listxattr(const nasgw_entry_xattrs* x, char* buf, size_t size);
/* The name of dir's entry that matches `name` in another case (the exact
 * name when it exists), into out; returns its length (NUL-terminated in out
 * when it fits), -ENOENT when none does. */
int nasgw_find_caseless(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name, char* out,
                        size_t size);
/* Each open needs one release. Opens and releases of one file may overlap
 * from different threads in any order: nasgwd keeps each open by its id. */
int nasgw_open(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint32_t access, nasgw_attr* out);
int nasgw_release(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h);
/* Returns bytes read (< len only at the end of the file). */
int64_t nasgw_read(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, void* buf,
                   uint32_t len, int* eof);
/* What a write did. Data written NASGW_UNSTABLE is durable once an
 * nasgw_fsync of the file returns the same verifier; a different one means
 * it may have been lost, and the caller writes it again (NFS's COMMIT
 * rule). */
typedef struct nasgw_write_result {
  uint32_t stable;   /* the level reached: NASGW_UNSTABLE, NASGW_DATA_SYNC or NASGW_FILE_SYNC */
  uint64_t verifier; /* nasgwd's write verifier when it executed the write (never 0) */
  nasgw_attr post;   /* the file's attributes after the write */
} nasgw_write_result;
/* stable: NASGW_UNSTABLE, NASGW_DATA_SYNC or NASGW_FILE_SYNC; out may be NULL. */
int64_t nasgw_write(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, const void* buf,
                    uint32_t len, uint32_t stable, nasgw_write_result* out);
/* NFS's COMMIT: returns once everything written to the file is durable;
 * *verifier (when not NULL) is nasgwd's write verifier then (see
 * nasgw_write_result). */
int nasgw_fsync(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t* verifier);
/* fallocate(2), with Linux's mode bits: 0 or NASGW_FALLOC_KEEP_SIZE
 * allocates (checks the space is there and, without KEEP_SIZE, grows the
 * file to offset + len); NASGW_FALLOC_PUNCH_HOLE | NASGW_FALLOC_KEEP_SIZE
 * punches a hole; NASGW_FALLOC_ZERO_RANGE (KEEP_SIZE optional) zeroes.
 * -EOPNOTSUPP for any other mode, -EINVAL for len 0, -EFBIG past the
 * largest file, -ENOSPC. out (may be NULL): the attributes after. */
#define NASGW_FALLOC_KEEP_SIZE 0x01u
#define NASGW_FALLOC_PUNCH_HOLE 0x02u
#define NASGW_FALLOC_ZERO_RANGE 0x10u
int nasgw_fallocate(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint32_t mode, uint64_t offset,
                    uint64_t len, nasgw_attr* out);
/* lseek(2)'s SEEK_DATA (hole 0) and SEEK_HOLE (hole 1): *out is where the
 * next data or hole starts at or after offset (the end of the file is a
 * hole). -ENXIO when offset is at or past the end, or no data follows. */
int nasgw_seek(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, int hole, uint64_t* out);
/* size 0: returns the value's length. */
int64_t nasgw_getxattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const char* name, void* buf,
                       size_t size);
int nasgw_setxattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const char* name, const void* value,
                   size_t len, uint32_t flags);
/* NUL-separated names, as listxattr(2); size 0: returns the length needed. */
int64_t nasgw_listxattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, char* buf, size_t size);
int nasgw_removexattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const char* name);

/* Asynchronous I/O. The call returns 0 once queued (or -errno), and `done`
 * runs later with the result (bytes, or -errno). Buffers and credentials
 * must stay valid until then. */
typedef void (*nasgw_io_done)(void* arg, int64_t result, int eof);
int nasgw_read_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, void* buf,
                     uint32_t len, nasgw_io_done done, void* arg);
/* result: bytes written, or -errno; r: what the write did (NULL on failure),
 * valid during the callback only. */
typedef void (*nasgw_write_done)(void* arg, int64_t result, const nasgw_write_result* r);
int nasgw_write_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, const void* buf,
                      uint32_t len, uint32_t stable, nasgw_write_done done, void* arg);
/* result: 0 or -errno; verifier as nasgw_fsync gives it (0 on failure). */
typedef void (*nasgw_fsync_done)(void* arg, int result, uint64_t verifier);
int nasgw_fsync_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, nasgw_fsync_done done, void* arg);
typedef void (*nasgw_attr_done)(void* arg, int result, const nasgw_attr* attr);
int nasgw_getattr_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, nasgw_attr_done done, void* arg);

/* Byte-range locks, arbitrated by nasgwd: every head (NFS, SMB, FUSE) and
 * every client of them sees the same locks. Advisory (reads and writes do
 * not check them), regular files only (-EINVAL otherwise), non-blocking.
 *
 * A lock belongs to (this client's session, owner): `owner` is any u64 the
 * head chooses (an NLM or NFSv4 lock owner...). Within one owner the rules
 * are POSIX fcntl's: a lock replaces the owner's locks in its range (upgrade,
 * downgrade, split) and merges with adjacent ones of its type; an unlock
 * splits. Different owners conflict where their ranges overlap and either
 * lock is a write lock, also two owners of the same client. `length` 0 means
 * to the end of the file (whatever its size); a range may not end beyond
 * 2^64 - 1 (-EINVAL). Locks are not tied to opens: the head unlocks (on
 * close, as POSIX does, if it wants that). All of a client's locks end with
 * nasgw_client_close (or, if the client dies, when its session's grace time
 * runs out).
 *
 * Returns: 0; -EAGAIN when another owner holds a conflicting lock, with
 * *conflict (if not NULL) describing it (the lowest-starting one); -ENOLCK
 * past nasgwd's lock limits (an unlock that would split a range can get it
 * too, as with fcntl), or for an owner whose locks were lost (below);
 * -ESTALE for a deleted file; -EACCES without read permission on the file
 * (or ownership: knfsd's rule for NLM), whatever the lock type.
 * Locking again what the owner holds, and unlocking what it does not hold,
 * succeed: so the calls are resent safely after a lost connection.
 *
 * Restarts: the client keeps a record of the locks it holds and takes them
 * again, with the credentials of each owner's latest lock call, when nasgwd
 * lost the session (it restarted), before that connection takes calls. A
 * lock that meets a conflict then (another client took the range meanwhile)
 * or is refused otherwise (limits, permissions) is lost: the client logs a
 * WARN line, releases that owner's other locks on that file, and every
 * nasgw_lock and nasgw_unlock of that (file, owner) fails with -ENOLCK
 * ("locks lost") until the owner unlocks the whole file (start 0, length 0),
 * which succeeds and clears the mark. Locks of a deleted file are dropped.
 *
 * nasgw_unlock and nasgw_testlock do not look the handle up (unlock never
 * gives -ESTALE: a deleted file's locks can be released). nasgw_testlock
 * returns 0 and fills *conflict: type 0 when nothing conflicts with the
 * lock `owner` would take, else the conflicting lock. */
#define NASGW_LOCK_READ 1u
#define NASGW_LOCK_WRITE 2u
typedef struct nasgw_lock_info {
  uint32_t type; /* NASGW_LOCK_READ or NASGW_LOCK_WRITE; 0: no lock */
  uint64_t start;
  uint64_t length;  /* 0: to the end of the file */
  uint64_t session; /* the holder's session as nasgwd numbers them: for display only */
  uint64_t owner;   /* the holder's owner, as its head chose it: for display only */
} nasgw_lock_info;
int nasgw_lock(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type,
               uint64_t start, uint64_t length, nasgw_lock_info* conflict);
/* nasgw_lock with flags: NASGW_LOCK_RECLAIM for a lock the client held
 * before this head (or nasgwd) restarted, taken again in the head's grace
 * period (an NFSv4 or NLM reclaim): nasgwd grants it over conflicting locks
 * of sessions that have no connection (a head that died, whose session
 * nasgwd still keeps), taking those ranges from them. Other flags: -EINVAL. */
#define NASGW_LOCK_RECLAIM 1u
int nasgw_lock_flags(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type,
                     uint64_t start, uint64_t length, uint32_t flags, nasgw_lock_info* conflict);
int nasgw_unlock(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint64_t start,
                 uint64_t length);
int nasgw_testlock(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type,
                   uint64_t start, uint64_t length, nasgw_lock_info* conflict);

/* Share reservations, arbitrated by nasgwd across heads: an SMB open's
 * share mode, an NFSv4 OPEN's share_access and share_deny. (this client's
 * session, owner) holds at most one per file: `access` is what the open
 * does and `deny` what it refuses to other opens, each of NASGW_SHARE_READ,
 * _WRITE, _DELETE. A call replaces the owner's reservation (NFSv4
 * OPEN_UPGRADE, OPEN_DOWNGRADE); access 0 and deny 0 release it (never an
 * error, nor -ESTALE: a deleted file's reservation can be released).
 * Two owners conflict when either's access meets the other's deny.
 *
 * Returns: 0; -EBUSY when another owner's reservation conflicts (SMB's
 * sharing violation, NFS4ERR_SHARE_DENIED); -EACCES without read (write)
 * permission for NASGW_SHARE_READ (_WRITE) access; -EINVAL for something
 * that is not a regular file, or unknown bits; -ENOLCK past nasgwd's lock
 * limits (a reservation counts as one lock); -ESTALE for a deleted file.
 * The reservation is not tied to nasgw_open: release it on close.
 *
 * Restarts: kept and taken again like locks (above); one refused then is
 * dropped with a WARN line. */
/* Leases, arbitrated by nasgwd across heads: what a head lets its client
 * cache (an SMB oplock or lease, an NFSv4 delegation). (session, owner)
 * holds at most one per file: NASGW_LEASE_READ, or NASGW_LEASE_READ |
 * NASGW_LEASE_WRITE; a call replaces it, 0 releases it (never an error).
 * An operation of another head (another client name: a head's sessions
 * are one coherence domain) that a lease stands in the way of (a write or
 * a change of size or an open for writing, for any lease; a read or an
 * open for reading, for a write lease) makes nasgwd recall the lease (the
 * recall callback, above) and fails with -EINPROGRESS until the holder
 * gives back what it needs, or until nasgwd revokes the lease (40 s after
 * the recall; its WARN line names it); recall_wait_ms retries it.
 *
 * Returns: 0; -EAGAIN when another head's lease conflicts with this one
 * (it is not recalled: the caller does not take the lease); -EACCES
 * without read permission (and write, for NASGW_LEASE_WRITE); -EINVAL for
 * something that is not a regular file, or a bad type; -ENOLCK past the
 * lock limits; -ESTALE for a deleted file. Taken again after a restart as
 * share reservations are; one refused then is dropped with a WARN line. */
#define NASGW_LEASE_READ 1u
#define NASGW_LEASE_WRITE 2u
int nasgw_lease(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type);

#define NASGW_SHARE_READ 1u
#define NASGW_SHARE_WRITE 2u
#define NASGW_SHARE_DELETE 4u
int nasgw_share(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t access,
                uint32_t deny);

#ifdef __cplusplus
}
#endif

#endif /* NASGW_CLIENT_H */
