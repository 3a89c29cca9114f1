/*
 * vfs_nasgw: Samba's head. A VFS module that serves a share from nasgwd
 * over the head protocol (fsal/client): every file operation goes to nasgwd
 * with the connected user's credentials, and nasgwd makes the permission
 * checks. Nothing is read from or written to the local file system: the
 * share's `path` is a name only (docs/smb.md).
 *
 *   [share]
 *     path = /nasgw/vol1               (any absolute path: a name)
 *     vfs objects = nasgw              (or the module's absolute path)
 *     nasgw:socket = /run/nasgw/head.sock
 *     nasgw:volume = vol1
 *     nasgw:subpath = projects/a       (optional: a directory of the volume)
 *
 * Paths. Samba 4.17 opens files relative to a directory fsp (openat) or to
 * its current directory, which it moves with chdir to pin a parent while it
 * opens a name in it. This module keeps that current directory as a path
 * and a handle; a path under the share's path is walked from the share's
 * root handle, one LOOKUP per name, following symbolic links the way the
 * kernel would (Samba then refuses what resolves outside the share, as it
 * does on a local file system). An fsp carries its nasgwd handle in an fsp
 * extension and a fake descriptor (vfs_fake_fd: the read end of a pipe
 * whose write end is closed) so that Samba's checks of fsp descriptors hold
 * while nothing can reach a local file through it.
 *
 * Every function of the VFS table is set, so that no call falls through to
 * vfs_default and the local file system: what nasgw does not offer answers
 * ENOSYS (or NT_STATUS_NOT_SUPPORTED), and Samba's generic layers (DOS
 * attributes in the user.DOSATTRIB xattr, NT ACLs mapped from POSIX ACLs)
 * are reached through their own entries, which call back into this module.
 *
 * Reads, writes and flushes are asynchronous: nasgw_*_async send the call,
 * the library's thread hands the result to smbd's event loop through a
 * tevent_threaded_context, and smbd never waits for nasgwd on a data call.
 * Writes are DATA_SYNC: SMB has no write verifier to tell a client that
 * acknowledged data was lost, so a write is answered once nasgwd holds it
 * durably (its intent log for small writes, docs/cache.md).
 *
 * Previous Versions: the volume's snapshots are listed by the UTC time
 * their names carry, else by when they were taken
 * (FSCTL_SRV_ENUMERATE_SNAPSHOTS), and a name
 * with that @GMT label (Samba's twrp) resolves under the share's root's
 * `.snapshot/<snapshot>`, read-only ("snapshots" below; docs/smb.md).
 */

#include "includes.h"
#include "smbd/smbd.h"
#include "lib/util/tevent_unix.h"
#include "lib/util/tevent_ntstatus.h"
#include "system/filesys.h"
#include "smbd/globals.h"
#include "source3/modules/offload_token.h"
#include "locking/share_mode_lock.h"
#include "lib/util/dlinklist.h"
#include "librpc/gen_ndr/open_files.h"
#include "include/ntioctl.h"

#include "nasgw_client.h"

/* source3/include/messages.h (libsmbconf): that header needs generated
 * NDR headers Samba's build does not install; this is its prototype. */
struct server_id messaging_server_id(const struct messaging_context *msg_ctx);

#define NASGW_MODULE "nasgw"
#define NASGW_SYMLINK_MAX 40 /* links followed in one path, as Linux's MAXSYMLINKS */
#define NASGW_DIR_BATCH 128  /* directory entries fetched per READDIR */

/* One client per smbd process (smbd forks one per SMB connection), shared
 * by that process's tree connects. Opened after the fork, in connect. */
static nasgw_client *g_client;
static char *g_client_socket;
static unsigned g_client_refs;

/* The event loop's threaded context, for handing results back from the
 * client library's threads. smbd has one event context per process. */
static struct tevent_context *g_ev;
static struct tevent_threaded_context *g_tctx;

/* A snapshot as Previous Versions shows it. */
struct nasgw_snap {
	time_t at; /* its label's time, UTC: @GMT-YYYY.MM.DD-HH.MM.SS */
	uint32_t id;
	const char *name;
	nasgw_handle root; /* the share's root as it was in it */
};

struct nasgw_conn {
	nasgw_client *client;
	char *connectpath; /* the share's path, as Samba names it */
	nasgw_handle root;
	char *cwd;	   /* absolute, under connectpath */
	nasgw_handle cwd_h;
	/* The directory being listed, whose last READDIR batch (with each
	 * entry's attributes) answers the path-reference open Samba makes of
	 * every entry it lists (for its DOS attributes) without a LOOKUP. */
	struct nasgw_dir *listing;
	/* The snapshots Previous Versions shows (see "snapshots" below),
	 * newest first, one per label; NULL until first listed. */
	TALLOC_CTX *snap_ctx;
	struct nasgw_snap *snaps;
	size_t nsnaps;
};

/* An fsp's file. */
struct nasgw_fh {
	nasgw_handle h;
	uint32_t type;
	bool opened; /* nasgw_open done: nasgw_release at close */
	/* The attributes the open found, for the fstat Samba makes right
	 * after every open (vfs_stat_fsp); used once. */
	bool fresh;
	nasgw_attr attr;
	/* A path reference opened from a listing: the entry's extended
	 * attributes as the listing carried them (Samba then reads the DOS
	 * attributes and lists the attributes for the EA size of every entry
	 * it lists); NULL once the fsp changes an attribute, or when the
	 * listing did not carry them. */
	nasgw_entry_xattrs *listed_xattrs;
	/* A real open of a regular file: its owner on nasgwd (unique in
	 * this process), for its share reservation and its lease. */
	uint64_t owner;
	bool shared; /* a share reservation is held: nasgw_filesystem_sharemode */
	/* The lease nasgwd holds for it (NASGW_LEASE_*), mirroring Samba's
	 * oplock or lease on the fsp: see "leases" below. */
	uint32_t lease;
	bool recalled;	   /* nasgwd recalled it: give back down to break_to */
	uint32_t break_to;
	files_struct *fsp;
	vfs_handle_struct *handle;
	nasgw_cred cr; /* the opener's, for lease calls made outside a request */
	uint32_t *groups;
	struct tevent_immediate *im; /* the check after the open (Samba grants after it) */
	struct tevent_timer *poll;   /* while a recalled lease is being broken */
	struct nasgw_fh *prev, *next; /* g_leasable */
};

/* Real opens of regular files in this process: a recall names one by its
 * owner. */
static struct nasgw_fh *g_leasable;
static uint64_t g_last_owner;

/* A directory being read: DIR* to Samba. */
struct nasgw_dir {
	nasgw_handle h;
	uint64_t next;	/* cookie to continue from */
	long pos;	/* telldir of the entry after the last returned */
	bool eof;
	uint32_t count, at;
	uint32_t taken; /* `at` when entry at - 1 was last taken by nasgw_listed */
	nasgw_dirent *ents;
	nasgw_attr *attrs;
	nasgw_entry_xattrs *xattrs; /* each entry's, when nasgwd carried them */
	struct dirent de;
};

static bool nasgw_listed(struct nasgw_conn *nc, const nasgw_handle *dir, const char *name, nasgw_attr *out,
			 const nasgw_entry_xattrs **xattrs);

/* ---- credentials */

/* The user smbd acts for now (become_user / become_root). */
static void nasgw_cred_of(connection_struct *conn, nasgw_cred *cr)
{
	const struct security_unix_token *ut = get_current_utok(conn);

	cr->uid = ut->uid;
	cr->gid = ut->gid;
	cr->ngroups = ut->ngroups > 1024 ? 1024 : ut->ngroups;
	cr->groups = (const uint32_t *)ut->groups;
}

/* ---- errors */

static int nasgw_fail(int rc)
{
	errno = rc < 0 ? -rc : EIO;
	return -1;
}

/* ---- attributes */

static mode_t nasgw_type_mode(uint32_t type)
{
	switch (type) {
	case NASGW_TYPE_REG: return S_IFREG;
	case NASGW_TYPE_DIR: return S_IFDIR;
	case NASGW_TYPE_LNK: return S_IFLNK;
	case NASGW_TYPE_FIFO: return S_IFIFO;
	case NASGW_TYPE_SOCK: return S_IFSOCK;
	case NASGW_TYPE_CHR: return S_IFCHR;
	case NASGW_TYPE_BLK: return S_IFBLK;
	}
	return 0;
}

static struct timespec nasgw_ts(nasgw_time t)
{
	struct timespec ts = { .tv_sec = t.sec, .tv_nsec = t.nsec };
	return ts;
}

static void nasgw_to_stat(const nasgw_attr *a, SMB_STRUCT_STAT *st)
{
	ZERO_STRUCTP(st);
	/* The device number names the volume: file ids (dev, ino) are unique
	 * per volume, as inode numbers are. */
	st->st_ex_dev = (dev_t)0x6e610000u + a->handle.volume;
	/* A snapshot's objects have numbers of their own (the snapshot id
	 * above the inode number): Samba's file ids, and so its share modes
	 * and leases, must not take them for the live files. */
	st->st_ex_ino = nasgw_shown_ino(&a->handle);
	st->st_ex_mode = nasgw_type_mode(a->type) | (a->mode & 07777);
	st->st_ex_nlink = a->nlink;
	st->st_ex_uid = a->uid;
	st->st_ex_gid = a->gid;
	st->st_ex_rdev = a->rdev;
	st->st_ex_size = a->size;
	st->st_ex_atime = nasgw_ts(a->atime);
	st->st_ex_mtime = nasgw_ts(a->mtime);
	st->st_ex_ctime = nasgw_ts(a->ctime);
	st->st_ex_btime = nasgw_ts(a->btime);
	st->st_ex_blksize = 64 * 1024;
	st->st_ex_blocks = a->blocks;
}

/* ---- fsp extensions */

static struct nasgw_fh *nasgw_fh_of(vfs_handle_struct *handle, const files_struct *fsp)
{
	if (fsp == NULL) {
		return NULL;
	}
	return (struct nasgw_fh *)VFS_FETCH_FSP_EXTENSION(handle, fsp);
}

static bool nasgw_is_cwd_fsp(const files_struct *dirfsp)
{
	return dirfsp == NULL || fsp_get_pathref_fd(dirfsp) == AT_FDCWD;
}

/* The file of fsp and the caller's credentials, for a call on an open file;
 * NULL, errno EBADF, when fsp is not one of this module's. */
static struct nasgw_fh *nasgw_begin(vfs_handle_struct *handle, const files_struct *fsp, nasgw_cred *cr)
{
	struct nasgw_fh *fh = nasgw_fh_of(handle, fsp);

	if (fh == NULL) {
		errno = EBADF;
		return NULL;
	}
	nasgw_cred_of(handle->conn, cr);
	return fh;
}

/* ---- paths */

/* Splits `path` into names (in place, in a talloc copy); "" and "." vanish. */
static char **nasgw_split(TALLOC_CTX *mem_ctx, const char *path, size_t *n)
{
	char *copy = talloc_strdup(mem_ctx, path);
	char **names = NULL;
	char *save = NULL;
	char *p;

	*n = 0;
	if (copy == NULL) {
		return NULL;
	}
	names = talloc_array(mem_ctx, char *, strlen(path) / 2 + 2);
	if (names == NULL) {
		return NULL;
	}
	for (p = strtok_r(copy, "/", &save); p != NULL; p = strtok_r(NULL, "/", &save)) {
		if (strcmp(p, ".") != 0) {
			names[(*n)++] = p;
		}
	}
	return names;
}

/* The path below the share's path of absolute `path`, or NULL when it is
 * not under it. */
static const char *nasgw_below_share(struct nasgw_conn *nc, const char *path)
{
	size_t len = strlen(nc->connectpath);

	if (strcmp(nc->connectpath, "/") == 0) {
		return path + 1;
	}
	if (strncmp(path, nc->connectpath, len) != 0) {
		return NULL;
	}
	if (path[len] == '\0') {
		return "";
	}
	if (path[len] != '/') {
		return NULL;
	}
	return path + len + 1;
}

/*
 * Walks `path` from `start` (or, when it is absolute, from `root`: the
 * share's root, live or in a snapshot) to *out. Symbolic links met on the
 * way are followed, and the last one too when `follow`: a relative target
 * from the link's directory, an absolute one from `root` when it points
 * into the share (else ENOENT: outside the share is nothing nasgw serves).
 * ".." at the share's root stays there (nasgwd answers it with the root
 * itself, in a snapshot too).
 */
static int nasgw_walk(vfs_handle_struct *handle, struct nasgw_conn *nc, const nasgw_handle *start,
		      const nasgw_handle *root, const char *path, bool follow, nasgw_attr *out)
{
	TALLOC_CTX *frame = talloc_stackframe();
	nasgw_cred cr;
	nasgw_attr cur;
	bool looked_up;
	size_t n = 0, i;
	char **names;
	int links = 0;
	int rc;

	nasgw_cred_of(handle->conn, &cr);
	if (path[0] == '/') {
		const char *rel = nasgw_below_share(nc, path);

		if (rel == NULL) {
			TALLOC_FREE(frame);
			return -ENOENT;
		}
		path = rel;
		start = root;
	}
	names = nasgw_split(frame, path, &n);
	if (names == NULL) {
		TALLOC_FREE(frame);
		return -ENOMEM;
	}
	if (n == 0) {
		rc = nasgw_getattr(nc->client, &cr, start, out);
		TALLOC_FREE(frame);
		return rc;
	}
	/* The start's type is nasgwd's to check: LOOKUP in a file is ENOTDIR.
	 * `cur` holds only a handle until a LOOKUP fills it (looked_up). */
	memset(&cur, 0, sizeof(cur));
	cur.handle = *start;
	cur.type = NASGW_TYPE_DIR;
	looked_up = false;
	for (i = 0; i < n; i++) {
		nasgw_attr next;
		bool last = i + 1 == n;
		char target[4096];
		char **tnames;
		size_t tn = 0, rest = n - i - 1;
		char **joined;

		if (cur.type != NASGW_TYPE_DIR) {
			TALLOC_FREE(frame);
			return -ENOTDIR;
		}
		rc = nasgw_lookup(nc->client, &cr, &cur.handle, names[i], &next);
		if (rc != 0) {
			TALLOC_FREE(frame);
			return rc;
		}
		if (next.type != NASGW_TYPE_LNK || (last && !follow)) {
			cur = next;
			looked_up = true;
			continue;
		}
		if (++links > NASGW_SYMLINK_MAX) {
			TALLOC_FREE(frame);
			return -ELOOP;
		}
		rc = nasgw_readlink(nc->client, &cr, &next.handle, target, sizeof(target));
		if (rc < 0) {
			TALLOC_FREE(frame);
			return rc;
		}
		if ((size_t)rc >= sizeof(target)) {
			TALLOC_FREE(frame);
			return -ENAMETOOLONG;
		}
		if (target[0] == '/') {
			const char *rel = nasgw_below_share(nc, target);

			if (rel == NULL) {
				TALLOC_FREE(frame);
				return -ENOENT;
			}
			memset(&cur, 0, sizeof(cur));
			cur.handle = *root;
			cur.type = NASGW_TYPE_DIR;
			looked_up = false;
			tnames = nasgw_split(frame, rel, &tn);
		} else {
			tnames = nasgw_split(frame, target, &tn);
		}
		if (tnames == NULL) {
			TALLOC_FREE(frame);
			return -ENOMEM;
		}
		/* Continue with the target's names, then the rest of the path. */
		joined = talloc_array(frame, char *, tn + rest + 1);
		if (joined == NULL) {
			TALLOC_FREE(frame);
			return -ENOMEM;
		}
		memcpy(joined, tnames, tn * sizeof(char *));
		memcpy(joined + tn, names + i + 1, rest * sizeof(char *));
		names = joined;
		n = tn + rest;
		i = (size_t)-1; /* the loop's i++ makes it 0 */
	}
	TALLOC_FREE(frame);
	if (!looked_up) {
		/* A link to its own directory, or to the share's root. */
		return nasgw_getattr(nc->client, &cr, &cur.handle, out);
	}
	*out = cur;
	return 0;
}

/* Where a path relative to dirfsp starts: dirfsp's handle, or for Samba's
 * current directory (AT_FDCWD) ours. */
static int nasgw_start(vfs_handle_struct *handle, struct nasgw_conn *nc, const files_struct *dirfsp,
		       nasgw_handle *start)
{
	const struct nasgw_fh *fh;

	if (nasgw_is_cwd_fsp(dirfsp)) {
		*start = nc->cwd_h;
		return 0;
	}
	fh = nasgw_fh_of(handle, dirfsp);
	if (fh == NULL) {
		return -EBADF;
	}
	*start = fh->h;
	return 0;
}

/* ---- snapshots: SMB Previous Versions
 *
 * nasgwd shows a volume's snapshots the NetApp way: LOOKUP of `.snapshot`
 * in a live directory gives a read-only directory whose entries are the
 * snapshots in which that directory existed, each the directory as it was
 * then (docs/head-protocol.md, Handles). Previous Versions needs a time
 * for each snapshot, its label @GMT-YYYY.MM.DD-HH.MM.SS (UTC), which is
 * also how a client names one (an @GMT path token or an SMB2 TWrp create
 * context: Samba's smb_filename twrp). A name that ends in a UTC time,
 * `<anything>-` or `_` then YYYYMMDDTHHMMSSZ (the names nasgwd's schedules
 * give their snapshots, `<schedule>-YYYYMMDDTHHMMSSZ`), or that is the
 * time alone, or that is an @GMT label itself (vfs_shadow_copy2's default
 * format) is labelled with that time, so an admin can name a snapshot for
 * the time it stands for. Any other snapshot is labelled with the second
 * it was taken in, which every object of a snapshot tells as the attribute
 * NASGW_XATTR_SNAPSHOT_CREATED (one GETXATTR of its root per listing).
 * Neither changes while the snapshot exists. Two snapshots with one label
 * (two schedules at the same second) show once, as the first taken (the
 * lower id): a later snapshot never takes over a label, so a label names
 * one snapshot for as long as that one exists.
 *
 * The list (the share's root's `.snapshot`, one LOOKUP and a READDIR_PLUS
 * per 128 snapshots, whose attributes give each snapshot's root handle) is
 * kept per tree connect. FSCTL_SRV_ENUMERATE_SNAPSHOTS lists again; a label
 * not in the list lists again (a snapshot taken since); a root handle that
 * is stale (a snapshot deleted since) lists again once, then the label is
 * ENOENT. A label stays right as long as it is listed, so no timer.
 */

#define NASGW_SNAPSHOT_DIR ".snapshot"

static bool nasgw_digits(const char *s, size_t n, int *out)
{
	int v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return false;
		}
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

/* The UTC time of a valid date and time (no 31 February), in range of a label. */
static bool nasgw_utc(const int f[6], time_t *out)
{
	struct tm tm, back;
	time_t t;

	if (f[0] < 1970 || f[1] < 1 || f[1] > 12 || f[2] < 1 || f[2] > 31 || f[3] > 23 || f[4] > 59 || f[5] > 59) {
		return false;
	}
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = f[0] - 1900;
	tm.tm_mon = f[1] - 1;
	tm.tm_mday = f[2];
	tm.tm_hour = f[3];
	tm.tm_min = f[4];
	tm.tm_sec = f[5];
	t = timegm(&tm);
	if (t == (time_t)-1 || gmtime_r(&t, &back) == NULL || back.tm_mday != f[2] || back.tm_mon != f[1] - 1) {
		return false;
	}
	*out = t;
	return true;
}

/* The time a snapshot's name carries (above), or false. */
static bool nasgw_snapshot_time(const char *name, time_t *out)
{
	size_t len = strlen(name);
	int f[6];

	if (len >= 16) {
		/* [<anything>- or _]YYYYMMDDTHHMMSSZ */
		const char *s = name + len - 16;

		if ((s == name || s[-1] == '-' || s[-1] == '_') && nasgw_digits(s, 4, &f[0]) &&
		    nasgw_digits(s + 4, 2, &f[1]) && nasgw_digits(s + 6, 2, &f[2]) && s[8] == 'T' &&
		    nasgw_digits(s + 9, 2, &f[3]) && nasgw_digits(s + 11, 2, &f[4]) && nasgw_digits(s + 13, 2, &f[5]) &&
		    s[15] == 'Z') {
			return nasgw_utc(f, out);
		}
	}
	/* @GMT-YYYY.MM.DD-HH.MM.SS */
	if (len == 24 && strncmp(name, "@GMT-", 5) == 0 && name[9] == '.' && name[12] == '.' && name[15] == '-' &&
	    name[18] == '.' && name[21] == '.' && nasgw_digits(name + 5, 4, &f[0]) && nasgw_digits(name + 10, 2, &f[1]) &&
	    nasgw_digits(name + 13, 2, &f[2]) && nasgw_digits(name + 16, 2, &f[3]) &&
	    nasgw_digits(name + 19, 2, &f[4]) && nasgw_digits(name + 22, 2, &f[5])) {
		return nasgw_utc(f, out);
	}
	return false;
}

/* When the snapshot whose root is `root` was taken (nasgwd tells it as an
 * attribute of the snapshot's objects), or false. */
static bool nasgw_snapshot_created(struct nasgw_conn *nc, const nasgw_cred *cr, const nasgw_handle *root,
				   time_t *out)
{
	char buf[48];
	char *end = NULL;
	long long sec;
	int64_t n = nasgw_getxattr(nc->client, cr, root, NASGW_XATTR_SNAPSHOT_CREATED, buf, sizeof(buf) - 1);

	if (n <= 0) {
		return false;
	}
	buf[n] = '\0';
	errno = 0;
	sec = strtoll(buf, &end, 10);
	if (errno != 0 || end == buf || (*end != '.' && *end != '\0') || sec < 0) {
		return false;
	}
	*out = (time_t)sec;
	return true;
}

/* Newest first; for one label, the first taken first. */
static int nasgw_snap_cmp(const void *x, const void *y)
{
	const struct nasgw_snap *a = x, *b = y;

	if (a->at != b->at) {
		return a->at > b->at ? -1 : 1;
	}
	return a->id < b->id ? -1 : (a->id > b->id ? 1 : 0);
}

/* Lists the share's snapshots again (nc->snaps), as the caller. */
static int nasgw_snaps_fetch(vfs_handle_struct *handle, struct nasgw_conn *nc)
{
	TALLOC_CTX *ctx = talloc_new(nc);
	nasgw_dirent *ents = NULL;
	nasgw_attr *attrs = NULL;
	struct nasgw_snap *v = NULL;
	size_t n = 0, cap = 0, i, kept;
	uint64_t cookie = 0;
	nasgw_attr dir;
	nasgw_cred cr;
	int eof = 0;
	int rc;

	if (ctx == NULL) {
		return -ENOMEM;
	}
	ents = talloc_array(ctx, nasgw_dirent, NASGW_DIR_BATCH);
	attrs = talloc_array(ctx, nasgw_attr, NASGW_DIR_BATCH);
	if (ents == NULL || attrs == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	nasgw_cred_of(handle->conn, &cr);
	rc = nasgw_lookup(nc->client, &cr, &nc->root, NASGW_SNAPSHOT_DIR, &dir);
	if (rc != 0) {
		goto fail;
	}
	while (!eof) {
		uint32_t count = 0;

		rc = nasgw_readdir(nc->client, &cr, &dir.handle, cookie, NASGW_DIR_BATCH, NASGW_READDIR_PLUS, ents,
				   attrs, &count, &eof);
		if (rc != 0) {
			goto fail;
		}
		if (count == 0) {
			break;
		}
		for (i = 0; i < count; i++) {
			time_t at;

			cookie = ents[i].cookie;
			if (attrs[i].type != NASGW_TYPE_DIR) {
				continue;
			}
			if (!nasgw_snapshot_time(ents[i].name, &at) &&
			    !nasgw_snapshot_created(nc, &cr, &attrs[i].handle, &at)) {
				DBG_DEBUG("nasgw: snapshot '%s' has no time to show: not shown\n", ents[i].name);
				continue;
			}
			if (n == cap) {
				cap = cap == 0 ? 16 : cap * 2;
				v = talloc_realloc(ctx, v, struct nasgw_snap, cap);
				if (v == NULL) {
					rc = -ENOMEM;
					goto fail;
				}
			}
			v[n].at = at;
			v[n].id = attrs[i].handle.snap;
			v[n].name = talloc_strdup(ctx, ents[i].name);
			v[n].root = attrs[i].handle;
			if (v[n].name == NULL) {
				rc = -ENOMEM;
				goto fail;
			}
			n++;
		}
	}
	if (n > 0) {
		qsort(v, n, sizeof(*v), nasgw_snap_cmp);
	}
	for (i = 0, kept = 0; i < n; i++) {
		if (kept > 0 && v[kept - 1].at == v[i].at) {
			DBG_INFO("nasgw: snapshots '%s' and '%s' have one label; '%s' is shown\n", v[kept - 1].name,
				 v[i].name, v[kept - 1].name);
			continue;
		}
		v[kept++] = v[i];
	}
	TALLOC_FREE(ents);
	TALLOC_FREE(attrs);
	TALLOC_FREE(nc->snap_ctx);
	nc->snap_ctx = ctx;
	nc->snaps = v;
	nc->nsnaps = kept;
	return 0;

fail:
	TALLOC_FREE(ctx);
	return rc;
}

/* The root of the share in the snapshot whose label is twrp: from the list
 * kept, else (taken since) from a new one; `refetch`: list again first (a
 * handle of it went stale). -ENOENT when no snapshot has that label. */
static int nasgw_snap_root(vfs_handle_struct *handle, struct nasgw_conn *nc, NTTIME twrp, bool refetch,
			   nasgw_handle *root)
{
	time_t at = nt_time_to_unix(twrp);
	bool fetched = false;
	size_t i;
	int rc;

	if (refetch || nc->snap_ctx == NULL) {
		rc = nasgw_snaps_fetch(handle, nc);
		if (rc != 0) {
			return rc;
		}
		fetched = true;
	}
	for (;;) {
		for (i = 0; i < nc->nsnaps; i++) {
			if (nc->snaps[i].at == at) {
				*root = nc->snaps[i].root;
				return 0;
			}
		}
		if (fetched) {
			DBG_DEBUG("nasgw: no snapshot has the label of %s\n", nt_time_string(talloc_tos(), twrp));
			return -ENOENT;
		}
		rc = nasgw_snaps_fetch(handle, nc);
		if (rc != 0) {
			return rc;
		}
		fetched = true;
	}
}

/* FSCTL_SRV_ENUMERATE_SNAPSHOTS: the share's snapshots' labels, newest
 * first (as vfs_shadow_copy2 and vfs_snapper sort them). The list is the
 * share's root's, whichever file asks (Windows then looks at the file in
 * each, by its label). */
static int nasgw_get_shadow_copy_data(vfs_handle_struct *handle, files_struct *fsp,
				      struct shadow_copy_data *shadow_copy_data, bool labels)
{
	struct nasgw_conn *nc = handle->data;
	size_t i;
	int rc = nasgw_snaps_fetch(handle, nc);

	if (rc != 0) {
		DBG_NOTICE("nasgw: cannot list the snapshots of %s: %s\n", handle->conn->connectpath,
			   nasgw_client_last_message());
		return nasgw_fail(rc);
	}
	shadow_copy_data->num_volumes = nc->nsnaps;
	shadow_copy_data->labels = NULL;
	if (!labels || nc->nsnaps == 0) {
		return 0;
	}
	shadow_copy_data->labels = talloc_zero_array(shadow_copy_data, SHADOW_COPY_LABEL, nc->nsnaps);
	if (shadow_copy_data->labels == NULL) {
		errno = ENOMEM;
		return -1;
	}
	for (i = 0; i < nc->nsnaps; i++) {
		struct tm tm;

		if (gmtime_r(&nc->snaps[i].at, &tm) == NULL ||
		    strftime(shadow_copy_data->labels[i], sizeof(SHADOW_COPY_LABEL), "@GMT-%Y.%m.%d-%H.%M.%S",
			     &tm) == 0) {
			TALLOC_FREE(shadow_copy_data->labels);
			errno = EINVAL;
			return -1;
		}
	}
	return 0;
}

/*
 * Where `path`, relative to dirfsp (or Samba's current directory) or
 * absolute, is walked from, in the snapshot labelled twrp (0: the live
 * volume): *start for the names *rest, *root for an absolute name (a
 * link's target). Samba 4.17 opens the directories of an @GMT path in the
 * live volume and only its last name with the label (its
 * filename_convert_dirfsp), so dirfsp may be a live directory: then its
 * path under the share (Samba's fsp names are relative to the share's
 * path) is walked from the snapshot's root.
 */
static int nasgw_at(vfs_handle_struct *handle, struct nasgw_conn *nc, const files_struct *dirfsp, const char *path,
		    NTTIME twrp, bool refetch, TALLOC_CTX *mem_ctx, nasgw_handle *start, nasgw_handle *root,
		    const char **rest)
{
	nasgw_handle dir;
	const char *below;
	char *abs;
	int rc = nasgw_start(handle, nc, dirfsp, &dir);

	if (rc != 0) {
		return rc;
	}
	*rest = path;
	if (twrp == 0) {
		*start = dir;
		*root = nc->root;
		return 0;
	}
	rc = nasgw_snap_root(handle, nc, twrp, refetch, root);
	if (rc != 0) {
		return rc;
	}
	if (path[0] == '/' || dir.snap == root->snap) {
		*start = path[0] == '/' ? *root : dir; /* absolute, or dirfsp is in that snapshot */
		return 0;
	}
	if (nasgw_is_cwd_fsp(dirfsp)) {
		abs = talloc_asprintf(mem_ctx, "%s/%s", nc->cwd, path);
	} else if (dirfsp->fsp_name->base_name[0] == '/') {
		abs = talloc_asprintf(mem_ctx, "%s/%s", dirfsp->fsp_name->base_name, path);
	} else {
		abs = talloc_asprintf(mem_ctx, "%s/%s/%s", nc->connectpath, dirfsp->fsp_name->base_name, path);
	}
	if (abs == NULL) {
		return -ENOMEM;
	}
	below = nasgw_below_share(nc, abs);
	if (below == NULL) {
		return -ENOENT;
	}
	*start = *root;
	*rest = below;
	return 0;
}

/* Resolves `path` (relative to dirfsp) in the live volume or, twrp != 0, in
 * the snapshot with that label. */
static int nasgw_resolve(vfs_handle_struct *handle, const files_struct *dirfsp, const char *path, NTTIME twrp,
			 bool follow, nasgw_attr *out)
{
	struct nasgw_conn *nc = handle->data;
	TALLOC_CTX *frame = talloc_stackframe();
	nasgw_handle start, root;
	const char *rest;
	int attempt;
	int rc;

	for (attempt = 0;; attempt++) {
		rc = nasgw_at(handle, nc, dirfsp, path, twrp, attempt > 0, frame, &start, &root, &rest);
		if (rc == 0) {
			rc = nasgw_walk(handle, nc, &start, &root, rest, follow, out);
		}
		if (rc != -ESTALE || twrp == 0 || attempt > 0) {
			break;
		}
		/* The snapshot was deleted since it was listed: list again
		 * (another may have its label). */
	}
	TALLOC_FREE(frame);
	return twrp != 0 && rc == -ESTALE ? -ENOENT : rc;
}

/* The directory that holds the last name of `path` (relative to dirfsp;
 * in the snapshot labelled twrp, if not 0), and that name. */
static int nasgw_parent(vfs_handle_struct *handle, const files_struct *dirfsp, const char *path, NTTIME twrp,
			TALLOC_CTX *mem_ctx, nasgw_handle *dir, const char **name)
{
	const char *slash = strrchr(path, '/');
	const char *head = ".";
	nasgw_attr a;
	int rc;

	if (slash == NULL && twrp == 0) {
		struct nasgw_conn *nc = handle->data;

		*name = path;
		return nasgw_start(handle, nc, dirfsp, dir);
	}
	if (slash != NULL) {
		if (slash[1] == '\0') {
			return -EINVAL;
		}
		head = slash == path ? "/" : talloc_strndup(mem_ctx, path, slash - path);
		if (head == NULL) {
			return -ENOMEM;
		}
	}
	rc = nasgw_resolve(handle, dirfsp, head, twrp, true, &a);
	if (rc != 0) {
		return rc;
	}
	if (a.type != NASGW_TYPE_DIR) {
		return -ENOTDIR;
	}
	*dir = a.handle;
	*name = slash != NULL ? slash + 1 : path;
	return 0;
}

/* ---- connect */

static void nasgw_recall_cb(void *arg, uint32_t volume, uint64_t ino, uint64_t owner, uint32_t break_to);
static int nasgw_recall_setup(struct tevent_context *ev);

static int nasgw_connect(vfs_handle_struct *handle, const char *service, const char *user)
{
	int snum = SNUM(handle->conn);
	const char *socket_path = lp_parm_const_string(snum, NASGW_MODULE, "socket", "/run/nasgw/head.sock");
	const char *volume = lp_parm_const_string(snum, NASGW_MODULE, "volume", NULL);
	const char *subpath = lp_parm_const_string(snum, NASGW_MODULE, "subpath", "");
	struct nasgw_conn *nc;
	nasgw_attr root;
	nasgw_cred cr;
	int rc;

	rc = SMB_VFS_NEXT_CONNECT(handle, service, user);
	if (rc < 0) {
		return rc;
	}
	if (volume == NULL || volume[0] == '\0') {
		DBG_ERR("nasgw: share [%s] names no volume (nasgw:volume)\n", service);
		errno = EINVAL;
		return -1;
	}
	if (g_client != NULL && strcmp(g_client_socket, socket_path) != 0) {
		DBG_ERR("nasgw: share [%s] names socket %s, but this smbd serves %s\n", service, socket_path,
			g_client_socket);
		errno = EINVAL;
		return -1;
	}
	if (g_client == NULL) {
		nasgw_client_options o = { 0 };

		o.socket_path = socket_path;
		o.client_name = "smbd";
		o.connections = 2;
		o.recall = nasgw_recall_cb;
		/* An operation another head's lease stands in the way of
		 * waits while nasgwd recalls it (nasgwd revokes after 40 s). */
		o.recall_wait_ms = 60000;
		rc = nasgw_recall_setup(handle->conn->sconn->ev_ctx);
		if (rc != 0) {
			DBG_ERR("nasgw: cannot set up lease recalls: %s\n", strerror(-rc));
			return nasgw_fail(rc);
		}
		rc = nasgw_client_open(&o, &g_client);
		if (rc != 0) {
			DBG_ERR("nasgw: cannot reach nasgwd at %s: %s\n", socket_path, nasgw_client_last_message());
			return nasgw_fail(rc);
		}
		g_client_socket = talloc_strdup(NULL, socket_path);
	}
	g_client_refs++;

	nc = talloc_zero(handle->conn, struct nasgw_conn);
	if (nc == NULL) {
		goto nomem;
	}
	nc->client = g_client;
	nasgw_cred_of(handle->conn, &cr);
	rc = nasgw_mount_path(g_client, &cr, volume, subpath, &root);
	if (rc != 0) {
		DBG_ERR("nasgw: share [%s]: volume %s path '%s': %s\n", service, volume, subpath,
			nasgw_client_last_message());
		TALLOC_FREE(nc);
		if (--g_client_refs == 0) {
			nasgw_client_close(g_client);
			g_client = NULL;
			TALLOC_FREE(g_client_socket);
		}
		return nasgw_fail(rc);
	}
	nc->root = root.handle;
	nc->cwd_h = root.handle;
	nc->connectpath = talloc_strdup(nc, handle->conn->connectpath);
	nc->cwd = talloc_strdup(nc, handle->conn->connectpath);
	if (nc->connectpath == NULL || nc->cwd == NULL) {
		goto nomem;
	}
	handle->data = nc;

	/* Nothing of the local file system: no kernel oplocks or leases on
	 * the fake descriptors, no sendfile from them. Share modes are
	 * nasgwd's too (nasgw_filesystem_sharemode). */
	lp_do_parameter(snum, "kernel oplocks", "no");
	lp_do_parameter(snum, "kernel share modes", "yes");
	lp_do_parameter(snum, "use sendfile", "no");
	/* getxattrat_send is not asynchronous here. */
	lp_do_parameter(snum, "smbd async dosmode", "no");
	DBG_NOTICE("nasgw: share [%s] serves volume %s path '%s' for %s\n", service, volume, subpath, user);
	return 0;

nomem:
	TALLOC_FREE(nc);
	errno = ENOMEM;
	return -1;
}

static void nasgw_disconnect(vfs_handle_struct *handle)
{
	TALLOC_FREE(handle->data);
	if (g_client_refs > 0 && --g_client_refs == 0) {
		nasgw_client_close(g_client);
		g_client = NULL;
		TALLOC_FREE(g_client_socket);
	}
	SMB_VFS_NEXT_DISCONNECT(handle);
}

/* ---- the volume */

static int nasgw_stats(vfs_handle_struct *handle, nasgw_fs_stats *s)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;

	nasgw_cred_of(handle->conn, &cr);
	return nasgw_statfs(nc->client, &cr, nc->root.volume, s);
}

#define NASGW_STATFS_BLOCK 4096u

static uint64_t nasgw_disk_free(vfs_handle_struct *handle, const struct smb_filename *smb_fname, uint64_t *bsize,
				uint64_t *dfree, uint64_t *dsize)
{
	nasgw_fs_stats s;
	int rc = nasgw_stats(handle, &s);

	if (rc != 0) {
		nasgw_fail(rc);
		return (uint64_t)-1;
	}
	*bsize = NASGW_STATFS_BLOCK;
	*dfree = s.free_bytes / NASGW_STATFS_BLOCK;
	*dsize = s.total_bytes / NASGW_STATFS_BLOCK;
	return *dfree;
}

/* Sparse files: FSCTL_SET_ZERO_DATA punches holes (FALLOCATE) and
 * FSCTL_QUERY_ALLOCATED_RANGES finds them (SEEK_DATA, SEEK_HOLE); Samba
 * keeps the sparse flag itself, in the DOS attributes. */
#define NASGW_FS_CAPABILITIES (FILE_CASE_SENSITIVE_SEARCH | FILE_CASE_PRESERVED_NAMES | FILE_SUPPORTS_SPARSE_FILES)

static int nasgw_statvfs(vfs_handle_struct *handle, const struct smb_filename *smb_fname,
			 struct vfs_statvfs_struct *out)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_fs_stats s;
	int rc = nasgw_stats(handle, &s);

	if (rc != 0) {
		return nasgw_fail(rc);
	}
	ZERO_STRUCTP(out);
	out->OptimalTransferSize = 1024 * 1024;
	out->BlockSize = NASGW_STATFS_BLOCK;
	out->TotalBlocks = s.total_bytes / NASGW_STATFS_BLOCK;
	out->BlocksAvail = s.free_bytes / NASGW_STATFS_BLOCK;
	out->UserBlocksAvail = out->BlocksAvail;
	out->TotalFileNodes = s.files + ((uint64_t)1 << 32);
	out->FreeFileNodes = (uint64_t)1 << 32;
	out->FsIdentifier = 0x6e610000u + nc->root.volume;
	out->FsCapabilities = NASGW_FS_CAPABILITIES;
	return 0;
}

static uint32_t nasgw_fs_capabilities(vfs_handle_struct *handle, enum timestamp_set_resolution *p_ts_res)
{
	*p_ts_res = TIMESTAMP_SET_NT_OR_BETTER;
	return NASGW_FS_CAPABILITIES;
}

/* ---- the current directory */

static int nasgw_chdir(vfs_handle_struct *handle, const struct smb_filename *smb_fname)
{
	struct nasgw_conn *nc = handle->data;
	const char *path = smb_fname->base_name;
	nasgw_attr a;
	char *abs;
	int rc;

	if (nc == NULL) {
		/* Before connect (or after a failed one): nothing is served. */
		errno = ENOENT;
		return -1;
	}
	/* In a snapshot (twrp) too: the current directory is then the
	 * snapshot's, and the names Samba opens from it are resolved there. */
	rc = nasgw_resolve(handle, NULL, path, smb_fname->twrp, true, &a);
	if (rc != 0) {
		return nasgw_fail(rc);
	}
	if (a.type != NASGW_TYPE_DIR) {
		errno = ENOTDIR;
		return -1;
	}
	if (path[0] == '/') {
		abs = talloc_strdup(nc, path);
	} else {
		abs = talloc_asprintf(nc, "%s/%s", nc->cwd, path);
	}
	if (abs == NULL) {
		errno = ENOMEM;
		return -1;
	}
	/* Samba moves only to directories it named by their path under the
	 * share (never through "..": its paths are canonical), so the text
	 * stays canonical when trailing "/." is dropped. */
	while (strlen(abs) > 1 && (abs[strlen(abs) - 1] == '/' ||
				   (strlen(abs) > 2 && strcmp(abs + strlen(abs) - 2, "/.") == 0))) {
		abs[strlen(abs) - (abs[strlen(abs) - 1] == '/' ? 1 : 2)] = '\0';
	}
	TALLOC_FREE(nc->cwd);
	nc->cwd = abs;
	nc->cwd_h = a.handle;
	return 0;
}

static struct smb_filename *nasgw_getwd(vfs_handle_struct *handle, TALLOC_CTX *mem_ctx)
{
	struct nasgw_conn *nc = handle->data;

	if (nc == NULL) {
		errno = ENOENT;
		return NULL;
	}
	return synthetic_smb_fname(mem_ctx, nc->cwd, NULL, NULL, 0, 0);
}

/* The path with every symbolic link resolved, as realpath(3). Samba checks
 * with it that a name resolves inside the share (a link out of it is
 * refused unless "wide links" allow it, which nasgw cannot serve anyway). */
static struct smb_filename *nasgw_realpath(vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
					   const struct smb_filename *smb_fname)
{
	struct nasgw_conn *nc = handle->data;
	TALLOC_CTX *frame = talloc_stackframe();
	const char *path = smb_fname->base_name;
	char *abs, *out;
	char **names, **stack;
	size_t n = 0, depth = 0, i;
	int links = 0;
	struct smb_filename *result;
	nasgw_handle root = nc->root;
	nasgw_cred cr;

	nasgw_cred_of(handle->conn, &cr);
	if (smb_fname->twrp != 0) {
		/* In a snapshot: resolved there, named as in the share (what
		 * Samba checks is that the name stays in the share). */
		int rc = nasgw_snap_root(handle, nc, smb_fname->twrp, false, &root);

		if (rc != 0) {
			TALLOC_FREE(frame);
			errno = -rc;
			return NULL;
		}
	}
	abs = path[0] == '/' ? talloc_strdup(frame, path) : talloc_asprintf(frame, "%s/%s", nc->cwd, path);
	if (abs == NULL) {
		goto nomem;
	}
	{
		const char *rel = nasgw_below_share(nc, abs);

		if (rel == NULL) {
			/* Outside the share: nothing of it is ours to resolve. */
			TALLOC_FREE(frame);
			errno = ENOENT;
			return NULL;
		}
		names = nasgw_split(frame, rel, &n);
	}
	if (names == NULL) {
		goto nomem;
	}
	/* The resolved names so far, from the share's root. */
	stack = talloc_array(frame, char *, 4096);
	if (stack == NULL) {
		goto nomem;
	}
	for (i = 0; i < n; i++) {
		char *name = names[i];
		char *sofar;
		nasgw_attr a;
		char target[4096];
		char **tnames, **joined;
		size_t tn = 0, rest = n - i - 1;
		size_t k;
		int rc;

		if (strcmp(name, "..") == 0) {
			if (depth > 0) {
				depth--;
			}
			continue;
		}
		if (depth >= 4096) {
			TALLOC_FREE(frame);
			errno = ENAMETOOLONG;
			return NULL;
		}
		stack[depth++] = name;
		sofar = talloc_strdup(frame, "");
		for (k = 0; k < depth && sofar != NULL; k++) {
			sofar = talloc_asprintf_append(sofar, "%s%s", k ? "/" : "", stack[k]);
		}
		if (sofar == NULL) {
			goto nomem;
		}
		rc = nasgw_walk(handle, nc, &root, &root, sofar, false, &a);
		if (rc != 0) {
			TALLOC_FREE(frame);
			errno = rc == -ESTALE && smb_fname->twrp != 0 ? ENOENT : -rc;
			return NULL;
		}
		if (a.type != NASGW_TYPE_LNK) {
			continue;
		}
		if (++links > NASGW_SYMLINK_MAX) {
			TALLOC_FREE(frame);
			errno = ELOOP;
			return NULL;
		}
		rc = nasgw_readlink(nc->client, &cr, &a.handle, target, sizeof(target));
		if (rc < 0 || (size_t)rc >= sizeof(target)) {
			TALLOC_FREE(frame);
			errno = rc < 0 ? -rc : ENAMETOOLONG;
			return NULL;
		}
		depth--; /* the link itself gives way to its target */
		if (target[0] == '/') {
			const char *rel = nasgw_below_share(nc, target);

			if (rel == NULL) {
				/* Resolves outside the share: say where, and
				 * Samba refuses it as a wide link. */
				out = talloc_strdup(frame, target);
				for (k = i + 1; k < n && out != NULL; k++) {
					out = talloc_asprintf_append(out, "/%s", names[k]);
				}
				if (out == NULL) {
					goto nomem;
				}
				result = synthetic_smb_fname(mem_ctx, out, NULL, NULL, 0, 0);
				TALLOC_FREE(frame);
				return result;
			}
			depth = 0;
			tnames = nasgw_split(frame, rel, &tn);
		} else {
			tnames = nasgw_split(frame, target, &tn);
		}
		if (tnames == NULL) {
			goto nomem;
		}
		joined = talloc_array(frame, char *, tn + rest + 1);
		if (joined == NULL) {
			goto nomem;
		}
		memcpy(joined, tnames, tn * sizeof(char *));
		memcpy(joined + tn, names + i + 1, rest * sizeof(char *));
		names = joined;
		n = tn + rest;
		i = (size_t)-1;
	}
	out = talloc_strdup(frame, nc->connectpath);
	for (i = 0; i < depth && out != NULL; i++) {
		out = talloc_asprintf_append(out, "%s%s", strcmp(out, "/") == 0 ? "" : "/", stack[i]);
	}
	if (out == NULL) {
		goto nomem;
	}
	result = synthetic_smb_fname(mem_ctx, out, NULL, NULL, 0, 0);
	TALLOC_FREE(frame);
	return result;

nomem:
	TALLOC_FREE(frame);
	errno = ENOMEM;
	return NULL;
}

static const char *nasgw_connectpath(vfs_handle_struct *handle, const struct smb_filename *smb_fname)
{
	return handle->conn->connectpath;
}

/* ---- stat */

static int nasgw_stat_path(vfs_handle_struct *handle, const files_struct *dirfsp, const char *path, NTTIME twrp,
			   bool follow, SMB_STRUCT_STAT *st)
{
	nasgw_attr a;
	int rc = nasgw_resolve(handle, dirfsp, path, twrp, follow, &a);

	if (rc != 0) {
		return nasgw_fail(rc);
	}
	nasgw_to_stat(&a, st);
	return 0;
}

static int nasgw_stat(vfs_handle_struct *handle, struct smb_filename *smb_fname)
{
	if (is_named_stream(smb_fname)) {
		errno = ENOENT;
		return -1;
	}
	return nasgw_stat_path(handle, NULL, smb_fname->base_name, smb_fname->twrp, true, &smb_fname->st);
}

static int nasgw_lstat(vfs_handle_struct *handle, struct smb_filename *smb_fname)
{
	if (is_named_stream(smb_fname)) {
		errno = ENOENT;
		return -1;
	}
	return nasgw_stat_path(handle, NULL, smb_fname->base_name, smb_fname->twrp, false, &smb_fname->st);
}

static int nasgw_fstatat(vfs_handle_struct *handle, const files_struct *dirfsp,
			 const struct smb_filename *smb_fname, SMB_STRUCT_STAT *sbuf, int flags)
{
	return nasgw_stat_path(handle, dirfsp, smb_fname->base_name, smb_fname->twrp, (flags & AT_SYMLINK_NOFOLLOW) == 0,
			       sbuf);
}

static int nasgw_fstat(vfs_handle_struct *handle, files_struct *fsp, SMB_STRUCT_STAT *sbuf)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_fh *fh = nasgw_fh_of(handle, fsp);
	nasgw_attr a;
	nasgw_cred cr;
	int rc;

	if (fh == NULL) {
		errno = EBADF;
		return -1;
	}
	if (fh->fresh) {
		fh->fresh = false;
		nasgw_to_stat(&fh->attr, sbuf);
		return 0;
	}
	nasgw_cred_of(handle->conn, &cr);
	rc = nasgw_getattr(nc->client, &cr, &fh->h, &a);
	if (rc != 0) {
		return nasgw_fail(rc);
	}
	nasgw_to_stat(&a, sbuf);
	return 0;
}

static uint64_t nasgw_get_alloc_size(vfs_handle_struct *handle, files_struct *fsp, const SMB_STRUCT_STAT *sbuf)
{
	if (S_ISDIR(sbuf->st_ex_mode)) {
		return 0;
	}
	return (uint64_t)sbuf->st_ex_blocks * 512;
}

/* ---- open and close */

static uint32_t nasgw_access_of(int flags)
{
	switch (flags & O_ACCMODE) {
	case O_WRONLY: return NASGW_ACCESS_WRITE;
	case O_RDWR: return NASGW_ACCESS_READ | NASGW_ACCESS_WRITE;
	}
	return NASGW_ACCESS_READ;
}

static void nasgw_fh_destroy(void *p_data)
{
	struct nasgw_fh *fh = p_data;

	/* The file is released in close; what a lease needed goes here, with
	 * the extension (also when Samba frees an fsp it never closed). */
	if (fh->owner != 0) {
		DLIST_REMOVE(g_leasable, fh);
		fh->owner = 0;
	}
	TALLOC_FREE(fh->im);
	TALLOC_FREE(fh->poll);
	TALLOC_FREE(fh->groups);
	TALLOC_FREE(fh->listed_xattrs);
}

static void nasgw_lease_check_im(struct tevent_context *ev, struct tevent_immediate *im, void *private_data);

static int nasgw_openat(vfs_handle_struct *handle, const files_struct *dirfsp, const struct smb_filename *smb_fname,
			files_struct *fsp, const struct vfs_open_how *how)
{
	struct nasgw_conn *nc = handle->data;
	TALLOC_CTX *frame = talloc_stackframe();
	int flags = how->flags;
	nasgw_handle dir;
	const char *name = NULL;
	struct nasgw_fh *fh;
	nasgw_attr a;
	const nasgw_entry_xattrs *listed_xattrs = NULL;
	nasgw_cred cr;
	bool created = false;
	int fd;
	int rc;

	if (how->resolve != 0) {
		TALLOC_FREE(frame);
		errno = ENOSYS;
		return -1;
	}
	if (is_named_stream(smb_fname)) {
		/* Alternate data streams come from a stream module stacked
		 * above (streams_xattr), never from here. */
		TALLOC_FREE(frame);
		errno = ENOENT;
		return -1;
	}
	nasgw_cred_of(handle->conn, &cr);
	if (flags & O_CREAT) {
		/* In a snapshot (twrp) the create is nasgwd's EROFS, and an
		 * open of an existing file for writing too. */
		rc = nasgw_parent(handle, dirfsp, smb_fname->base_name, smb_fname->twrp, frame, &dir, &name);
		if (rc != 0) {
			goto fail;
		}
		rc = nasgw_lookup(nc->client, &cr, &dir, name, &a);
		if (rc == 0 && (flags & O_EXCL)) {
			rc = -EEXIST;
			goto fail;
		}
		if (rc == -ENOENT) {
			rc = nasgw_create(nc->client, &cr, &dir, name, NASGW_TYPE_REG, how->mode & 07777, 0, NULL,
					  (flags & O_EXCL) ? 0 : NASGW_CREATE_UNCHECKED, &a);
			created = rc == 0;
		}
		if (rc != 0) {
			goto fail;
		}
		if (a.type == NASGW_TYPE_LNK) {
			/* O_CREAT never follows the last link here (Samba opens
			 * with O_NOFOLLOW); the kernel answers ELOOP. */
			rc = -ELOOP;
			goto fail;
		}
	} else {
		const struct nasgw_fh *dfh = nasgw_is_cwd_fsp(dirfsp) ? NULL : nasgw_fh_of(handle, dirfsp);

		/* A path reference to an entry being listed: the listing's
		 * attributes (a real open always asks nasgwd). A name in a
		 * snapshot is never one of a live directory's listing. */
		if (!fsp->fsp_flags.is_pathref || dfh == NULL || (smb_fname->twrp != 0 && dfh->h.snap == 0) ||
		    !nasgw_listed(nc, &dfh->h, smb_fname->base_name, &a, &listed_xattrs)) {
			rc = nasgw_resolve(handle, dirfsp, smb_fname->base_name, smb_fname->twrp, (flags & O_NOFOLLOW) == 0,
					   &a);
			if (rc != 0) {
				goto fail;
			}
		}
	}
	if (a.type == NASGW_TYPE_LNK && !fsp->fsp_flags.is_pathref) {
		rc = -ELOOP;
		goto fail;
	}
	if ((flags & O_DIRECTORY) && a.type != NASGW_TYPE_DIR) {
		rc = -ENOTDIR;
		goto fail;
	}
	if (a.type == NASGW_TYPE_DIR && (flags & O_ACCMODE) != O_RDONLY) {
		rc = -EISDIR;
		goto fail;
	}

	fh = VFS_ADD_FSP_EXTENSION(handle, fsp, struct nasgw_fh, nasgw_fh_destroy);
	if (fh == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	fh->h = a.handle;
	fh->type = a.type;
	fh->opened = false;
	fh->attr = a;
	fh->fresh = !(flags & O_TRUNC) || a.size == 0;
	if (listed_xattrs != NULL) {
		/* freed with the extension (nasgw_fh_destroy), or at a change */
		fh->listed_xattrs = talloc_memdup(handle->conn, listed_xattrs, sizeof(*listed_xattrs));
	}
	/* A real open (not a path reference) holds the file open on nasgwd:
	 * removed while open, it lives on until closed, as on POSIX. */
	if (!fsp->fsp_flags.is_pathref && (a.type == NASGW_TYPE_REG || a.type == NASGW_TYPE_DIR)) {
		uint32_t access = a.type == NASGW_TYPE_DIR ? 0 : nasgw_access_of(flags);

		rc = nasgw_open(nc->client, &cr, &a.handle, created ? 0 : access, NULL);
		if (rc != 0) {
			VFS_REMOVE_FSP_EXTENSION(handle, fsp);
			goto fail;
		}
		fh->opened = true;
		if (a.type == NASGW_TYPE_REG && a.handle.snap == 0) {
			/* Leasable: once Samba has granted (or not) an oplock
			 * or lease for this open, nasgwd is told (below). A
			 * snapshot's file takes no lease and no share
			 * reservation: nothing can change it, and nasgwd
			 * keeps none for it. */
			fh->owner = ++g_last_owner;
			fh->fsp = fsp;
			fh->handle = handle;
			fh->cr = cr;
			fh->groups = talloc_memdup(handle->conn, cr.groups, sizeof(uint32_t) * cr.ngroups);
			fh->cr.groups = fh->groups;
			if (cr.ngroups > 0 && fh->groups == NULL) {
				fh->cr.ngroups = 0;
			}
			DLIST_ADD(g_leasable, fh);
			fh->im = tevent_create_immediate(handle->conn);
			if (fh->im != NULL) {
				tevent_schedule_immediate(fh->im, handle->conn->sconn->ev_ctx, nasgw_lease_check_im, fh);
			}
		}
		if ((flags & O_TRUNC) && a.type == NASGW_TYPE_REG && a.size != 0) {
			nasgw_sattr s = { .mask = NASGW_SET_SIZE, .size = 0 };

			rc = nasgw_setattr(nc->client, &cr, &a.handle, &s, NULL);
			if (rc != 0) {
				(void)nasgw_release(nc->client, &cr, &a.handle);
				VFS_REMOVE_FSP_EXTENSION(handle, fsp);
				goto fail;
			}
		}
	}
	fd = vfs_fake_fd();
	if (fd == -1) {
		rc = -errno;
		if (fh->opened) {
			(void)nasgw_release(nc->client, &cr, &a.handle);
		}
		VFS_REMOVE_FSP_EXTENSION(handle, fsp);
		goto fail;
	}
	/* No /proc/self/fd re-opens: Samba opens again through here. */
	fsp->fsp_flags.have_proc_fds = false;
	TALLOC_FREE(frame);
	return fd;

fail:
	TALLOC_FREE(frame);
	return nasgw_fail(rc);
}

static int nasgw_close(vfs_handle_struct *handle, files_struct *fsp)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_fh *fh = nasgw_fh_of(handle, fsp);
	int fd = fsp_get_pathref_fd(fsp);
	int rc = 0;

	if (fh != NULL) {
		nasgw_cred cr;

		nasgw_cred_of(handle->conn, &cr);
		if (fh->shared) {
			/* A durable handle's disconnect closes too: the
			 * reconnect takes the reservation again. */
			(void)nasgw_share(nc->client, &cr, &fh->h, fh->owner, 0, 0);
			fh->shared = false;
		}
		if (fh->lease != 0) {
			(void)nasgw_lease(nc->client, &cr, &fh->h, fh->owner, 0);
			fh->lease = 0;
		}
		if (fh->opened) {
			rc = nasgw_release(nc->client, &cr, &fh->h);
		}
		VFS_REMOVE_FSP_EXTENSION(handle, fsp);
	}
	if (fd != -1 && fd != AT_FDCWD) {
		vfs_fake_fd_close(fd);
	}
	return rc != 0 ? nasgw_fail(rc) : 0;
}

/* ---- directories */

static DIR *nasgw_fdopendir(vfs_handle_struct *handle, files_struct *fsp, const char *mask, uint32_t attributes)
{
	struct nasgw_fh *fh = nasgw_fh_of(handle, fsp);
	struct nasgw_dir *d;

	if (fh == NULL) {
		errno = EBADF;
		return NULL;
	}
	if (fh->type != NASGW_TYPE_DIR) {
		errno = ENOTDIR;
		return NULL;
	}
	d = talloc_zero(handle->conn, struct nasgw_dir);
	if (d == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	d->h = fh->h;
	d->ents = talloc_array(d, nasgw_dirent, NASGW_DIR_BATCH);
	d->attrs = talloc_array(d, nasgw_attr, NASGW_DIR_BATCH);
	d->xattrs = talloc_array(d, nasgw_entry_xattrs, NASGW_DIR_BATCH);
	if (d->ents == NULL || d->attrs == NULL || d->xattrs == NULL) {
		TALLOC_FREE(d);
		errno = ENOMEM;
		return NULL;
	}
	return (DIR *)d;
}

/* Positions (telldir): 0 the start, 1 after ".", 2 after "..", and
 * cookie + 2 after an entry (nasgw's cookies leave room: the FUSE head
 * numbers its offsets the same way). */
static struct dirent *nasgw_vfs_readdir(vfs_handle_struct *handle, struct files_struct *dirfsp, DIR *dirp,
				    SMB_STRUCT_STAT *sbuf)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_dir *d = (struct nasgw_dir *)dirp;
	const nasgw_dirent *e;

	if (sbuf != NULL) {
		SET_STAT_INVALID(*sbuf);
	}
	if (d->pos < 2) {
		snprintf(d->de.d_name, sizeof(d->de.d_name), "%s", d->pos == 0 ? "." : "..");
		d->de.d_type = DT_DIR;
		d->de.d_ino = 0;
		d->pos++;
		return &d->de;
	}
	if (d->at == d->count) {
		nasgw_cred cr;
		int eof = 0;
		int rc;

		if (d->eof) {
			return NULL;
		}
		nasgw_cred_of(handle->conn, &cr);
		rc = nasgw_readdir_xattrs(nc->client, &cr, &d->h, d->next, NASGW_DIR_BATCH,
					  NASGW_READDIR_PLUS | NASGW_READDIR_XATTRS, d->ents, d->attrs, d->xattrs,
					  &d->count, &eof);
		if (rc != 0) {
			nasgw_fail(rc);
			return NULL;
		}
		d->at = d->taken = 0;
		d->eof = eof != 0 || d->count == 0;
		nc->listing = d;
		if (d->count == 0) {
			return NULL;
		}
	}
	e = &d->ents[d->at];
	if (sbuf != NULL && e->type != NASGW_TYPE_LNK) {
		nasgw_to_stat(&d->attrs[d->at], sbuf);
	}
	d->at++;
	d->next = e->cookie;
	d->pos = (long)(e->cookie + 2);
	snprintf(d->de.d_name, sizeof(d->de.d_name), "%s", e->name);
	d->de.d_ino = nasgw_shown_ino(&d->attrs[d->at - 1].handle); /* as nasgw_to_stat numbers it */
	d->de.d_type = IFTODT(nasgw_type_mode(e->type));
	return &d->de;
}

static long nasgw_telldir(vfs_handle_struct *handle, DIR *dirp)
{
	return ((struct nasgw_dir *)dirp)->pos;
}

static void nasgw_seekdir(vfs_handle_struct *handle, DIR *dirp, long offset)
{
	struct nasgw_dir *d = (struct nasgw_dir *)dirp;

	d->pos = offset < 2 ? (offset < 0 ? 0 : offset) : offset;
	d->next = offset <= 2 ? 0 : (uint64_t)offset - 2;
	d->count = d->at = d->taken = 0;
	d->eof = false;
}

static void nasgw_rewind_dir(vfs_handle_struct *handle, DIR *dirp)
{
	nasgw_seekdir(handle, dirp, 0);
}

static int nasgw_closedir(vfs_handle_struct *handle, DIR *dirp)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_dir *d = (struct nasgw_dir *)dirp;

	if (nc->listing == d) {
		nc->listing = NULL;
	}
	TALLOC_FREE(d);
	return 0;
}

/* The attributes of entry `name` of directory `dir` as the listing under
 * way just read them; false when it has no such entry (or it is a link,
 * whose own attributes READDIR_PLUS does not give). */
static bool nasgw_listed(struct nasgw_conn *nc, const nasgw_handle *dir, const char *name, nasgw_attr *out,
			 const nasgw_entry_xattrs **xattrs)
{
	struct nasgw_dir *d = nc->listing;
	uint32_t i;

	/* Only the entry readdir returned last, and only once: Samba opens
	 * each entry right after readdir returns it, and a later open of the
	 * name (the directory may stay open for a long time) must see what
	 * changed since. */
	if (d == NULL || d->h.volume != dir->volume || d->h.ino != dir->ino || d->h.snap != dir->snap ||
	    strchr(name, '/') != NULL ||
	    d->at == 0 || d->taken == d->at) {
		return false;
	}
	i = d->at - 1;
	if (strcmp(d->ents[i].name, name) != 0 || d->attrs[i].type == NASGW_TYPE_LNK) {
		return false;
	}
	d->taken = d->at;
	*out = d->attrs[i];
	*xattrs = d->xattrs[i].carried ? &d->xattrs[i] : NULL;
	return true;
}

/* ---- namespace changes */

static int nasgw_make(vfs_handle_struct *handle, files_struct *dirfsp, const struct smb_filename *smb_fname,
		      uint32_t type, mode_t mode, uint64_t rdev, const char *target)
{
	struct nasgw_conn *nc = handle->data;
	TALLOC_CTX *frame = talloc_stackframe();
	nasgw_handle dir;
	const char *name;
	nasgw_cred cr;
	int rc;

	if (smb_fname->twrp != 0) {
		TALLOC_FREE(frame);
		errno = EROFS; /* in a snapshot */
		return -1;
	}
	rc = nasgw_parent(handle, dirfsp, smb_fname->base_name, 0, frame, &dir, &name);
	if (rc == 0) {
		nasgw_cred_of(handle->conn, &cr);
		rc = nasgw_create(nc->client, &cr, &dir, name, type, mode & 07777, rdev, target, 0, NULL);
	}
	TALLOC_FREE(frame);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_mkdirat(vfs_handle_struct *handle, struct files_struct *dirfsp,
			 const struct smb_filename *smb_fname, mode_t mode)
{
	return nasgw_make(handle, dirfsp, smb_fname, NASGW_TYPE_DIR, mode, 0, NULL);
}

static int nasgw_symlinkat(vfs_handle_struct *handle, const struct smb_filename *link_contents,
			   struct files_struct *dirfsp, const struct smb_filename *new_smb_fname)
{
	return nasgw_make(handle, dirfsp, new_smb_fname, NASGW_TYPE_LNK, 0777, 0, link_contents->base_name);
}

static int nasgw_mknodat(vfs_handle_struct *handle, struct files_struct *dirfsp,
			 const struct smb_filename *smb_fname, mode_t mode, SMB_DEV_T dev)
{
	uint32_t type;

	switch (mode & S_IFMT) {
	case S_IFIFO: type = NASGW_TYPE_FIFO; break;
	case S_IFSOCK: type = NASGW_TYPE_SOCK; break;
	case S_IFCHR: type = NASGW_TYPE_CHR; break;
	case S_IFBLK: type = NASGW_TYPE_BLK; break;
	case S_IFREG:
	case 0: type = NASGW_TYPE_REG; break;
	default: errno = EINVAL; return -1;
	}
	return nasgw_make(handle, dirfsp, smb_fname, type, mode, dev, NULL);
}

static int nasgw_unlinkat(vfs_handle_struct *handle, struct files_struct *dirfsp,
			  const struct smb_filename *smb_fname, int flags)
{
	struct nasgw_conn *nc = handle->data;
	TALLOC_CTX *frame = talloc_stackframe();
	nasgw_handle dir;
	const char *name;
	nasgw_cred cr;
	int rc;

	if (is_named_stream(smb_fname)) {
		TALLOC_FREE(frame);
		errno = ENOENT;
		return -1;
	}
	if (smb_fname->twrp != 0) {
		TALLOC_FREE(frame);
		errno = EROFS; /* in a snapshot */
		return -1;
	}
	rc = nasgw_parent(handle, dirfsp, smb_fname->base_name, 0, frame, &dir, &name);
	if (rc == 0) {
		nasgw_cred_of(handle->conn, &cr);
		rc = (flags & AT_REMOVEDIR) ? nasgw_rmdir(nc->client, &cr, &dir, name)
					    : nasgw_unlink(nc->client, &cr, &dir, name);
	}
	TALLOC_FREE(frame);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_renameat(vfs_handle_struct *handle, files_struct *srcfsp, const struct smb_filename *smb_fname_src,
			  files_struct *dstfsp, const struct smb_filename *smb_fname_dst)
{
	struct nasgw_conn *nc = handle->data;
	TALLOC_CTX *frame = talloc_stackframe();
	nasgw_handle sdir, ddir;
	const char *sname, *dname;
	nasgw_cred cr;
	int rc;

	if (is_named_stream(smb_fname_src) || is_named_stream(smb_fname_dst)) {
		TALLOC_FREE(frame);
		errno = ENOENT;
		return -1;
	}
	if (smb_fname_src->twrp != 0 || smb_fname_dst->twrp != 0) {
		TALLOC_FREE(frame);
		errno = EROFS; /* out of or into a snapshot */
		return -1;
	}
	rc = nasgw_parent(handle, srcfsp, smb_fname_src->base_name, 0, frame, &sdir, &sname);
	if (rc == 0) {
		rc = nasgw_parent(handle, dstfsp, smb_fname_dst->base_name, 0, frame, &ddir, &dname);
	}
	if (rc == 0) {
		nasgw_cred_of(handle->conn, &cr);
		rc = nasgw_rename(nc->client, &cr, &sdir, sname, &ddir, dname, 0);
	}
	TALLOC_FREE(frame);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_linkat(vfs_handle_struct *handle, files_struct *srcfsp, const struct smb_filename *old_smb_fname,
			files_struct *dstfsp, const struct smb_filename *new_smb_fname, int flags)
{
	struct nasgw_conn *nc = handle->data;
	TALLOC_CTX *frame = talloc_stackframe();
	nasgw_handle ddir;
	const char *dname;
	nasgw_attr src;
	nasgw_cred cr;
	int rc;

	if (old_smb_fname->twrp != 0 || new_smb_fname->twrp != 0) {
		TALLOC_FREE(frame);
		errno = EROFS; /* a snapshot's file, or into a snapshot */
		return -1;
	}
	rc = nasgw_resolve(handle, srcfsp, old_smb_fname->base_name, 0, (flags & AT_SYMLINK_FOLLOW) != 0, &src);
	if (rc == 0) {
		rc = nasgw_parent(handle, dstfsp, new_smb_fname->base_name, 0, frame, &ddir, &dname);
	}
	if (rc == 0) {
		nasgw_cred_of(handle->conn, &cr);
		rc = nasgw_link(nc->client, &cr, &src.handle, &ddir, dname, NULL);
	}
	TALLOC_FREE(frame);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_readlinkat(vfs_handle_struct *handle, const files_struct *dirfsp,
			    const struct smb_filename *smb_fname, char *buf, size_t bufsiz)
{
	struct nasgw_conn *nc = handle->data;
	char target[4096];
	nasgw_attr a;
	nasgw_cred cr;
	int rc;

	rc = nasgw_resolve(handle, dirfsp, smb_fname->base_name, smb_fname->twrp, false, &a);
	if (rc != 0) {
		return nasgw_fail(rc);
	}
	if (a.type != NASGW_TYPE_LNK) {
		errno = EINVAL;
		return -1;
	}
	nasgw_cred_of(handle->conn, &cr);
	rc = nasgw_readlink(nc->client, &cr, &a.handle, target, sizeof(target));
	if (rc < 0) {
		return nasgw_fail(rc);
	}
	/* As readlink(2): truncated to bufsiz, no NUL. */
	if ((size_t)rc > bufsiz) {
		rc = (int)bufsiz;
	}
	memcpy(buf, target, rc);
	return rc;
}

/* Case-insensitive lookup of `name` in dirfsp: the name as stored. */
static NTSTATUS nasgw_get_real_filename_at(vfs_handle_struct *handle, struct files_struct *dirfsp,
					   const char *name, TALLOC_CTX *mem_ctx, char **found_name)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_fh *fh = nasgw_fh_of(handle, dirfsp);
	const nasgw_handle *dir = fh != NULL ? &fh->h : &nc->cwd_h;
	char found[NASGW_NAME_MAX + 1];
	nasgw_cred cr;
	int rc;

	if (fh == NULL && !nasgw_is_cwd_fsp(dirfsp)) {
		return NT_STATUS_INVALID_HANDLE;
	}
	if (dir->snap != 0) {
		/* In a snapshot (or its .snapshot) nasgwd finds the exact name
		 * only: Samba then scans the directory itself. */
		return NT_STATUS_NOT_SUPPORTED;
	}
	nasgw_cred_of(handle->conn, &cr);
	rc = nasgw_find_caseless(nc->client, &cr, dir, name, found, sizeof(found));
	if (rc < 0) {
		return map_nt_error_from_unix(-rc);
	}
	if ((size_t)rc >= sizeof(found)) {
		return NT_STATUS_NAME_TOO_LONG;
	}
	*found_name = talloc_strdup(mem_ctx, found);
	return *found_name == NULL ? NT_STATUS_NO_MEMORY : NT_STATUS_OK;
}

/* ---- attribute changes */

static int nasgw_setattr_fsp(vfs_handle_struct *handle, files_struct *fsp, const nasgw_sattr *s)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	int rc;

	if (fh == NULL) {
		return -1;
	}
	fh->fresh = false;
	rc = nasgw_setattr(nc->client, &cr, &fh->h, s, NULL);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_fchmod(vfs_handle_struct *handle, files_struct *fsp, mode_t mode)
{
	nasgw_sattr s = { .mask = NASGW_SET_MODE, .mode = mode & 07777 };

	return nasgw_setattr_fsp(handle, fsp, &s);
}

static void nasgw_owner_sattr(uid_t uid, gid_t gid, nasgw_sattr *s)
{
	if (uid != (uid_t)-1) {
		s->mask |= NASGW_SET_UID;
		s->uid = uid;
	}
	if (gid != (gid_t)-1) {
		s->mask |= NASGW_SET_GID;
		s->gid = gid;
	}
}

static int nasgw_fchown(vfs_handle_struct *handle, files_struct *fsp, uid_t uid, gid_t gid)
{
	nasgw_sattr s = { 0 };

	nasgw_owner_sattr(uid, gid, &s);
	return s.mask == 0 ? 0 : nasgw_setattr_fsp(handle, fsp, &s);
}

static int nasgw_lchown(vfs_handle_struct *handle, const struct smb_filename *smb_fname, uid_t uid, gid_t gid)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_sattr s = { 0 };
	nasgw_attr a;
	nasgw_cred cr;
	int rc;

	if (smb_fname->twrp != 0) {
		errno = EROFS; /* in a snapshot */
		return -1;
	}
	nasgw_owner_sattr(uid, gid, &s);
	rc = nasgw_resolve(handle, NULL, smb_fname->base_name, 0, false, &a);
	if (rc == 0 && s.mask != 0) {
		nasgw_cred_of(handle->conn, &cr);
		rc = nasgw_setattr(nc->client, &cr, &a.handle, &s, NULL);
	}
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_fntimes(vfs_handle_struct *handle, files_struct *fsp, struct smb_file_time *ft)
{
	nasgw_sattr s = { 0 };

	if (!is_omit_timespec(&ft->atime)) {
		s.mask |= NASGW_SET_ATIME;
		s.atime.sec = ft->atime.tv_sec;
		s.atime.nsec = ft->atime.tv_nsec;
	}
	if (!is_omit_timespec(&ft->mtime)) {
		s.mask |= NASGW_SET_MTIME;
		s.mtime.sec = ft->mtime.tv_sec;
		s.mtime.nsec = ft->mtime.tv_nsec;
	}
	/* The creation time is Samba's to keep (in user.DOSATTRIB). */
	return s.mask == 0 ? 0 : nasgw_setattr_fsp(handle, fsp, &s);
}

static int nasgw_ftruncate(vfs_handle_struct *handle, files_struct *fsp, off_t len)
{
	nasgw_sattr s = { .mask = NASGW_SET_SIZE, .size = (uint64_t)len };

	if (len < 0) {
		errno = EINVAL;
		return -1;
	}
	return nasgw_setattr_fsp(handle, fsp, &s);
}

/* Samba's modes are VFS_FALLOCATE_FL_*: FSCTL_SET_ZERO_DATA punches
 * (PUNCH_HOLE | KEEP_SIZE), an allocation size with "strict allocate"
 * allocates (KEEP_SIZE, or 0). */
static int nasgw_fallocate_fsp(vfs_handle_struct *handle, files_struct *fsp, uint32_t mode, off_t offset, off_t len)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	uint32_t m = 0;
	int rc;

	if (fh == NULL) {
		return -1;
	}
	if (offset < 0 || len <= 0) {
		errno = EINVAL;
		return -1;
	}
	if (mode & ~(uint32_t)(VFS_FALLOCATE_FL_KEEP_SIZE | VFS_FALLOCATE_FL_PUNCH_HOLE)) {
		errno = EOPNOTSUPP;
		return -1;
	}
	if (mode & VFS_FALLOCATE_FL_KEEP_SIZE) {
		m |= NASGW_FALLOC_KEEP_SIZE;
	}
	if (mode & VFS_FALLOCATE_FL_PUNCH_HOLE) {
		m |= NASGW_FALLOC_PUNCH_HOLE;
	}
	fh->fresh = false;
	rc = nasgw_fallocate(nc->client, &cr, &fh->h, m, (uint64_t)offset, (uint64_t)len, NULL);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

/* ---- data: synchronous */

static ssize_t nasgw_pread(vfs_handle_struct *handle, files_struct *fsp, void *data, size_t n, off_t offset)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	size_t done = 0;

	if (fh == NULL) {
		return -1;
	}
	while (done < n) {
		uint32_t len = n - done > NASGW_IO_MAX ? NASGW_IO_MAX : (uint32_t)(n - done);
		int eof = 0;
		int64_t got = nasgw_read(nc->client, &cr, &fh->h, (uint64_t)offset + done, (char *)data + done, len,
					 &eof);

		if (got < 0) {
			return done > 0 ? (ssize_t)done : nasgw_fail((int)got);
		}
		done += (size_t)got;
		if (got < len) {
			break;
		}
	}
	return (ssize_t)done;
}

static ssize_t nasgw_pwrite(vfs_handle_struct *handle, files_struct *fsp, const void *data, size_t n, off_t offset)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	size_t done = 0;

	if (fh == NULL) {
		return -1;
	}
	fh->fresh = false;
	while (done < n) {
		uint32_t len = n - done > NASGW_IO_MAX ? NASGW_IO_MAX : (uint32_t)(n - done);
		int64_t put = nasgw_write(nc->client, &cr, &fh->h, (uint64_t)offset + done,
					  (const char *)data + done, len, NASGW_DATA_SYNC, NULL);

		if (put < 0) {
			return done > 0 ? (ssize_t)done : nasgw_fail((int)put);
		}
		done += (size_t)put;
	}
	return (ssize_t)done;
}

static off_t nasgw_lseek(vfs_handle_struct *handle, files_struct *fsp, off_t offset, int whence)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_fh *fh = nasgw_fh_of(handle, fsp);
	nasgw_attr a;
	nasgw_cred cr;
	int rc;

	if (fh == NULL) {
		errno = EBADF;
		return -1;
	}
	switch (whence) {
	case SEEK_SET:
	case SEEK_CUR: /* Samba keeps no file position on its descriptors */
		return offset;
	case SEEK_END:
		nasgw_cred_of(handle->conn, &cr);
		rc = nasgw_getattr(nc->client, &cr, &fh->h, &a);
		if (rc != 0) {
			return nasgw_fail(rc);
		}
		return (off_t)a.size + offset;
	case SEEK_DATA: /* FSCTL_QUERY_ALLOCATED_RANGES of a sparse file */
	case SEEK_HOLE: {
		uint64_t at = 0;

		if (offset < 0) {
			errno = ENXIO;
			return -1;
		}
		nasgw_cred_of(handle->conn, &cr);
		rc = nasgw_seek(nc->client, &cr, &fh->h, (uint64_t)offset, whence == SEEK_HOLE, &at);
		if (rc != 0) {
			return nasgw_fail(rc);
		}
		return (off_t)at;
	}
	}
	errno = EINVAL;
	return -1;
}

/* ---- data: asynchronous */

/* The tevent context's threaded context, made on first use. */
static struct tevent_threaded_context *nasgw_tctx(struct tevent_context *ev)
{
	if (ev != g_ev || g_tctx == NULL) {
		g_tctx = tevent_threaded_context_create(ev, ev);
		g_ev = g_tctx != NULL ? ev : NULL;
	}
	return g_tctx;
}

/*
 * One data call in flight: a read or write of up to NASGW_IO_MAX per piece
 * (SMB2 allows 8 MiB; the pieces go out at once), or an fsync. It is not
 * the request's state: smbd may free a request before nasgwd answers (its
 * client went away), so the call lives on its own until the library has
 * called back for every piece, and then completes the request only if it
 * is still there. The credentials are copied: they must outlive the send.
 */
struct nasgw_aio;

struct nasgw_piece {
	struct nasgw_aio *io;
	uint32_t len;
	int64_t result;
};

struct nasgw_aio {
	struct tevent_req *req; /* NULL once the request is gone */
	struct tevent_immediate *im;
	struct tevent_threaded_context *tctx;
	nasgw_cred cr;
	uint32_t groups[1024];
	struct nasgw_piece *pieces;
	uint32_t npieces;
	uint32_t pending; /* pieces not called back yet (atomic) */
};

struct nasgw_aio_state {
	struct nasgw_aio *io;
	ssize_t result;
	struct vfs_aio_state vfs_aio_state;
	struct timespec start;
};

static int nasgw_aio_state_destructor(struct nasgw_aio_state *state)
{
	if (state->io != NULL) {
		state->io->req = NULL;
	}
	return 0;
}

/* The call's result: the bytes of the pieces up to the first short or
 * failed one; that one's error if it is the first. */
static int64_t nasgw_aio_result(const struct nasgw_aio *io)
{
	int64_t total = 0;
	uint32_t i;

	for (i = 0; i < io->npieces; i++) {
		int64_t r = io->pieces[i].result;

		if (r < 0) {
			return total > 0 ? total : r;
		}
		total += r;
		if (r < io->pieces[i].len) {
			break;
		}
	}
	return total;
}

/* On smbd's event loop, once every piece was called back. */
static void nasgw_aio_finish(struct tevent_context *ev, struct tevent_immediate *im, void *private_data)
{
	struct nasgw_aio *io = private_data;
	struct tevent_req *req = io->req;

	if (req != NULL) {
		struct nasgw_aio_state *state = tevent_req_data(req, struct nasgw_aio_state);
		int64_t result = nasgw_aio_result(io);
		struct timespec end;

		state->io = NULL;
		clock_gettime_mono(&end);
		state->vfs_aio_state.duration = nsec_time_diff(&end, &state->start);
		if (result < 0) {
			state->vfs_aio_state.error = (int)-result;
			state->result = -1;
		} else {
			state->result = (ssize_t)result;
		}
		tevent_req_done(req);
	}
	TALLOC_FREE(io);
}

/* `n` pieces are done (called back, or never sent). */
static void nasgw_aio_done_pieces(struct nasgw_aio *io, uint32_t n)
{
	if (__atomic_sub_fetch(&io->pending, n, __ATOMIC_ACQ_REL) == 0) {
		tevent_threaded_schedule_immediate(io->tctx, io->im, nasgw_aio_finish, io);
	}
}

static void nasgw_aio_read_done(void *arg, int64_t result, int eof)
{
	struct nasgw_piece *p = arg;

	p->result = result;
	nasgw_aio_done_pieces(p->io, 1);
}

static void nasgw_aio_write_done(void *arg, int64_t result, const nasgw_write_result *r)
{
	struct nasgw_piece *p = arg;

	p->result = result;
	nasgw_aio_done_pieces(p->io, 1);
}

static void nasgw_aio_fsync_done(void *arg, int result, uint64_t verifier)
{
	struct nasgw_piece *p = arg;

	p->result = result;
	nasgw_aio_done_pieces(p->io, 1);
}

enum nasgw_aio_op { NASGW_AIO_READ, NASGW_AIO_WRITE, NASGW_AIO_FSYNC };

static int nasgw_aio_send_piece(struct nasgw_conn *nc, struct nasgw_aio *io, const nasgw_handle *h,
				enum nasgw_aio_op op, uint32_t i, char *data, off_t offset)
{
	struct nasgw_piece *p = &io->pieces[i];
	uint64_t at = (uint64_t)offset + (uint64_t)i * NASGW_IO_MAX;
	char *buf = data + (size_t)i * NASGW_IO_MAX;

	switch (op) {
	case NASGW_AIO_READ:
		return nasgw_read_async(nc->client, &io->cr, h, at, buf, p->len, nasgw_aio_read_done, p);
	case NASGW_AIO_WRITE:
		return nasgw_write_async(nc->client, &io->cr, h, at, buf, p->len, NASGW_DATA_SYNC,
					 nasgw_aio_write_done, p);
	case NASGW_AIO_FSYNC:
		return nasgw_fsync_async(nc->client, &io->cr, h, nasgw_aio_fsync_done, p);
	}
	return -EINVAL;
}

/* Starts a request; its result comes to the event loop. */
static struct tevent_req *nasgw_aio_send(vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
					 struct tevent_context *ev, files_struct *fsp, enum nasgw_aio_op op,
					 void *data, size_t n, off_t offset)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_fh *fh = nasgw_fh_of(handle, fsp);
	struct nasgw_aio_state *state;
	struct tevent_req *req;
	struct nasgw_aio *io;
	nasgw_cred cr;
	uint32_t i, npieces;

	req = tevent_req_create(mem_ctx, &state, struct nasgw_aio_state);
	if (req == NULL) {
		return NULL;
	}
	clock_gettime_mono(&state->start);
	if (fh == NULL) {
		tevent_req_error(req, EBADF);
		return tevent_req_post(req, ev);
	}
	if (offset < 0) {
		tevent_req_error(req, EINVAL);
		return tevent_req_post(req, ev);
	}
	if (op != NASGW_AIO_FSYNC && n == 0) {
		state->result = 0;
		tevent_req_done(req);
		return tevent_req_post(req, ev);
	}
	fh->fresh = false;
	npieces = op == NASGW_AIO_FSYNC ? 1 : (uint32_t)((n + NASGW_IO_MAX - 1) / NASGW_IO_MAX);
	io = talloc_zero(NULL, struct nasgw_aio);
	if (tevent_req_nomem(io, req)) {
		return tevent_req_post(req, ev);
	}
	io->im = tevent_create_immediate(io);
	io->tctx = nasgw_tctx(ev);
	io->pieces = talloc_zero_array(io, struct nasgw_piece, npieces);
	if (io->im == NULL || io->tctx == NULL || io->pieces == NULL) {
		TALLOC_FREE(io);
		tevent_req_error(req, ENOMEM);
		return tevent_req_post(req, ev);
	}
	io->npieces = npieces;
	io->pending = npieces;
	for (i = 0; i < npieces; i++) {
		size_t left = n - (size_t)i * NASGW_IO_MAX;

		io->pieces[i].io = io;
		io->pieces[i].len = op == NASGW_AIO_FSYNC ? 0 : (uint32_t)MIN(left, NASGW_IO_MAX);
	}
	nasgw_cred_of(handle->conn, &cr);
	io->cr = cr;
	memcpy(io->groups, cr.groups, cr.ngroups * sizeof(uint32_t));
	io->cr.groups = io->groups;
	io->req = req;
	state->io = io;
	talloc_set_destructor(state, nasgw_aio_state_destructor);
	for (i = 0; i < npieces; i++) {
		int rc = nasgw_aio_send_piece(nc, io, &fh->h, op, i, data, offset);
		uint32_t j;

		if (rc == 0) {
			continue;
		}
		if (i == 0) {
			/* Nothing in flight: fail now. */
			state->io = NULL;
			TALLOC_FREE(io);
			tevent_req_error(req, -rc);
			return tevent_req_post(req, ev);
		}
		for (j = i; j < npieces; j++) {
			io->pieces[j].result = rc;
		}
		nasgw_aio_done_pieces(io, npieces - i);
		break;
	}
	return req;
}

static ssize_t nasgw_aio_recv(struct tevent_req *req, struct vfs_aio_state *vfs_aio_state)
{
	struct nasgw_aio_state *state = tevent_req_data(req, struct nasgw_aio_state);

	if (tevent_req_is_unix_error(req, &vfs_aio_state->error)) {
		tevent_req_received(req);
		return -1;
	}
	*vfs_aio_state = state->vfs_aio_state;
	tevent_req_received(req);
	return state->result;
}

static struct tevent_req *nasgw_pread_send(vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
					   struct tevent_context *ev, files_struct *fsp, void *data, size_t n,
					   off_t offset)
{
	return nasgw_aio_send(handle, mem_ctx, ev, fsp, NASGW_AIO_READ, data, n, offset);
}

static struct tevent_req *nasgw_pwrite_send(vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
					    struct tevent_context *ev, files_struct *fsp, const void *data,
					    size_t n, off_t offset)
{
	return nasgw_aio_send(handle, mem_ctx, ev, fsp, NASGW_AIO_WRITE, discard_const_p(void, data), n, offset);
}

static struct tevent_req *nasgw_fsync_send(vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
					   struct tevent_context *ev, files_struct *fsp)
{
	return nasgw_aio_send(handle, mem_ctx, ev, fsp, NASGW_AIO_FSYNC, NULL, 0, 0);
}

static int nasgw_fsync_recv(struct tevent_req *req, struct vfs_aio_state *vfs_aio_state)
{
	return (int)nasgw_aio_recv(req, vfs_aio_state);
}

/* ---- locks: nasgwd arbitrates them for every head */

/*
 * Samba maps Windows byte-range locks onto POSIX locks of the file ("posix
 * locking"), which here are nasgwd's: an SMB lock conflicts with an NFS or
 * FUSE lock of the same range, both ways. POSIX locks belong to a process;
 * so do these (owner: smbd's pid), and Samba keeps its own Windows lock
 * semantics above them (locking.tdb).
 */
static uint64_t nasgw_lock_owner(void)
{
	return ((uint64_t)0x534d4244u << 32) | (uint32_t)getpid(); /* "SMBD", pid */
}

static bool nasgw_vfs_lock(vfs_handle_struct *handle, files_struct *fsp, int op, off_t offset, off_t count, int type)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	int rc;

	if (fh == NULL) {
		return false;
	}
	if (offset < 0 || count < 0) {
		errno = EINVAL;
		return false;
	}
	if (op != F_SETLK && op != F_SETLKW && op != F_OFD_SETLK && op != F_OFD_SETLKW) {
		errno = EINVAL;
		return false;
	}
	if (type == F_UNLCK) {
		rc = nasgw_unlock(nc->client, &cr, &fh->h, nasgw_lock_owner(), (uint64_t)offset, (uint64_t)count);
	} else {
		rc = nasgw_lock(nc->client, &cr, &fh->h, nasgw_lock_owner(),
				type == F_WRLCK ? NASGW_LOCK_WRITE : NASGW_LOCK_READ, (uint64_t)offset,
				(uint64_t)count, NULL);
	}
	if (rc != 0) {
		nasgw_fail(rc);
		return false;
	}
	return true;
}

static bool nasgw_getlock(vfs_handle_struct *handle, files_struct *fsp, off_t *poffset, off_t *pcount, int *ptype,
			  pid_t *ppid)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	nasgw_lock_info conflict = { 0 };
	int rc;

	if (fh == NULL) {
		return false;
	}
	rc = nasgw_testlock(nc->client, &cr, &fh->h, nasgw_lock_owner(),
			    *ptype == F_WRLCK ? NASGW_LOCK_WRITE : NASGW_LOCK_READ, (uint64_t)*poffset,
			    (uint64_t)*pcount, &conflict);
	if (rc != 0) {
		nasgw_fail(rc);
		return false;
	}
	if (conflict.type == 0) {
		*ptype = F_UNLCK;
		return true;
	}
	*ptype = conflict.type == NASGW_LOCK_WRITE ? F_WRLCK : F_RDLCK;
	*poffset = (off_t)conflict.start;
	*pcount = (off_t)conflict.length;
	*ppid = 0; /* the holder may be on another head: no local process */
	return true;
}

static int nasgw_fcntl(vfs_handle_struct *handle, files_struct *fsp, int cmd, va_list cmd_arg)
{
	/* Samba asks for and clears O_NONBLOCK on descriptors it opened;
	 * there is no descriptor here, and nothing blocks. */
	switch (cmd) {
	case F_GETFL:
		return 0;
	case F_SETFL:
		return 0;
	}
	errno = EINVAL;
	return -1;
}

/* ---- share modes: nasgwd's, so that they meet NFSv4's share_deny
 *
 * Samba checks share modes among its own opens (locking.tdb); with
 * "kernel share modes" (set at connect) it also calls this for every
 * open with data access, after its own check and before truncating, and
 * with (0, 0) on close. nasgwd holds the reservation in the same table
 * as NFSv4 opens' (head protocol SHARE), so a deny-write from Windows
 * refuses an NFSv4 OPEN for write and the reverse. An open of an
 * alternate data stream (streams_xattr's, no nasgw_fh) takes none: the
 * stream is not the file NFS sees. */

static uint32_t nasgw_share_access_bits(uint32_t access_mask)
{
	uint32_t bits = 0;

	if (access_mask & (SEC_FILE_READ_DATA | SEC_FILE_EXECUTE)) {
		bits |= NASGW_SHARE_READ;
	}
	if (access_mask & (SEC_FILE_WRITE_DATA | SEC_FILE_APPEND_DATA)) {
		bits |= NASGW_SHARE_WRITE;
	}
	if (access_mask & SEC_STD_DELETE) {
		bits |= NASGW_SHARE_DELETE;
	}
	return bits;
}

static uint32_t nasgw_share_deny_bits(uint32_t share_access)
{
	uint32_t bits = 0;

	if (!(share_access & FILE_SHARE_READ)) {
		bits |= NASGW_SHARE_READ;
	}
	if (!(share_access & FILE_SHARE_WRITE)) {
		bits |= NASGW_SHARE_WRITE;
	}
	if (!(share_access & FILE_SHARE_DELETE)) {
		bits |= NASGW_SHARE_DELETE;
	}
	return bits;
}

static int nasgw_set_share(vfs_handle_struct *handle, files_struct *fsp, uint32_t access, uint32_t deny)
{
	struct nasgw_conn *nc = handle->data;
	struct nasgw_fh *fh = nasgw_fh_of(handle, fsp);
	nasgw_cred cr;
	int rc;

	if (fh == NULL || fh->owner == 0) {
		return 0; /* a stream, or not a file nasgwd reserves */
	}
	if (access == 0 && deny == 0 && !fh->shared) {
		return 0;
	}
	nasgw_cred_of(handle->conn, &cr);
	rc = nasgw_share(nc->client, &cr, &fh->h, fh->owner, access, deny);
	if (rc != 0) {
		DBG_INFO("nasgw: share reservation on %s refused: %s\n", fsp_str_dbg(fsp),
			 nasgw_client_last_message());
		return nasgw_fail(rc);
	}
	fh->shared = !(access == 0 && deny == 0);
	return 0;
}

static int nasgw_filesystem_sharemode(vfs_handle_struct *handle, files_struct *fsp, uint32_t share_access,
				      uint32_t access_mask)
{
	uint32_t access = nasgw_share_access_bits(access_mask);

	if (share_access == 0 && access_mask == 0) {
		return nasgw_set_share(handle, fsp, 0, 0); /* close */
	}
	if (access == 0) {
		return 0; /* no data access: share modes do not apply (Windows' rule) */
	}
	return nasgw_set_share(handle, fsp, access, nasgw_share_deny_bits(share_access));
}

/* ---- leases: Samba's oplocks and leases, made known to nasgwd
 *
 * Samba grants SMB oplocks and leases itself (locking.tdb), among its own
 * opens; kernel oplocks stay off (they would disable SMB2 leases). Other
 * heads' operations are nasgwd's to arbitrate: every real open of a
 * regular file tells nasgwd the caching Samba granted it (right after the
 * open, before smbd reads the client's next request: a lease covers only
 * what is read after it), as a LEASE of the open's owner. When another head
 * writes (or reads under a write lease), nasgwd recalls it: the module has
 * Samba break the oplock or lease as it would for another SMB open, and
 * tells nasgwd what is left once the client has acknowledged (a write
 * lease's dirty data is written back first); nasgwd holds the other head's
 * operation until then. All of smbd's processes are one head to nasgwd
 * (client name "smbd"): Samba arbitrates among them. Samba's lease state
 * changes with no VFS call, so while a break is in flight the module looks
 * at it every NASGW_LEASE_POLL_MS; and it looks again at every close. */

#define NASGW_LEASE_POLL_MS 5

static uint32_t nasgw_lease_bits(uint32_t smb2_lease)
{
	if (smb2_lease & SMB2_LEASE_WRITE) {
		return NASGW_LEASE_READ | NASGW_LEASE_WRITE;
	}
	return (smb2_lease & SMB2_LEASE_READ) ? NASGW_LEASE_READ : 0;
}

static void nasgw_lease_break(struct nasgw_fh *fh, uint32_t break_to);

/* Tells nasgwd the fsp's caching as Samba has it now. */
static void nasgw_lease_sync(struct nasgw_fh *fh)
{
	struct nasgw_conn *nc = fh->handle->data;
	uint32_t want = nasgw_lease_bits(fsp_lease_type(fh->fsp));
	int rc;

	if (fh->recalled && (want & ~fh->break_to) == 0) {
		fh->recalled = false; /* the client gave back what was asked */
		TALLOC_FREE(fh->poll);
	}
	if (want == fh->lease) {
		return;
	}
	rc = nasgw_lease(nc->client, &fh->cr, &fh->h, fh->owner, want);
	if (rc == 0) {
		fh->lease = want;
		return;
	}
	DBG_NOTICE("nasgw: lease on %s refused: %s; breaking it\n", fsp_str_dbg(fh->fsp),
		   nasgw_client_last_message());
	if (rc == -EAGAIN && !fh->recalled) {
		/* another head caches the file: Samba's grant cannot stand */
		fh->recalled = true;
		fh->break_to = 0;
		nasgw_lease_break(fh, 0);
	}
}

static void nasgw_lease_check_im(struct tevent_context *ev, struct tevent_immediate *im, void *private_data)
{
	struct nasgw_fh *fh = private_data;

	TALLOC_FREE(fh->im);
	nasgw_lease_sync(fh);
}

static void nasgw_lease_poll(struct tevent_context *ev, struct tevent_timer *te, struct timeval now,
			     void *private_data)
{
	struct nasgw_fh *fh = private_data;

	fh->poll = NULL; /* freed after the handler */
	nasgw_lease_sync(fh);
	if (fh->recalled) {
		fh->poll = tevent_add_timer(ev, fh->handle->conn, timeval_current_ofs_msec(NASGW_LEASE_POLL_MS),
					    nasgw_lease_poll, fh);
	}
}

/* Has Samba break the fsp's oplock or lease down to break_to (as for a
 * conflicting SMB open: the client is told, and acknowledges), and watches
 * until it has. */
static void nasgw_lease_break(struct nasgw_fh *fh, uint32_t break_to)
{
	struct messaging_context *msg_ctx = fh->fsp->conn->sconn->msg_ctx;
	struct share_mode_entry e;
	NTSTATUS status;

	memset(&e, 0, sizeof(e));
	e.pid = messaging_server_id(msg_ctx);
	e.share_file_id = fh_get_gen_id(fh->fsp->fh);

	status = send_break_message(msg_ctx, &fh->fsp->file_id, &e,
				    (break_to & NASGW_LEASE_READ) ? SMB2_LEASE_READ : SMB2_LEASE_NONE);
	if (!NT_STATUS_IS_OK(status)) {
		DBG_WARNING("nasgw: cannot break the lease on %s: NT status 0x%08x\n", fsp_str_dbg(fh->fsp),
			    NT_STATUS_V(status));
	}
	if (fh->poll == NULL) {
		fh->poll = tevent_add_timer(fh->fsp->conn->sconn->ev_ctx, fh->handle->conn,
					    timeval_current_ofs_msec(NASGW_LEASE_POLL_MS), nasgw_lease_poll, fh);
	}
}

/* A recall, on smbd's event loop. */
static void nasgw_recalled(uint64_t owner, uint32_t break_to)
{
	struct nasgw_fh *fh;

	for (fh = g_leasable; fh != NULL; fh = fh->next) {
		if (fh->owner == owner) {
			break;
		}
	}
	if (fh == NULL) {
		return; /* closed meanwhile: its lease went with it */
	}
	fh->break_to = fh->recalled ? (fh->break_to & break_to) : break_to;
	fh->recalled = true;
	if ((nasgw_lease_bits(fsp_lease_type(fh->fsp)) & ~fh->break_to) == 0) {
		nasgw_lease_sync(fh); /* nothing to break: Samba already did */
		return;
	}
	nasgw_lease_break(fh, fh->break_to);
}

/* Recalls come on the client library's thread; a pipe brings them to
 * smbd's event loop (written whole: a record is smaller than PIPE_BUF).
 * If the pipe is full the recall is lost, and nasgwd revokes the lease at
 * its deadline. */
struct nasgw_recall_rec {
	uint64_t owner;
	uint32_t break_to;
};

static int g_recall_pipe[2] = { -1, -1 };
static struct tevent_fd *g_recall_fde;

static void nasgw_recall_cb(void *arg, uint32_t volume, uint64_t ino, uint64_t owner, uint32_t break_to)
{
	struct nasgw_recall_rec rec = { .owner = owner, .break_to = break_to };

	if (write(g_recall_pipe[1], &rec, sizeof(rec)) != sizeof(rec)) {
		/* full: nasgwd revokes the lease at its deadline */
	}
}

static void nasgw_recall_readable(struct tevent_context *ev, struct tevent_fd *fde, uint16_t flags,
				  void *private_data)
{
	struct nasgw_recall_rec rec;

	while (read(g_recall_pipe[0], &rec, sizeof(rec)) == sizeof(rec)) {
		nasgw_recalled(rec.owner, rec.break_to);
	}
}

/* The pipe and its event, once per process, before the client opens. */
static int nasgw_recall_setup(struct tevent_context *ev)
{
	if (g_recall_fde != NULL) {
		return 0;
	}
	if (g_recall_pipe[0] == -1 && pipe2(g_recall_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
		return -errno;
	}
	g_recall_fde = tevent_add_fd(ev, NULL, g_recall_pipe[0], TEVENT_FD_READ, nasgw_recall_readable, NULL);
	return g_recall_fde != NULL ? 0 : -ENOMEM;
}

/* Durable handles. Samba's own (vfs_default) refuse to exist under
 * "kernel share modes": a local file system's share mode dies with the
 * descriptor, and a disconnected handle has none. nasgwd's is released at
 * the disconnect too (the close), and taken again here at the reconnect,
 * from the access and share mode Samba kept for the handle; if an NFSv4
 * open took a conflicting one meanwhile, the reconnect fails as one does
 * when another client opened the file. So the cookie and the reconnect are
 * vfs_default's, with the parameter off while they run (smbd is one
 * thread: nothing else reads it meanwhile). */

static void nasgw_kernel_share_modes(vfs_handle_struct *handle, bool on)
{
	lp_do_parameter(SNUM(handle->conn), "kernel share modes", on ? "yes" : "no");
}

static NTSTATUS nasgw_durable_cookie(vfs_handle_struct *handle, files_struct *fsp, TALLOC_CTX *mem_ctx,
				     DATA_BLOB *cookie)
{
	NTSTATUS status;

	nasgw_kernel_share_modes(handle, false);
	status = SMB_VFS_NEXT_DURABLE_COOKIE(handle, fsp, mem_ctx, cookie);
	nasgw_kernel_share_modes(handle, true);
	return status;
}

struct nasgw_entry_of {
	uint64_t share_file_id;
	bool found;
	uint32_t share_access;
};

static bool nasgw_entry_of_fn(struct share_mode_entry *e, bool *modified, void *private_data)
{
	struct nasgw_entry_of *want = private_data;

	if (e->share_file_id != want->share_file_id) {
		return false;
	}
	want->found = true;
	want->share_access = e->share_access;
	return true;
}

static NTSTATUS nasgw_durable_reconnect(vfs_handle_struct *handle, struct smb_request *smb1req,
					struct smbXsrv_open *op, const DATA_BLOB old_cookie, TALLOC_CTX *mem_ctx,
					files_struct **result, DATA_BLOB *new_cookie)
{
	struct nasgw_entry_of want = {0};
	struct share_mode_lock *lck;
	files_struct *fsp;
	NTSTATUS status;

	nasgw_kernel_share_modes(handle, false);
	status = SMB_VFS_NEXT_DURABLE_RECONNECT(handle, smb1req, op, old_cookie, mem_ctx, result, new_cookie);
	nasgw_kernel_share_modes(handle, true);
	if (!NT_STATUS_IS_OK(status)) {
		return status;
	}
	fsp = *result;
	want.share_file_id = fh_get_gen_id(fsp->fh);
	lck = get_existing_share_mode_lock(talloc_tos(), fsp->file_id);
	if (lck != NULL) {
		(void)share_mode_forall_entries(lck, nasgw_entry_of_fn, &want);
		TALLOC_FREE(lck);
	}
	if (want.found &&
	    nasgw_filesystem_sharemode(handle, fsp, want.share_access, fsp->access_mask) == 0) {
		fsp->fsp_flags.kernel_share_modes_taken = true;
		return NT_STATUS_OK;
	}
	DBG_NOTICE("nasgw: durable reconnect of %s refused: %s\n", fsp_str_dbg(fsp),
		   want.found ? "its share reservation conflicts with an open made meanwhile"
			      : "its share mode entry is gone");
	(void)fd_close(fsp);
	op->compat = NULL;
	fsp->op = NULL;
	file_free(smb1req, fsp);
	*result = NULL;
	data_blob_free(new_cookie);
	return NT_STATUS_OBJECT_NAME_NOT_FOUND;
}

static int nasgw_linux_setlease(vfs_handle_struct *handle, files_struct *fsp, int leasetype)
{
	errno = ENOSYS;
	return -1;
}

/* ---- extended attributes: nasgwd's (also Samba's DOS attributes and,
 * through streams_xattr and acl_xattr when stacked, streams and NT ACLs) */

static ssize_t nasgw_fgetxattr(vfs_handle_struct *handle, files_struct *fsp, const char *name, void *value,
			       size_t size)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	int64_t rc;

	if (fh == NULL) {
		return -1;
	}
	if (fh->listed_xattrs != NULL) {
		rc = nasgw_entry_getxattr(fh->listed_xattrs, name, value, size);
		if (rc != -EAGAIN) {
			return rc < 0 ? nasgw_fail((int)rc) : (ssize_t)rc;
		}
	}
	rc = nasgw_getxattr(nc->client, &cr, &fh->h, name, value, size);
	return rc < 0 ? nasgw_fail((int)rc) : (ssize_t)rc;
}

static ssize_t nasgw_flistxattr(vfs_handle_struct *handle, files_struct *fsp, char *list, size_t size)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	int64_t rc;

	if (fh == NULL) {
		return -1;
	}
	if (fh->listed_xattrs != NULL) {
		rc = nasgw_entry_listxattr(fh->listed_xattrs, list, size);
		if (rc != -EAGAIN) {
			return rc < 0 ? nasgw_fail((int)rc) : (ssize_t)rc;
		}
	}
	rc = nasgw_listxattr(nc->client, &cr, &fh->h, list, size);
	return rc < 0 ? nasgw_fail((int)rc) : (ssize_t)rc;
}

static int nasgw_fremovexattr(vfs_handle_struct *handle, files_struct *fsp, const char *name)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	int rc;

	if (fh == NULL) {
		return -1;
	}
	fh->fresh = false;
	TALLOC_FREE(fh->listed_xattrs);
	rc = nasgw_removexattr(nc->client, &cr, &fh->h, name);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_fsetxattr(vfs_handle_struct *handle, files_struct *fsp, const char *name, const void *value,
			   size_t size, int flags)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	uint32_t f = 0;
	int rc;

	if (fh == NULL) {
		return -1;
	}
	if (flags & XATTR_CREATE) {
		f |= NASGW_XATTR_CREATE;
	}
	if (flags & XATTR_REPLACE) {
		f |= NASGW_XATTR_REPLACE;
	}
	fh->fresh = false;
	TALLOC_FREE(fh->listed_xattrs);
	rc = nasgw_setxattr(nc->client, &cr, &fh->h, name, value, size, f);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

/* ---- server-side copy (FSCTL_SRV_COPYCHUNK)
 *
 * vfs_default's copy would call copy_file_range(2) on the fsps' descriptors,
 * which here are fake: the module offers its own. The resume key is
 * Samba's offload token (its token database, a context of this module's
 * own); the copy goes through the VFS stack's pread and pwrite (so a stream
 * module above sees stream copies), in pieces of NASGW_IO_MAX, with Samba's
 * byte-range lock checks on both files, as the caller's user. It is done
 * before the send returns: at most 16 MiB per request (Samba's
 * COPYCHUNK_MAX_TOTAL_LEN), a copy nasgwd serves from its cache or SAN at
 * its speed, so the smbd process waits that long. */

static struct vfs_offload_ctx *g_offload_ctx;

struct nasgw_offload_read_state {
	DATA_BLOB token;
};

static struct tevent_req *nasgw_offload_read_send(TALLOC_CTX *mem_ctx, struct tevent_context *ev,
						  vfs_handle_struct *handle, files_struct *fsp, uint32_t fsctl,
						  uint32_t ttl, off_t offset, size_t to_copy)
{
	struct nasgw_offload_read_state *state;
	struct tevent_req *req = tevent_req_create(mem_ctx, &state, struct nasgw_offload_read_state);
	NTSTATUS status;

	if (req == NULL) {
		return NULL;
	}
	if (fsctl != FSCTL_SRV_REQUEST_RESUME_KEY) {
		tevent_req_nterror(req, NT_STATUS_INVALID_DEVICE_REQUEST);
		return tevent_req_post(req, ev);
	}
	status = vfs_offload_token_ctx_init(fsp->conn->sconn->client, &g_offload_ctx);
	if (!tevent_req_nterror(req, status)) {
		status = vfs_offload_token_create_blob(state, fsp, fsctl, &state->token);
	}
	if (!tevent_req_nterror(req, status)) {
		status = vfs_offload_token_db_store_fsp(g_offload_ctx, fsp, &state->token);
	}
	if (!tevent_req_nterror(req, status)) {
		tevent_req_done(req);
	}
	return tevent_req_post(req, ev);
}

static NTSTATUS nasgw_offload_read_recv(struct tevent_req *req, vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
					uint32_t *flags, uint64_t *xferlen, DATA_BLOB *token)
{
	struct nasgw_offload_read_state *state = tevent_req_data(req, struct nasgw_offload_read_state);
	NTSTATUS status;

	if (tevent_req_is_nterror(req, &status)) {
		tevent_req_received(req);
		return status;
	}
	*flags = 0;
	*xferlen = 0;
	token->length = state->token.length;
	token->data = talloc_move(mem_ctx, &state->token.data);
	tevent_req_received(req);
	return NT_STATUS_OK;
}

struct nasgw_offload_write_state {
	off_t copied;
};

/* Samba's byte-range locks allow `type` access to [off, off + len) of fsp. */
static bool nasgw_offload_lock_ok(files_struct *fsp, off_t off, off_t len, enum brl_type type)
{
	struct lock_struct lck;

	init_strict_lock_struct(fsp, fsp->op->global->open_persistent_id, off, len, type,
				lp_posix_cifsu_locktype(fsp), &lck);
	return SMB_VFS_STRICT_LOCK_CHECK(fsp->conn, fsp, &lck);
}

static NTSTATUS nasgw_offload_copy(struct nasgw_offload_write_state *state, files_struct *src, off_t src_off,
				   files_struct *dst, off_t dst_off, off_t to_copy)
{
	uint8_t *buf;
	NTSTATUS status = NT_STATUS_OK;

	if (!change_to_user_and_service_by_fsp(src)) {
		return NT_STATUS_ACCESS_DENIED;
	}
	status = vfs_stat_fsp(src);
	if (!NT_STATUS_IS_OK(status)) {
		return status;
	}
	if (src->fsp_name->st.st_ex_size < src_off + to_copy) {
		/* MS-SMB2 3.3.5.15.6: Windows answers STATUS_INVALID_VIEW_SIZE. */
		return NT_STATUS_INVALID_VIEW_SIZE;
	}
	if (!nasgw_offload_lock_ok(src, src_off, to_copy, READ_LOCK)) {
		return NT_STATUS_FILE_LOCK_CONFLICT;
	}
	if (!change_to_user_and_service_by_fsp(dst)) {
		return NT_STATUS_INTERNAL_ERROR;
	}
	if (!nasgw_offload_lock_ok(dst, dst_off, to_copy, WRITE_LOCK)) {
		return NT_STATUS_FILE_LOCK_CONFLICT;
	}
	buf = talloc_array(state, uint8_t, MIN(to_copy, NASGW_IO_MAX));
	if (buf == NULL) {
		return NT_STATUS_NO_MEMORY;
	}
	while (state->copied < to_copy) {
		size_t n = (size_t)MIN(to_copy - state->copied, NASGW_IO_MAX);
		ssize_t got, put;

		if (!change_to_user_and_service_by_fsp(src)) {
			status = NT_STATUS_ACCESS_DENIED;
			break;
		}
		got = SMB_VFS_PREAD(src, buf, n, src_off + state->copied);
		if (got <= 0) {
			/* The source shrank under the copy: it ends there. */
			status = got < 0 ? map_nt_error_from_unix(errno) : NT_STATUS_OK;
			break;
		}
		if (!change_to_user_and_service_by_fsp(dst)) {
			status = NT_STATUS_ACCESS_DENIED;
			break;
		}
		put = SMB_VFS_PWRITE(dst, buf, (size_t)got, dst_off + state->copied);
		if (put != got) {
			status = put < 0 ? map_nt_error_from_unix(errno) : NT_STATUS_DISK_FULL;
			break;
		}
		state->copied += put;
		if ((size_t)got < n) {
			break;
		}
	}
	TALLOC_FREE(buf);
	return status;
}

static struct tevent_req *nasgw_offload_write_send(vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
						   struct tevent_context *ev, uint32_t fsctl, DATA_BLOB *token,
						   off_t transfer_offset, struct files_struct *dest_fsp, off_t dest_off,
						   off_t to_copy)
{
	struct nasgw_offload_write_state *state;
	struct tevent_req *req = tevent_req_create(mem_ctx, &state, struct nasgw_offload_write_state);
	files_struct *src_fsp = NULL;
	NTSTATUS status;

	if (req == NULL) {
		return NULL;
	}
	if (fsctl != FSCTL_SRV_COPYCHUNK && fsctl != FSCTL_SRV_COPYCHUNK_WRITE) {
		/* FSCTL_OFFLOAD_WRITE, FSCTL_DUP_EXTENTS_TO_FILE (clones): not yet */
		tevent_req_nterror(req, fsctl == FSCTL_DUP_EXTENTS_TO_FILE ? NT_STATUS_INVALID_PARAMETER
									  : NT_STATUS_NOT_IMPLEMENTED);
		return tevent_req_post(req, ev);
	}
	if (to_copy == 0) {
		tevent_req_done(req);
		return tevent_req_post(req, ev);
	}
	if (to_copy < 0 || transfer_offset < 0 || dest_off < 0 || transfer_offset > INT64_MAX - to_copy ||
	    dest_off > INT64_MAX - to_copy) {
		tevent_req_nterror(req, NT_STATUS_INVALID_PARAMETER);
		return tevent_req_post(req, ev);
	}
	if (g_offload_ctx == NULL) {
		tevent_req_nterror(req, NT_STATUS_OBJECT_NAME_NOT_FOUND); /* no token was ever made here */
		return tevent_req_post(req, ev);
	}
	status = vfs_offload_token_db_fetch_fsp(g_offload_ctx, token, &src_fsp);
	if (!tevent_req_nterror(req, status)) {
		status = vfs_offload_token_check_handles(fsctl, src_fsp, dest_fsp);
	}
	if (!tevent_req_nterror(req, status)) {
		status = nasgw_offload_copy(state, src_fsp, transfer_offset, dest_fsp, dest_off, to_copy);
		/* Back to the user of the request (the destination's). */
		if (!change_to_user_and_service_by_fsp(dest_fsp) && NT_STATUS_IS_OK(status)) {
			status = NT_STATUS_INTERNAL_ERROR;
		}
	}
	if (!tevent_req_nterror(req, status)) {
		tevent_req_done(req);
	}
	return tevent_req_post(req, ev);
}

static NTSTATUS nasgw_offload_write_recv(vfs_handle_struct *handle, struct tevent_req *req, off_t *copied)
{
	struct nasgw_offload_write_state *state = tevent_req_data(req, struct nasgw_offload_write_state);
	NTSTATUS status;

	if (tevent_req_is_nterror(req, &status)) {
		*copied = 0;
		tevent_req_received(req);
		return status;
	}
	*copied = state->copied;
	tevent_req_received(req);
	return NT_STATUS_OK;
}

/* ---- POSIX ACLs: nasgwd's, through the Linux xattr form
 * (system.posix_acl_access / _default: u32 version 2, then per entry u16
 * tag, u16 permissions, u32 id). Samba maps NT ACLs onto them, so an ACE an
 * SMB client sets grants or denies on every head (NFS, FUSE): nasgwd
 * enforces it. */

#define NASGW_ACL_XATTR_VERSION 2u
#define NASGW_ACL_UNDEFINED_ID 0xffffffffu
#define NASGW_ACL_ENTRIES_MAX 1024

static const struct {
	SMB_ACL_TAG_T smb;
	uint16_t linux_tag;
} nasgw_acl_tags[] = {
	{ SMB_ACL_USER_OBJ, 0x01 }, { SMB_ACL_USER, 0x02 }, { SMB_ACL_GROUP_OBJ, 0x04 },
	{ SMB_ACL_GROUP, 0x08 },    { SMB_ACL_MASK, 0x10 }, { SMB_ACL_OTHER, 0x20 },
};

static const char *nasgw_acl_xattr(SMB_ACL_TYPE_T type)
{
	return type == SMB_ACL_TYPE_DEFAULT ? "system.posix_acl_default" : "system.posix_acl_access";
}

static int nasgw_acl_add(SMB_ACL_T acl, SMB_ACL_TAG_T tag, uint32_t id, uint32_t perm)
{
	SMB_ACL_ENTRY_T e;

	if (sys_acl_create_entry(&acl, &e) != 0) {
		return -1;
	}
	e->a_type = tag;
	e->a_perm = perm & 7;
	if (tag == SMB_ACL_USER) {
		e->info.user.uid = id;
	} else if (tag == SMB_ACL_GROUP) {
		e->info.group.gid = id;
	}
	return 0;
}

static SMB_ACL_T nasgw_sys_acl_get_fd(vfs_handle_struct *handle, files_struct *fsp, SMB_ACL_TYPE_T type,
				      TALLOC_CTX *mem_ctx)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	uint8_t buf[4 + 8 * NASGW_ACL_ENTRIES_MAX];
	SMB_ACL_T acl;
	int64_t n;
	size_t i, k;

	if (fh == NULL) {
		return NULL;
	}
	acl = sys_acl_init(mem_ctx);
	if (acl == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	n = nasgw_getxattr(nc->client, &cr, &fh->h, nasgw_acl_xattr(type), buf, sizeof(buf));
	if (n == -ENODATA) {
		/* No ACL: the mode's three entries for the access ACL, none for
		 * the default one (as libacl gives them on Linux). */
		nasgw_attr a;
		int rc;

		if (type == SMB_ACL_TYPE_DEFAULT) {
			return acl;
		}
		rc = nasgw_getattr(nc->client, &cr, &fh->h, &a);
		if (rc != 0 || nasgw_acl_add(acl, SMB_ACL_USER_OBJ, 0, a.mode >> 6) != 0 ||
		    nasgw_acl_add(acl, SMB_ACL_GROUP_OBJ, 0, a.mode >> 3) != 0 ||
		    nasgw_acl_add(acl, SMB_ACL_OTHER, 0, a.mode) != 0) {
			TALLOC_FREE(acl);
			nasgw_fail(rc != 0 ? rc : -ENOMEM);
			return NULL;
		}
		return acl;
	}
	if (n < 0) {
		TALLOC_FREE(acl);
		nasgw_fail((int)n);
		return NULL;
	}
	if (n < 4 || (n - 4) % 8 != 0 || PULL_LE_U32(buf, 0) != NASGW_ACL_XATTR_VERSION) {
		TALLOC_FREE(acl);
		errno = EIO;
		return NULL;
	}
	for (i = 4; i < (size_t)n; i += 8) {
		const uint16_t tag = PULL_LE_U16(buf, i);
		SMB_ACL_TAG_T smb = SMB_ACL_TAG_INVALID;

		for (k = 0; k < ARRAY_SIZE(nasgw_acl_tags); k++) {
			if (nasgw_acl_tags[k].linux_tag == tag) {
				smb = nasgw_acl_tags[k].smb;
			}
		}
		if (smb == SMB_ACL_TAG_INVALID ||
		    nasgw_acl_add(acl, smb, PULL_LE_U32(buf, i + 4), PULL_LE_U16(buf, i + 2)) != 0) {
			TALLOC_FREE(acl);
			errno = smb == SMB_ACL_TAG_INVALID ? EIO : ENOMEM;
			return NULL;
		}
	}
	return acl;
}

static int nasgw_acl_entry_cmp(const void *a, const void *b)
{
	const uint8_t *x = a, *y = b;
	uint16_t tx = PULL_LE_U16(x, 0), ty = PULL_LE_U16(y, 0);
	uint32_t ix = PULL_LE_U32(x, 4), iy = PULL_LE_U32(y, 4);

	if (tx != ty) {
		return tx < ty ? -1 : 1;
	}
	return ix < iy ? -1 : (ix > iy ? 1 : 0);
}

static int nasgw_sys_acl_set_fd(vfs_handle_struct *handle, files_struct *fsp, SMB_ACL_TYPE_T type,
				SMB_ACL_T theacl)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	uint8_t buf[4 + 8 * NASGW_ACL_ENTRIES_MAX];
	size_t len = 4;
	int i, rc;
	size_t k;

	if (fh == NULL) {
		return -1;
	}
	if (theacl->count < 0 || theacl->count > NASGW_ACL_ENTRIES_MAX) {
		errno = EINVAL;
		return -1;
	}
	PUSH_LE_U32(buf, 0, NASGW_ACL_XATTR_VERSION);
	for (i = 0; i < theacl->count; i++) {
		const struct smb_acl_entry *e = &theacl->acl[i];
		uint16_t tag = 0;
		uint32_t id = NASGW_ACL_UNDEFINED_ID;

		for (k = 0; k < ARRAY_SIZE(nasgw_acl_tags); k++) {
			if (nasgw_acl_tags[k].smb == e->a_type) {
				tag = nasgw_acl_tags[k].linux_tag;
			}
		}
		if (tag == 0) {
			errno = EINVAL;
			return -1;
		}
		if (e->a_type == SMB_ACL_USER) {
			id = e->info.user.uid;
		} else if (e->a_type == SMB_ACL_GROUP) {
			id = e->info.group.gid;
		}
		PUSH_LE_U16(buf, len, tag);
		PUSH_LE_U16(buf, len + 2, e->a_perm & 7);
		PUSH_LE_U32(buf, len + 4, id);
		len += 8;
	}
	/* In the order Linux requires (and libacl writes): by tag, whose
	 * values ascend in that order, then by id. */
	qsort(buf + 4, (len - 4) / 8, 8, nasgw_acl_entry_cmp);
	fh->fresh = false; /* the mode follows an access ACL */
	rc = nasgw_setxattr(nc->client, &cr, &fh->h, nasgw_acl_xattr(type), buf, len, 0);
	return rc != 0 ? nasgw_fail(rc) : 0;
}

static int nasgw_sys_acl_delete_def_fd(vfs_handle_struct *handle, files_struct *fsp)
{
	struct nasgw_conn *nc = handle->data;
	nasgw_cred cr;
	struct nasgw_fh *fh = nasgw_begin(handle, fsp, &cr);
	int rc;

	if (fh == NULL) {
		return -1;
	}
	rc = nasgw_removexattr(nc->client, &cr, &fh->h, nasgw_acl_xattr(SMB_ACL_TYPE_DEFAULT));
	return rc != 0 && rc != -ENODATA ? nasgw_fail(rc) : 0;
}

static bool nasgw_aio_force(vfs_handle_struct *handle, files_struct *fsp)
{
	return false;
}

static struct vfs_fn_pointers nasgw_fns = {
	/* Disk operations */
	.connect_fn = nasgw_connect,
	.disconnect_fn = nasgw_disconnect,
	.disk_free_fn = nasgw_disk_free,
	.get_quota_fn = vfs_not_implemented_get_quota,
	.set_quota_fn = vfs_not_implemented_set_quota,
	.get_shadow_copy_data_fn = nasgw_get_shadow_copy_data,
	.statvfs_fn = nasgw_statvfs,
	.fs_capabilities_fn = nasgw_fs_capabilities,
	.get_dfs_referrals_fn = vfs_not_implemented_get_dfs_referrals,
	.create_dfs_pathat_fn = vfs_not_implemented_create_dfs_pathat,
	.read_dfs_pathat_fn = vfs_not_implemented_read_dfs_pathat,

	/* Directory operations */
	.fdopendir_fn = nasgw_fdopendir,
	.readdir_fn = nasgw_vfs_readdir,
	.seekdir_fn = nasgw_seekdir,
	.telldir_fn = nasgw_telldir,
	.rewind_dir_fn = nasgw_rewind_dir,
	.mkdirat_fn = nasgw_mkdirat,
	.closedir_fn = nasgw_closedir,

	/* File operations */
	.openat_fn = nasgw_openat,
	.close_fn = nasgw_close,
	.pread_fn = nasgw_pread,
	.pread_send_fn = nasgw_pread_send,
	.pread_recv_fn = nasgw_aio_recv,
	.pwrite_fn = nasgw_pwrite,
	.pwrite_send_fn = nasgw_pwrite_send,
	.pwrite_recv_fn = nasgw_aio_recv,
	.lseek_fn = nasgw_lseek,
	.sendfile_fn = vfs_not_implemented_sendfile,
	.recvfile_fn = vfs_not_implemented_recvfile,
	.renameat_fn = nasgw_renameat,
	.fsync_send_fn = nasgw_fsync_send,
	.fsync_recv_fn = nasgw_fsync_recv,
	.stat_fn = nasgw_stat,
	.fstat_fn = nasgw_fstat,
	.lstat_fn = nasgw_lstat,
	.fstatat_fn = nasgw_fstatat,
	.get_alloc_size_fn = nasgw_get_alloc_size,
	.unlinkat_fn = nasgw_unlinkat,
	.fchmod_fn = nasgw_fchmod,
	.fchown_fn = nasgw_fchown,
	.lchown_fn = nasgw_lchown,
	.chdir_fn = nasgw_chdir,
	.getwd_fn = nasgw_getwd,
	.fntimes_fn = nasgw_fntimes,
	.ftruncate_fn = nasgw_ftruncate,
	.fallocate_fn = nasgw_fallocate_fsp,
	.lock_fn = nasgw_vfs_lock,
	.filesystem_sharemode_fn = nasgw_filesystem_sharemode,
	.fcntl_fn = nasgw_fcntl,
	.linux_setlease_fn = nasgw_linux_setlease,
	.durable_cookie_fn = nasgw_durable_cookie,
	.durable_reconnect_fn = nasgw_durable_reconnect,
	.getlock_fn = nasgw_getlock,
	.symlinkat_fn = nasgw_symlinkat,
	.readlinkat_fn = nasgw_readlinkat,
	.linkat_fn = nasgw_linkat,
	.mknodat_fn = nasgw_mknodat,
	.realpath_fn = nasgw_realpath,
	.fchflags_fn = vfs_not_implemented_fchflags,
	.get_real_filename_at_fn = nasgw_get_real_filename_at,
	.connectpath_fn = nasgw_connectpath,

	/* POSIX ACLs, nasgwd's; Samba maps NT ACLs onto them. The blob
	 * (Samba's own encoding of them, for acl_xattr to tell when they
	 * changed under a stored NT ACL) is Samba's, over the entries above. */
	.sys_acl_get_fd_fn = nasgw_sys_acl_get_fd,
	.sys_acl_blob_get_fd_fn = posix_sys_acl_blob_get_fd,
	.sys_acl_set_fd_fn = nasgw_sys_acl_set_fd,
	.sys_acl_delete_def_fd_fn = nasgw_sys_acl_delete_def_fd,

	/* Extended attributes */
	.getxattrat_send_fn = vfs_not_implemented_getxattrat_send,
	.getxattrat_recv_fn = vfs_not_implemented_getxattrat_recv,
	.fgetxattr_fn = nasgw_fgetxattr,
	.flistxattr_fn = nasgw_flistxattr,
	.fremovexattr_fn = nasgw_fremovexattr,
	.fsetxattr_fn = nasgw_fsetxattr,

	.aio_force_fn = nasgw_aio_force,

	/* Server-side copy (the resume key, then the copy) */
	.offload_read_send_fn = nasgw_offload_read_send,
	.offload_read_recv_fn = nasgw_offload_read_recv,
	.offload_write_send_fn = nasgw_offload_write_send,
	.offload_write_recv_fn = nasgw_offload_write_recv,

	/*
	 * Left to Samba's generic code (vfs_default), which reaches the file
	 * system only through the entries above: create_file, file ids,
	 * streams (one unnamed stream, or streams_xattr's), offload copy,
	 * compression, making snapshots over FSRVP (not supported), name
	 * translation, parent paths, FSCTLs,
	 * DOS attributes (user.DOSATTRIB), NT ACLs (from POSIX ACLs),
	 * Windows byte-range locks (locking.tdb, over the POSIX locks above),
	 * durable handles' disconnect (the cookie and reconnect above wrap
	 * vfs_default's).
	 */
};

NTSTATUS samba_init_module(TALLOC_CTX *ctx);

NTSTATUS samba_init_module(TALLOC_CTX *ctx)
{
	return smb_register_vfs(SMB_VFS_INTERFACE_VERSION, NASGW_MODULE, &nasgw_fns);
}
