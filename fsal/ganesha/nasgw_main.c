/* FSAL_NASGW: module registration, the NASGW { } config block, the shared
 * nasgwd client, and the conversions every other file uses. */
#include "nasgw_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "FSAL/fsal_init.h"
#include "fsal_convert.h"
#include "nfs_core.h"
#include "nfs_init.h"
#include "fridgethr.h"

static const char nasgw_name[] = "NASGW";

struct nasgw_fsal_module NASGW = {
	.fsal = {
		.fs_info = {
			.maxfilesize = INT64_MAX,
			.maxlink = 65000,
			.maxnamelen = NASGW_NAME_MAX,
			.maxpathlen = 4096,
			.no_trunc = true,
			.chown_restricted = true,
			.case_insensitive = false,
			.case_preserving = true,
			.link_support = true,
			.symlink_support = true,
			.lock_support = true,
			.lock_support_async_block = false,
			.named_attr = false,
			.unique_handles = true,
			.acl_support = FSAL_ACLSUPPORT_ALLOW | FSAL_ACLSUPPORT_DENY,
			.cansettime = true,
			.homogenous = true,
			/* NFSv4.2 xattrs: user.* in nasgwd */
			.supported_attrs = ATTRS_POSIX | ATTR_ACL | ATTR4_XATTR,
			.xattr_support = true,
			.maxread = NASGW_IO_MAX,
			.maxwrite = NASGW_IO_MAX,
			.umask = 0,
			.auth_exportpath_xdev = false,
			.link_supports_permission_checks = true,
			.readdir_plus = true,
			.expire_time_parent = -1,
			/* granted only when nasgwd holds them as leases
			 * (lease_op2), so other heads recall them */
			.delegations = FSAL_OPTION_FILE_READ_DELEG |
				       FSAL_OPTION_FILE_WRITE_DELEG,
		}
	}
};

static struct config_item nasgw_items[] = {
	CONF_ITEM_PATH("Socket", 1, MAXPATHLEN, "/run/nasgw/head.sock",
		       nasgw_fsal_module, socket_path),
	CONF_ITEM_UI32("Connections", 1, 16, 4, nasgw_fsal_module, connections),
	CONF_ITEM_UI32("Reconnect_Timeout_Ms", 1000, 3600000, 60000,
		       nasgw_fsal_module, reconnect_timeout_ms),
	CONF_ITEM_BOOL("Async_IO", true, nasgw_fsal_module, async_io),
	CONF_ITEM_BOOL("NFSv3_Unstable", true, nasgw_fsal_module, v3_unstable),
	CONFIG_EOL
};

static struct config_block nasgw_block = {
	.dbus_interface_name = "org.ganesha.nfsd.config.fsal.nasgw",
	.blk_desc.name = "NASGW",
	.blk_desc.type = CONFIG_BLOCK,
	.blk_desc.u.blk.init = noop_conf_init,
	.blk_desc.u.blk.params = nasgw_items,
	.blk_desc.u.blk.commit = noop_conf_commit
};

/* Every descriptor but stdio is closed by the exec (close-on-exec now, so
 * no number is freed, and reused, under threads still running). */
static void cloexec_all(void)
{
	DIR *d;
	struct dirent *e;

	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return;
	d = opendir("/proc/self/fd");	/* kernels before 5.11 */
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);

		if (fd > 2 && fd != dirfd(d))
			(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	closedir(d);
}

/* ganesha.nfsd starts again in this process (same pid, so its supervisor,
 * pid file and the lab see the same server) with a new epoch, which is
 * Ganesha's NFSv3 write verifier: its own binary (by name, so the process
 * stays "ganesha.nfsd" for nasgwd's signals and pidof), its arguments
 * again, with -F (the process is already detached if it was to be) and -E
 * later than the current epoch put first (getopt takes the last -E, and
 * options after a "--" would not count). Every descriptor but stdio is
 * closed: the new server binds its ports and takes its pid file lock
 * afresh. The signal mask stays Ganesha's (signals it takes with
 * sigtimedwait stay blocked; pending ones reach the new server). Never
 * returns. */
static void nasgw_restart_in_place(void)
{
	static atomic_flag started = ATOMIC_FLAG_INIT;
	char *args = NULL, **argv = NULL, epoch[32], exe[PATH_MAX];
	size_t len = 0, cap = 0;
	ssize_t el;
	int fd, argc = 0, n = 0;
	time_t e = time(NULL);

	if (atomic_flag_test_and_set(&started)) {
		for (;;)	/* another thread is restarting: wait for the exec */
			pause();
	}
	fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	while (fd >= 0) {
		ssize_t r;

		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 16384;
			args = gsh_realloc(args, cap);
		}
		r = read(fd, args + len, cap - len - 1);
		if (r <= 0)
			break;
		len += r;
	}
	if (fd >= 0)
		close(fd);
	el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len == 0 || el <= 0) {
		LogCrit(COMPONENT_FSAL,
			"FSAL_NASGW: cannot read this process's command line or binary: exiting instead");
		_exit(75);
	}
	exe[el] = '\0';
	if (el > 10 && strcmp(exe + el - 10, " (deleted)") == 0)
		strcpy(exe, "/proc/self/exe");	/* upgraded meanwhile: this one */
	args[len] = '\0';
	for (size_t i = 0; i < len; i++)
		argc += args[i] == '\0';
	if (e <= nfs_ServerEpoch)
		e = nfs_ServerEpoch + 1;
	snprintf(epoch, sizeof(epoch), "%" PRId64, (int64_t)e);
	argv = gsh_calloc(argc + 4, sizeof(char *));
	argv[n++] = args;
	argv[n++] = "-F";
	argv[n++] = "-E";
	argv[n++] = epoch;
	for (size_t i = strlen(args) + 1; i < len; i += strlen(args + i) + 1) {
		/* -F and -E of an earlier restart are replaced */
		if (strcmp(args + i, "-F") == 0)
			continue;
		if (strcmp(args + i, "-E") == 0) {
			i += strlen(args + i) + 1;
			if (i >= len)
				break;
			continue;
		}
		argv[n++] = args + i;
	}
	argv[n] = NULL;
	LogCrit(COMPONENT_FSAL,
		"FSAL_NASGW: ganesha.nfsd restarts in place (epoch %s)",
		epoch);
	cloexec_all();
	execv(exe, argv);
	LogCrit(COMPONENT_FSAL,
		"FSAL_NASGW: cannot exec %s to restart in place: %s (errno %d); exiting instead",
		exe, strerror(errno), errno);
	_exit(75);
}

/* nasgwd's write verifier changed: it opened the domain again (a restart, a
 * crash). NFSv4 replies carry nasgwd's verifier, so v4 clients see the
 * change; NFSv3 replies carry Ganesha's own, so when v3 writes answered
 * UNSTABLE were still waiting for a COMMIT (lost), v3 clients would take
 * their COMMIT as covering data nasgwd no longer has: Ganesha restarts, as
 * a server that lost its cache does, and they send it again. */
static void nasgw_verifier_changed(void *arg, uint64_t held, uint64_t now,
				   int lost)
{
	(void)arg;
	if (!lost) {
		LogEvent(COMPONENT_FSAL,
			 "FSAL_NASGW: nasgwd's write verifier changed (%016" PRIx64
			 " -> %016" PRIx64
			 "); no NFSv3 write answered UNSTABLE awaited a COMMIT",
			 held, now);
		return;
	}
	LogCrit(COMPONENT_FSAL,
		"FSAL_NASGW: nasgwd's write verifier changed (%016" PRIx64
		" -> %016" PRIx64
		") while NFSv3 writes answered UNSTABLE awaited a COMMIT: nasgwd may have lost them, and NFSv3 replies carry Ganesha's own verifier, so ganesha.nfsd restarts for NFSv3 clients to see a new one and send them again",
		held, now);
	nasgw_restart_in_place();
}

/* READ and WRITE completions (io_finish in nasgw_handle.c) run here, off
 * the client library's reader threads. Threads are made on demand up to
 * the maximum, and those above the minimum leave after a minute idle; a
 * completion that finds them all busy (blocked in a synchronous call, say)
 * waits in the queue. */
#define NASGW_IO_THREADS_MIN 2
#define NASGW_IO_THREADS_MAX 16
#define NASGW_IO_THREAD_IDLE_S 60

/* Under client_lock, before the client exists; false if it cannot be
 * made (the client is not opened then: calls are answered DELAY). */
static bool nasgw_io_fridge_init(void)
{
	struct fridgethr_params frp;
	int rc;

	if (NASGW.io_fridge != NULL)
		return true;
	memset(&frp, 0, sizeof(frp));
	frp.thr_max = NASGW_IO_THREADS_MAX;
	frp.thr_min = NASGW_IO_THREADS_MIN;
	frp.thread_delay = NASGW_IO_THREAD_IDLE_S;
	frp.flavor = fridgethr_flavor_worker;
	frp.deferment = fridgethr_defer_queue;
	rc = fridgethr_init(&NASGW.io_fridge, "nasgw_io", &frp);
	if (rc != 0) {
		LogCrit(COMPONENT_FSAL,
			"FSAL_NASGW: cannot make the I/O completion threads: %s",
			strerror(rc));
		NASGW.io_fridge = NULL;
		return false;
	}
	return true;
}

/* The client is opened on first use (the first export), not at config time:
 * ganesha may start before nasgwd, and the client library then waits for it
 * within Reconnect_Timeout_Ms. */
nasgw_client *nasgw_get_client(void)
{
	nasgw_client *c;

	PTHREAD_MUTEX_lock(&NASGW.client_lock);
	if (NASGW.client == NULL && nasgw_io_fridge_init()) {
		nasgw_client_options o;
		int rc;

		memset(&o, 0, sizeof(o));
		o.socket_path = NASGW.socket_path;
		o.client_name = "ganesha";
		o.connections = NASGW.connections;
		o.reconnect_timeout_ms = NASGW.reconnect_timeout_ms;
		o.connect_timeout_ms = NASGW.reconnect_timeout_ms;
		o.verifier_changed = nasgw_verifier_changed;
		o.recall = nasgw_deleg_recall;
		rc = nasgw_client_open(&o, &NASGW.client);
		if (rc != 0) {
			LogCrit(COMPONENT_FSAL,
				"FSAL_NASGW: cannot reach nasgwd at %s: %s (%s)",
				NASGW.socket_path, strerror(-rc),
				nasgw_client_last_message());
			NASGW.client = NULL;
		} else {
			LogEvent(COMPONENT_FSAL,
				 "FSAL_NASGW: connected to nasgwd at %s",
				 NASGW.socket_path);
		}
	}
	c = NASGW.client;
	PTHREAD_MUTEX_unlock(&NASGW.client_lock);
	return c;
}

/* The caller's credentials, after Ganesha applied the export's squashing. */
void nasgw_creds(nasgw_cred *cr)
{
	const struct user_cred *u = &op_ctx->creds;

	cr->uid = u->caller_uid;
	cr->gid = u->caller_gid;
	cr->ngroups = u->caller_glen > 1024 ? 1024 : u->caller_glen;
	cr->groups = (const uint32_t *)u->caller_garray;
}

/* nasgw results are 0 or -errno. -EAGAIN (a non-idempotent call whose
 * outcome is unknown after a reconnect) and -ENOTCONN (nasgwd unreachable
 * for now) become DELAY, so NFS clients retry rather than fail. */
fsal_status_t nasgw_status(int rc)
{
	if (rc >= 0)
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	/* EINPROGRESS: another head's lease (an SMB lease) is being
	 * recalled; the client retries (NFS4ERR_DELAY, NFS3ERR_JUKEBOX), as
	 * knfsd answers while it recalls a delegation. */
	/* EHOSTUNREACH: nasgwd does not serve the reserve, or the file's
	 * domain, here now (a takeover or a giveback under way, the domain's
	 * address about to move): the client retries, reaching whichever node
	 * serves it by then. */
	if (rc == -EAGAIN || rc == -ENOTCONN || rc == -EINPROGRESS || rc == -EHOSTUNREACH)
		return fsalstat(ERR_FSAL_DELAY, -rc);
	/* nasgwd did not issue the handle (forged, altered, another
	 * reserve's, or presented through another export). */
	if (rc == -EBADMSG)
		return fsalstat(ERR_FSAL_BADHANDLE, -rc);
	return fsalstat(posix2fsal_error(-rc), -rc);
}

static object_file_type_t nasgw_type(uint32_t t)
{
	switch (t) {
	case NASGW_TYPE_REG:
		return REGULAR_FILE;
	case NASGW_TYPE_DIR:
		return DIRECTORY;
	case NASGW_TYPE_LNK:
		return SYMBOLIC_LINK;
	case NASGW_TYPE_FIFO:
		return FIFO_FILE;
	case NASGW_TYPE_SOCK:
		return SOCKET_FILE;
	case NASGW_TYPE_CHR:
		return CHARACTER_FILE;
	case NASGW_TYPE_BLK:
		return BLOCK_FILE;
	}
	return NO_FILE_TYPE;
}

void nasgw_to_attrs(const nasgw_attr *a, struct fsal_attrlist *out)
{
	if (out == NULL)
		return;
	out->type = nasgw_type(a->type);
	out->filesize = a->size;
	out->fsid.major = a->handle.volume;
	out->fsid.minor = 0;
	out->fileid = nasgw_shown_ino(&a->handle);
	out->mode = a->mode & 07777;
	out->numlinks = a->nlink;
	out->owner = a->uid;
	out->group = a->gid;
	out->rawdev.major = (uint32_t)(a->rdev >> 32);
	out->rawdev.minor = (uint32_t)a->rdev;
	out->atime.tv_sec = a->atime.sec;
	out->atime.tv_nsec = a->atime.nsec;
	out->mtime.tv_sec = a->mtime.sec;
	out->mtime.tv_nsec = a->mtime.nsec;
	out->ctime.tv_sec = a->ctime.sec;
	out->ctime.tv_nsec = a->ctime.nsec;
	out->creation.tv_sec = a->btime.sec;
	out->creation.tv_nsec = a->btime.nsec;
	out->spaceused = a->blocks * 512;
	out->change = a->change;
	out->generation = a->handle.gen;
	out->valid_mask = ATTRS_POSIX | ATTR_CREATION | ATTR_GENERATION;
	out->supported = ATTRS_POSIX | ATTR_CREATION | ATTR_GENERATION | ATTR_ACL;
	/* These attributes do not carry the NFSv4 ACL (getattrs adds it), and
	 * Ganesha's cache, which trusts the ACL of whatever asked for it, must
	 * not take them as saying there is none: so they do not answer for
	 * it. */
	out->request_mask &= ~(attrmask_t)ATTR_ACL;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

void nasgw_encode_wire(const nasgw_handle *h, uint8_t out[NASGW_WIRE_LEN])
{
	out[0] = NASGW_WIRE_VERSION;
	put_le(out + 1, h->volume, 4);
	put_le(out + 5, h->ino, 8);
	put_le(out + 13, h->gen, 8);
	put_le(out + 21, h->snap, 4);
	memcpy(out + 25, h->mac, NASGW_MAC_BYTES);
}

fsal_errors_t nasgw_decode_wire(const struct nasgw_fsal_export *exp,
				const void *buf, size_t len, nasgw_handle *h)
{
	const uint8_t *p = buf;

	if (len != NASGW_WIRE_LEN || p[0] != NASGW_WIRE_VERSION)
		return ERR_FSAL_BADHANDLE;
	memset(h, 0, sizeof(*h));
	h->volume = (uint32_t)get_le(p + 1, 4);
	h->ino = get_le(p + 5, 8);
	h->gen = get_le(p + 13, 8);
	h->snap = (uint32_t)get_le(p + 21, 4);
	memcpy(h->mac, p + 25, NASGW_MAC_BYTES);
	if (h->ino == 0)
		return ERR_FSAL_BADHANDLE;
	/* Honoured only through an export of its own volume, and only in
	 * the export's scope (nasgwd checks the MAC over it). */
	if (h->volume != exp->root.volume)
		return ERR_FSAL_STALE;
	h->scope = exp->root.scope;
	return ERR_FSAL_NO_ERROR;
}

uint16_t nasgw_export_id(const struct fsal_export *exp)
{
	return container_of(exp, const struct nasgw_fsal_export, export)
		->export_id;
}

struct nasgw_fsal_obj *nasgw_alloc_obj(struct fsal_export *exp,
				       const nasgw_attr *a)
{
	struct nasgw_fsal_obj *o = gsh_calloc(1, sizeof(*o));

	uint16_t id = nasgw_export_id(exp);

	o->h = a->handle;
	nasgw_encode_wire(&o->h, o->wire);
	memcpy(o->key, o->wire, NASGW_WIRE_LEN);
	memcpy(o->key + NASGW_WIRE_LEN, &id, sizeof(id));
	fsal_obj_handle_init(&o->obj_handle, exp, nasgw_type(a->type));
	o->obj_handle.obj_ops = &NASGW.handle_ops;
	o->obj_handle.fsid.major = a->handle.volume;
	o->obj_handle.fsid.minor = 0;
	o->obj_handle.fileid = nasgw_shown_ino(&a->handle);
	o->fd.openflags = FSAL_O_CLOSED;
	o->change_seen = a->change;
	return o;
}

/* Ganesha's NFSv3 write verifier is its epoch (nfs_start builds it from
 * nfs_ServerEpoch, after the FSALs it starts with are configured), by
 * default the second ganesha.nfsd started. The two nodes of a pair may
 * start theirs in the same second: then a v3 client whose UNSTABLE writes
 * the dead node held would take the survivor's COMMIT, after the takeover,
 * as covering them (the same verifier) and never send them again. So a
 * process that configures this FSAL before nfs_start makes its epoch its
 * own: 32 random low bits under its second (the high bits), so that no two
 * starts of a pair share it and it still grows from one start to the next
 * (a restart in place passes a later epoch with -E, made unique again
 * here); NFSv4 client and state ids take its low 32 bits, which differ
 * between the nodes now too. Returns false when it is too late for that:
 * this FSAL was loaded after nfs_start (a standby that had no export of
 * ours when ganesha.nfsd started, at the reload of its takeover); the
 * verifier is then the plain epoch, which Ganesha does not let an FSAL
 * change (NFS3_write_verifier is not exported). */
static bool nasgw_unique_epoch(void)
{
	const uint64_t low = 0xffffffffull;
	uint64_t e = (uint64_t)nfs_ServerEpoch, now = (uint64_t)time(NULL) << 32;
	uint32_t r = 0;

	if (nfs_init_wait_timeout(0) == 0)	/* complete: nfs_start ran */
		return false;
	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		r = (uint32_t)getpid() * 2654435761u ^ (uint32_t)ts.tv_nsec;
	}
	e = (now > e ? now : (e & ~low) + (1ull << 32)) | r;
	LogEvent(COMPONENT_FSAL,
		 "FSAL_NASGW: the NFSv3 write verifier is %016" PRIx64
		 ", unique to this start (the epoch was %016" PRIx64 ")",
		 e, (uint64_t)nfs_ServerEpoch);
	nfs_ServerEpoch = (time_t)e;
	return true;
}

static fsal_status_t nasgw_init_config(struct fsal_module *fsal_hdl,
				       config_file_t config_struct,
				       struct config_error_type *err_type)
{
	struct nasgw_fsal_module *me =
		container_of(fsal_hdl, struct nasgw_fsal_module, fsal);

	const bool unique = nasgw_unique_epoch();

	(void)load_config_from_parse(config_struct, &nasgw_block, me, true,
				     err_type);
	if (!config_error_is_harmless(err_type))
		return fsalstat(ERR_FSAL_INVAL, 0);
	if (!unique && me->v3_unstable) {
		/* Its v3 verifier may be the partner's (nasgw_unique_epoch):
		 * an UNSTABLE write is made durable before its answer, so that
		 * no COMMIT is needed to keep it. Until ganesha.nfsd restarts
		 * (with this FSAL in its exports, or head forwarding on). */
		me->v3_unstable = false;
		LogWarn(COMPONENT_FSAL,
			"FSAL_NASGW: loaded after ganesha.nfsd started: its NFSv3 write verifier (the epoch %016" PRIx64
			") may be the partner's, so NFSv3 UNSTABLE writes are made durable (FILE_SYNC) until it restarts",
			(uint64_t)nfs_ServerEpoch);
	}
	display_fsinfo(&me->fsal);
	LogEvent(COMPONENT_FSAL,
		 "FSAL_NASGW: nasgwd socket %s, %u connections, NFSv3 UNSTABLE writes %s",
		 me->socket_path, me->connections,
		 me->v3_unstable ? "answered from nasgwd's cache" :
				   "made durable (FILE_SYNC)");
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

MODULE_INIT void nasgw_init(void)
{
	struct fsal_module *myself = &NASGW.fsal;

	PTHREAD_MUTEX_init(&NASGW.client_lock, NULL);
	PTHREAD_MUTEX_init(&NASGW.deleg_lock, NULL);
	if (register_fsal(myself, nasgw_name, FSAL_MAJOR_VERSION,
			  FSAL_MINOR_VERSION, FSAL_ID_NO_PNFS) != 0) {
		LogCrit(COMPONENT_FSAL, "FSAL_NASGW: failed to register");
		return;
	}
	myself->m_ops.create_export = nasgw_create_export;
	myself->m_ops.init_config = nasgw_init_config;
	nasgw_handle_ops_init(&NASGW.handle_ops);
}

MODULE_FINI void nasgw_fini(void)
{
	if (unregister_fsal(&NASGW.fsal) != 0) {
		LogCrit(COMPONENT_FSAL, "FSAL_NASGW: unable to unload");
		return;
	}
	PTHREAD_MUTEX_lock(&NASGW.client_lock);
	if (NASGW.client != NULL)
		nasgw_client_close(NASGW.client);
	NASGW.client = NULL;
	PTHREAD_MUTEX_unlock(&NASGW.client_lock);
	/* The client's last completions are queued by now: run them, then
	 * stop the threads. */
	if (NASGW.io_fridge != NULL) {
		if (fridgethr_sync_command(NASGW.io_fridge,
					   fridgethr_comm_stop, 30) != 0)
			fridgethr_cancel(NASGW.io_fridge);
		fridgethr_destroy(NASGW.io_fridge);
		NASGW.io_fridge = NULL;
	}
	PTHREAD_MUTEX_destroy(&NASGW.client_lock);
	while (NASGW.delegs != NULL) {
		struct nasgw_deleg *d = NASGW.delegs;

		NASGW.delegs = d->next;
		gsh_free(d);
	}
	PTHREAD_MUTEX_destroy(&NASGW.deleg_lock);
}
