/* FSAL_NASGW: NFS-Ganesha's file system access layer over nasgwd.
 *
 * A thin translator (docs/nfs.md): every operation becomes a head-protocol
 * call through fsal/client; nasgwd checks permissions with the caller's
 * credentials and owns all file-system state. This module keeps only what
 * Ganesha asks an FSAL to keep: object handles (the nasgw handle, so a
 * restart of ganesha or nasgwd never makes a handle stale), share
 * reservation counters, and the fds Ganesha's state machinery embeds in
 * its states.
 *
 * C, because Ganesha's headers are not C++-clean; fsal/client is C++ behind
 * a C API. */
#ifndef NASGW_FSAL_INT_H
#define NASGW_FSAL_INT_H

#include "config.h"

#include <stdint.h>

#include "fsal.h"
#include "fsal_types.h"
#include "fsal_api.h"
#include "FSAL/fsal_commonlib.h"

#include "nasgw_client.h"

/* The wire handle (docs/nfs.md): a version byte (2), then volume (u32),
 * inode (u64), generation (u64), snapshot (u32), little endian, and the
 * 16-byte MAC nasgwd issued: 41 bytes, so a handle means the same on any
 * node. The scope the MAC covers is not carried: it is the export's
 * directory, so a handle presented through another export fails the MAC.
 * Version 1 (21 bytes, no MAC) is refused: BADHANDLE.
 *
 * The MDCACHE key is the wire handle and the export id (as FSAL_CEPH's), so
 * an object cached through one export is never found through another:
 * every object of an export was made by a call in that export's scope. */
#define NASGW_WIRE_VERSION 2
#define NASGW_WIRE_LEN 41
#define NASGW_KEY_LEN (NASGW_WIRE_LEN + 2)

struct nasgw_fsal_module {
	struct fsal_module fsal;
	struct fsal_obj_ops handle_ops;
	/* config (NASGW { ... }) */
	char *socket_path;
	uint32_t connections;
	uint32_t reconnect_timeout_ms;
	bool async_io;		/* READ/WRITE completed on io_fridge's threads */
	bool v3_unstable;	/* NFSv3 UNSTABLE writes answered from nasgwd's cache */
	/* one client shared by every export */
	pthread_mutex_t client_lock;
	nasgw_client *client;
	/* Delegations granted (lease_op2), for nasgwd's recalls: see
	 * nasgw_deleg_recall. */
	pthread_mutex_t deleg_lock;
	struct nasgw_deleg *delegs;
	/* Where READ and WRITE completions run (nasgw_io_fridge): never on
	 * the client library's reader thread, because Ganesha's completion
	 * may call this FSAL synchronously. Made with the client. */
	struct fridgethr *io_fridge;
};

/* A delegation Ganesha granted and nasgwd holds as a lease: its owner on
 * nasgwd (the delegation's state), and what Ganesha needs to recall it. */
struct nasgw_deleg {
	struct nasgw_deleg *next;
	uint64_t owner;
	uint8_t key[NASGW_KEY_LEN];
	const struct fsal_up_vector *up_ops;
};
void nasgw_deleg_recall(void *arg, uint32_t volume, uint64_t ino,
			uint64_t owner, uint32_t break_to);

extern struct nasgw_fsal_module NASGW;

struct nasgw_fsal_export {
	struct fsal_export export;
	char *volume;		/* volume name */
	char *path;		/* the export's path: /<volume>[/sub/path] */
	nasgw_handle root;	/* the exported directory (the scope of its handles) */
	uint16_t export_id;	/* Ganesha's id of the export (in MDCACHE keys) */
	bool show_snapshot_dir;	/* READDIR lists `.snapshot` (Show_Snapshot_Dir) */
};

struct nasgw_fsal_obj {
	struct fsal_obj_handle obj_handle;
	nasgw_handle h;
	uint8_t wire[NASGW_WIRE_LEN];
	uint8_t key[NASGW_KEY_LEN];	/* wire, then the export id */
	/* regular files: the global fd (stateless NFSv3 I/O) and share
	 * reservations, both under obj_handle.obj_lock */
	struct fsal_fd fd;
	struct fsal_share share;
	/* The attributes a WRITE's reply carried, for the GETATTR Ganesha
	 * makes right after the write (MDCACHE drops its cached attributes
	 * when a write completes, and the NFSv3 WRITE reply, the NFSv4
	 * compound's GETATTR, want them): used once, within
	 * NASGW_POST_ATTR_MS of the reply, and only if no reply seen since
	 * carried a newer change counter. Under obj_handle.obj_lock. */
	bool post_valid;
	nasgw_attr post;
	struct timespec post_at;	/* CLOCK_MONOTONIC */
	uint64_t change_seen;	/* the newest change counter a reply carried */
	bool post_blocked;	/* a link, unlink or rename since the last GETATTR:
				 * take none until nasgwd has been asked again */
};

/* How long a WRITE reply's attributes stand in for a GETATTR: long enough
 * for Ganesha to build the reply of the write that brought them, short
 * next to its own attribute cache (Attr_Expiration_Time, 60 s). */
#define NASGW_POST_ATTR_MS 1000

/* A state's fd: Ganesha allocates it right behind the state_t. */
struct nasgw_state_fd {
	struct fsal_fd fd;	/* must be first */
	bool nasgwd_open;	/* an open is held in nasgwd (released on close) */
	bool nasgwd_share;	/* a share reservation is held in nasgwd (the same) */
};

/* nasgwd's write verifier of one request's WRITE or COMMIT, kept in its op
 * context (fsal_private, which is this FSAL's to use: Ganesha zeroes it for
 * every request) until Ganesha asks for it to build the reply. nasgwd's
 * verifiers are never 0, so NULL means "none yet". */
_Static_assert(sizeof(void *) >= sizeof(uint64_t), "a write verifier fits in a pointer");
static inline void *nasgw_verifier_to_ctx(uint64_t v)
{
	return (void *)(uintptr_t)v;
}
static inline uint64_t nasgw_verifier_of_ctx(const struct req_op_context *ctx)
{
	return (uint64_t)(uintptr_t)ctx->fsal_private;
}

nasgw_client *nasgw_get_client(void);
void nasgw_creds(nasgw_cred *cr);
fsal_status_t nasgw_status(int rc);
void nasgw_to_attrs(const nasgw_attr *a, struct fsal_attrlist *out);
/* NFSv4 ACLs (nasgw_acl.c): attrs->acl from the object's POSIX ACLs (its
 * mode's when it has none); an NFSv4 ACL set as the object's access ACL (and a
 * directory's default ACL). Negative errno on failure. */
int nasgw_acl_get(nasgw_client *c, const nasgw_cred *cr, const nasgw_attr *a,
		  struct fsal_attrlist *attrs);
int nasgw_acl_set(nasgw_client *c, const nasgw_cred *cr, const nasgw_handle *h,
		  bool is_dir, fsal_acl_t *nfs4);
struct nasgw_fsal_obj *nasgw_alloc_obj(struct fsal_export *exp, const nasgw_attr *a);
void nasgw_encode_wire(const nasgw_handle *h, uint8_t out[NASGW_WIRE_LEN]);
/* A wire handle presented through export `exp`: ERR_FSAL_BADHANDLE when it is
 * not a version 2 handle, ERR_FSAL_STALE when it names another volume than
 * the export's (the MAC is nasgwd's to check). */
fsal_errors_t nasgw_decode_wire(const struct nasgw_fsal_export *exp,
				const void *buf, size_t len, nasgw_handle *h);
uint16_t nasgw_export_id(const struct fsal_export *exp);

void nasgw_handle_ops_init(struct fsal_obj_ops *ops);
fsal_status_t nasgw_create_export(struct fsal_module *fsal_hdl, void *parse_node,
				  struct config_error_type *err_type,
				  const struct fsal_up_vector *up_ops);

#endif
