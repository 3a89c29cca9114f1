/* FSAL_NASGW object operations: each is one head-protocol call (two where
 * an NFS create also sets owner or times). READ and WRITE are asynchronous:
 * Ganesha's worker is released at once and the reply finishes the request
 * from the client library's thread. */
#include "nasgw_int.h"

#include <errno.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "fsal_convert.h"
#include "export_mgr.h"
#include "fsal_up.h"
#include "fridgethr.h"

#define READDIR_BATCH 128
/* NFSv4 reserves readdir cookies 0, 1 and 2 ("start", ".", ".."); nasgw's
 * directory cookies start at 1 and never change, so shift them past. */
#define COOKIE_SHIFT 2

static struct nasgw_fsal_obj *obj_of(struct fsal_obj_handle *o)
{
	return container_of(o, struct nasgw_fsal_obj, obj_handle);
}

#define CLIENT_OR_DELAY(c)                                           \
	do {                                                         \
		(c) = nasgw_get_client();                            \
		if ((c) == NULL)                                     \
			return fsalstat(ERR_FSAL_DELAY, ENOTCONN);   \
	} while (0)

/* A new object for `a`, with its attributes for Ganesha. */
static void made(const nasgw_attr *a, struct fsal_obj_handle **new_obj,
		 struct fsal_attrlist *attrs_out)
{
	*new_obj = &nasgw_alloc_obj(op_ctx->fsal_export, a)->obj_handle;
	nasgw_to_attrs(a, attrs_out);
}

static void op_release(struct fsal_obj_handle *obj_hdl)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);

	fsal_obj_handle_fini(obj_hdl);
	gsh_free(o);
}

static fsal_status_t op_merge(struct fsal_obj_handle *orig_hdl,
				 struct fsal_obj_handle *dupe_hdl)
{
	if (orig_hdl == dupe_hdl || orig_hdl->type != REGULAR_FILE ||
	    dupe_hdl->type != REGULAR_FILE)
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	return merge_share(orig_hdl, &obj_of(orig_hdl)->share,
			   &obj_of(dupe_hdl)->share);
}

static fsal_status_t op_lookup(struct fsal_obj_handle *dir_hdl,
				  const char *path,
				  struct fsal_obj_handle **handle,
				  struct fsal_attrlist *attrs_out)
{
	nasgw_client *c;
	nasgw_cred cr;
	nasgw_attr a;
	int rc;

	*handle = NULL;
	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	rc = nasgw_lookup(c, &cr, &obj_of(dir_hdl)->h, path, &a);
	if (rc != 0)
		return nasgw_status(rc);
	made(&a, handle, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t op_readdir(struct fsal_obj_handle *dir_hdl,
				   fsal_cookie_t *whence, void *dir_state,
				   fsal_readdir_cb cb, attrmask_t attrmask,
				   bool *eof)
{
	uint64_t cookie = 0;
	nasgw_dirent *ents;
	nasgw_attr *attrs;
	nasgw_client *c;
	nasgw_cred cr;
	int rc = 0, end = 0;
	const struct nasgw_fsal_export *exp =
		container_of(op_ctx->fsal_export, struct nasgw_fsal_export,
			     export);
	const uint32_t flags = NASGW_READDIR_PLUS |
			       (exp->show_snapshot_dir ?
					NASGW_READDIR_SNAPSHOT_DIR : 0);

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	if (whence != NULL && *whence > COOKIE_SHIFT)
		cookie = *whence - COOKIE_SHIFT;
	*eof = false;
	ents = gsh_malloc(READDIR_BATCH * sizeof(*ents));
	attrs = gsh_malloc(READDIR_BATCH * sizeof(*attrs));
	while (!end) {
		uint32_t n = 0, i;

		rc = nasgw_readdir(c, &cr, &obj_of(dir_hdl)->h, cookie,
				   READDIR_BATCH, flags, ents,
				   attrs, &n, &end);
		if (rc != 0)
			break;
		for (i = 0; i < n; i++) {
			struct fsal_attrlist fa;
			struct fsal_obj_handle *obj;
			enum fsal_dir_result r;

			cookie = ents[i].cookie;
			fsal_prepare_attrs(&fa, attrmask);
			made(&attrs[i], &obj, &fa);
			r = cb(ents[i].name, obj, &fa, dir_state,
			       cookie + COOKIE_SHIFT);
			fsal_release_attrs(&fa);
			if (r >= DIR_TERMINATE)
				goto out;
		}
		if (n == 0)
			break;
	}
	*eof = end != 0;
out:
	gsh_free(ents);
	gsh_free(attrs);
	return nasgw_status(rc);
}

/* Applies what a create did not: owner, group, times and an NFSv4 ACL
 * (mode and, for files, nothing else). Owner or group equal to the
 * creator's are skipped: the new object already has them. */
static int set_rest(nasgw_client *c, const nasgw_cred *cr, nasgw_attr *a,
		    const struct fsal_attrlist *in)
{
	nasgw_sattr s;

	if (in == NULL)
		return 0;
	memset(&s, 0, sizeof(s));
	if ((in->valid_mask & ATTR_OWNER) && in->owner != a->uid) {
		s.mask |= NASGW_SET_UID;
		s.uid = (uint32_t)in->owner;
	}
	if ((in->valid_mask & ATTR_GROUP) && in->group != a->gid) {
		s.mask |= NASGW_SET_GID;
		s.gid = (uint32_t)in->group;
	}
	if ((in->valid_mask & ATTR_SIZE) && a->type == NASGW_TYPE_REG &&
	    in->filesize != a->size) {
		s.mask |= NASGW_SET_SIZE;
		s.size = in->filesize;
	}
	if (in->valid_mask & ATTR_ATIME) {
		s.mask |= NASGW_SET_ATIME;
		s.atime.sec = in->atime.tv_sec;
		s.atime.nsec = (uint32_t)in->atime.tv_nsec;
	}
	if (in->valid_mask & ATTR_MTIME) {
		s.mask |= NASGW_SET_MTIME;
		s.mtime.sec = in->mtime.tv_sec;
		s.mtime.nsec = (uint32_t)in->mtime.tv_nsec;
	}
	if (s.mask != 0) {
		int rc = nasgw_setattr(c, cr, &a->handle, &s, a);

		if (rc != 0)
			return rc;
	}
	if (in->valid_mask & ATTR_ACL) {
		/* after the create's inheritance: the ACL given replaces it */
		int rc = nasgw_acl_set(c, cr, &a->handle,
				       a->type == NASGW_TYPE_DIR, in->acl);

		return rc != 0 ? rc : nasgw_getattr(c, cr, &a->handle, a);
	}
	return 0;
}

static fsal_status_t make(struct fsal_obj_handle *dir_hdl, const char *name,
			  uint32_t type, uint64_t rdev, const char *target,
			  struct fsal_attrlist *attrs_in, uint32_t flags,
			  struct fsal_obj_handle **new_obj,
			  struct fsal_attrlist *attrs_out)
{
	uint32_t mode = type == NASGW_TYPE_DIR ? 0755 : 0644;
	nasgw_client *c;
	nasgw_cred cr;
	nasgw_attr a;
	int rc;

	*new_obj = NULL;
	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	if (type == NASGW_TYPE_LNK)
		mode = 0777;
	else if (attrs_in != NULL && (attrs_in->valid_mask & ATTR_MODE))
		mode = attrs_in->mode & 07777;
	rc = nasgw_create(c, &cr, &obj_of(dir_hdl)->h, name, type, mode, rdev,
			  target, flags, &a);
	if (rc == 0)
		rc = set_rest(c, &cr, &a, attrs_in);
	if (rc != 0)
		return nasgw_status(rc);
	made(&a, new_obj, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t op_mkdir(struct fsal_obj_handle *dir_hdl,
				 const char *name,
				 struct fsal_attrlist *attrs_in,
				 struct fsal_obj_handle **new_obj,
				 struct fsal_attrlist *attrs_out)
{
	return make(dir_hdl, name, NASGW_TYPE_DIR, 0, NULL, attrs_in, 0,
		    new_obj, attrs_out);
}

static fsal_status_t op_mknode(struct fsal_obj_handle *dir_hdl,
				  const char *name,
				  object_file_type_t nodetype,
				  struct fsal_attrlist *attrs_in,
				  struct fsal_obj_handle **new_obj,
				  struct fsal_attrlist *attrs_out)
{
	uint64_t rdev = 0;
	uint32_t type;

	switch (nodetype) {
	case CHARACTER_FILE:
		type = NASGW_TYPE_CHR;
		break;
	case BLOCK_FILE:
		type = NASGW_TYPE_BLK;
		break;
	case FIFO_FILE:
		type = NASGW_TYPE_FIFO;
		break;
	case SOCKET_FILE:
		type = NASGW_TYPE_SOCK;
		break;
	default:
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	}
	if (attrs_in != NULL && (attrs_in->valid_mask & ATTR_RAWDEV))
		rdev = makedev(attrs_in->rawdev.major, attrs_in->rawdev.minor);
	return make(dir_hdl, name, type, rdev, NULL, attrs_in, 0, new_obj,
		    attrs_out);
}

static fsal_status_t op_symlink(struct fsal_obj_handle *dir_hdl,
				   const char *name, const char *link_path,
				   struct fsal_attrlist *attrs_in,
				   struct fsal_obj_handle **new_obj,
				   struct fsal_attrlist *attrs_out)
{
	return make(dir_hdl, name, NASGW_TYPE_LNK, 0, link_path, attrs_in, 0,
		    new_obj, attrs_out);
}

static fsal_status_t op_readlink(struct fsal_obj_handle *obj_hdl,
				    struct gsh_buffdesc *link_content,
				    bool refresh)
{
	char buf[4096 + 1];
	nasgw_client *c;
	nasgw_cred cr;
	int rc;

	link_content->addr = NULL;
	link_content->len = 0;
	if (obj_hdl->type != SYMBOLIC_LINK)
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	rc = nasgw_readlink(c, &cr, &obj_of(obj_hdl)->h, buf, sizeof(buf));
	if (rc < 0)
		return nasgw_status(rc);
	if ((size_t)rc >= sizeof(buf))
		return fsalstat(ERR_FSAL_NAMETOOLONG, ENAMETOOLONG);
	link_content->len = (size_t)rc + 1;
	link_content->addr = gsh_malloc(link_content->len);
	memcpy(link_content->addr, buf, link_content->len);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* ---- attributes a reply carried ---------------------------------------- */

static int64_t ms_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(now.tv_sec - t->tv_sec) * 1000 +
	       (now.tv_nsec - t->tv_nsec) / 1000000;
}

/* A reply carried the object's attributes (`a`): the newest change
 * counter seen. With `keep`, they may also stand in for the next GETATTR
 * (a WRITE's). Replies come back in any order (pipelined writes): older
 * ones are ignored. */
static void saw_attrs(struct nasgw_fsal_obj *o, const nasgw_attr *a,
		      bool keep)
{
	PTHREAD_RWLOCK_wrlock(&o->obj_handle.obj_lock);
	if (a->change >= o->change_seen) {
		o->change_seen = a->change;
		if (keep && !o->post_blocked) {
			o->post = *a;
			o->post_valid = true;
			clock_gettime(CLOCK_MONOTONIC, &o->post_at);
		} else {
			o->post_valid = false;
		}
	}
	PTHREAD_RWLOCK_unlock(&o->obj_handle.obj_lock);
}

/* The object changed in a way no reply described (a link, an unlink, a
 * rename): nothing kept stands in for a GETATTR until nasgwd is asked. */
static void attrs_changed(struct nasgw_fsal_obj *o)
{
	PTHREAD_RWLOCK_wrlock(&o->obj_handle.obj_lock);
	o->post_valid = false;
	o->post_blocked = true;
	PTHREAD_RWLOCK_unlock(&o->obj_handle.obj_lock);
}

/* The attributes the latest WRITE's reply carried, once, while fresh. */
static bool take_post(struct nasgw_fsal_obj *o, nasgw_attr *a)
{
	bool got = false;

	PTHREAD_RWLOCK_wrlock(&o->obj_handle.obj_lock);
	if (o->post_valid) {
		got = ms_since(&o->post_at) < NASGW_POST_ATTR_MS;
		if (got)
			*a = o->post;
		o->post_valid = false;
	}
	PTHREAD_RWLOCK_unlock(&o->obj_handle.obj_lock);
	return got;
}

/* The attributes with the NFSv4 ACL when asked for (nasgw_to_attrs leaves
 * it out): its POSIX ACLs mapped (a round trip), or its mode's. */
static fsal_status_t with_acl(const nasgw_attr *a, struct fsal_attrlist *out)
{
	const bool want = (out->request_mask & ATTR_ACL) != 0;
	nasgw_client *c;
	nasgw_cred cr;
	int rc;

	nasgw_to_attrs(a, out);
	if (!want)
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	out->request_mask |= ATTR_ACL;
	c = nasgw_get_client();
	if (c == NULL)
		return nasgw_status(-ENOTCONN);
	nasgw_creds(&cr);
	rc = nasgw_acl_get(c, &cr, a, out);
	if (rc != 0 && (out->request_mask & ATTR_RDATTR_ERR))
		out->valid_mask = ATTR_RDATTR_ERR;
	return nasgw_status(rc);
}

static fsal_status_t op_getattrs(struct fsal_obj_handle *obj_hdl,
				    struct fsal_attrlist *attrs_out)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	nasgw_client *c;
	nasgw_cred cr;
	nasgw_attr a;
	int rc;

	/* Right after a write: its reply's attributes, not a second call. */
	if (take_post(o, &a))
		return with_acl(&a, attrs_out);
	c = nasgw_get_client();
	if (c == NULL) {
		rc = -ENOTCONN;
	} else {
		nasgw_creds(&cr);
		rc = nasgw_getattr(c, &cr, &o->h, &a);
	}
	if (rc != 0) {
		if (attrs_out->request_mask & ATTR_RDATTR_ERR)
			attrs_out->valid_mask = ATTR_RDATTR_ERR;
		return nasgw_status(rc);
	}
	PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
	o->post_blocked = false;
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	saw_attrs(o, &a, false);
	return with_acl(&a, attrs_out);
}

static fsal_status_t op_setattr2(struct fsal_obj_handle *obj_hdl,
				    bool bypass, struct state_t *state,
				    struct fsal_attrlist *in)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	nasgw_client *c;
	nasgw_sattr s;
	nasgw_cred cr;
	nasgw_attr a;
	int rc;

	CLIENT_OR_DELAY(c);
	memset(&s, 0, sizeof(s));
	if (in->valid_mask & ATTR_MODE) {
		s.mask |= NASGW_SET_MODE;
		s.mode = in->mode & 07777;
	}
	if (in->valid_mask & ATTR_OWNER) {
		s.mask |= NASGW_SET_UID;
		s.uid = (uint32_t)in->owner;
	}
	if (in->valid_mask & ATTR_GROUP) {
		s.mask |= NASGW_SET_GID;
		s.gid = (uint32_t)in->group;
	}
	if (in->valid_mask & ATTR_SIZE) {
		if (obj_hdl->type != REGULAR_FILE)
			return fsalstat(ERR_FSAL_INVAL, EINVAL);
		if (state == NULL) {
			/* A size change is a write: honour deny-write shares
			 * of NFSv4 opens. */
			fsal_status_t st;

			PTHREAD_RWLOCK_rdlock(&obj_hdl->obj_lock);
			st = check_share_conflict(&o->share, FSAL_O_WRITE,
						  bypass);
			PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
			if (FSAL_IS_ERROR(st))
				return st;
		}
		s.mask |= NASGW_SET_SIZE;
		s.size = in->filesize;
	}
	if (in->valid_mask & ATTR_ATIME_SERVER) {
		s.mask |= NASGW_SET_ATIME_NOW;
	} else if (in->valid_mask & ATTR_ATIME) {
		s.mask |= NASGW_SET_ATIME;
		s.atime.sec = in->atime.tv_sec;
		s.atime.nsec = (uint32_t)in->atime.tv_nsec;
	}
	if (in->valid_mask & ATTR_MTIME_SERVER) {
		s.mask |= NASGW_SET_MTIME_NOW;
	} else if (in->valid_mask & ATTR_MTIME) {
		s.mask |= NASGW_SET_MTIME;
		s.mtime.sec = in->mtime.tv_sec;
		s.mtime.nsec = (uint32_t)in->mtime.tv_nsec;
	}
	nasgw_creds(&cr);
	if (s.mask != 0) {
		rc = nasgw_setattr(c, &cr, &o->h, &s, &a);
		if (rc == 0) {
			saw_attrs(o, &a, false);	/* a write before it is older */
		} else {
			attrs_changed(o);	/* it may have happened */
			return nasgw_status(rc);
		}
	}
	/* An NFSv4 ACL, after the mode (as knfsd: the ACL's mode wins). */
	if (in->valid_mask & ATTR_ACL) {
		rc = nasgw_acl_set(c, &cr, &o->h, obj_hdl->type == DIRECTORY,
				   in->acl);
		attrs_changed(o);	/* the mode follows the ACL */
		return nasgw_status(rc);
	}
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t op_link(struct fsal_obj_handle *obj_hdl,
				struct fsal_obj_handle *destdir_hdl,
				const char *name)
{
	nasgw_client *c;
	nasgw_cred cr;
	nasgw_attr a;

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	attrs_changed(obj_of(obj_hdl));
	return nasgw_status(nasgw_link(c, &cr, &obj_of(obj_hdl)->h,
				       &obj_of(destdir_hdl)->h, name, &a));
}

static fsal_status_t op_rename(struct fsal_obj_handle *obj_hdl,
				  struct fsal_obj_handle *olddir_hdl,
				  const char *old_name,
				  struct fsal_obj_handle *newdir_hdl,
				  const char *new_name)
{
	nasgw_client *c;
	nasgw_cred cr;

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	attrs_changed(obj_of(obj_hdl));
	return nasgw_status(nasgw_rename(c, &cr, &obj_of(olddir_hdl)->h,
					 old_name, &obj_of(newdir_hdl)->h,
					 new_name, 0));
}

static fsal_status_t op_unlink(struct fsal_obj_handle *dir_hdl,
				  struct fsal_obj_handle *obj_hdl,
				  const char *name)
{
	nasgw_client *c;
	nasgw_cred cr;

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	attrs_changed(obj_of(obj_hdl));
	if (obj_hdl->type == DIRECTORY)
		return nasgw_status(
			nasgw_rmdir(c, &cr, &obj_of(dir_hdl)->h, name));
	return nasgw_status(nasgw_unlink(c, &cr, &obj_of(dir_hdl)->h, name));
}

/* ---- opens and shares ------------------------------------------------ */

static struct nasgw_state_fd *state_fd(struct state_t *state)
{
	return (struct nasgw_state_fd *)(state + 1);
}

static bool is_share_state(struct state_t *state)
{
	return state->state_type == STATE_TYPE_SHARE ||
	       state->state_type == STATE_TYPE_NLM_SHARE ||
	       state->state_type == STATE_TYPE_9P_FID;
}

/* NFSv4 share reservations go to nasgwd as well as to Ganesha's counters
 * (check_share_conflict, which sees only this Ganesha's opens): nasgwd's
 * table holds every head's, so an SMB open's share mode and this OPEN's
 * share_deny refuse each other. The owner is the state (an open stateid):
 * unique while it lives, and released at close2 before it is freed. */
static uint32_t share_access_of(fsal_openflags_t f)
{
	return ((f & FSAL_O_READ) ? NASGW_SHARE_READ : 0) |
	       ((f & FSAL_O_WRITE) ? NASGW_SHARE_WRITE : 0);
}

static uint32_t share_deny_of(fsal_openflags_t f)
{
	return ((f & FSAL_O_DENY_READ) ? NASGW_SHARE_READ : 0) |
	       ((f & (FSAL_O_DENY_WRITE | FSAL_O_DENY_WRITE_MAND))
			? NASGW_SHARE_WRITE
			: 0);
}

/* Sets the reservation of `state` on `h` to `openflags`'; 0, or the
 * status to answer (NFS4ERR_SHARE_DENIED on a conflict). */
static int nasgwd_share(nasgw_client *c, const nasgw_cred *cr,
			const nasgw_handle *h, struct state_t *state,
			fsal_openflags_t openflags)
{
	int rc = nasgw_share(c, cr, h, (uint64_t)(uintptr_t)state,
			     share_access_of(openflags),
			     share_deny_of(openflags));

	if (rc == 0)
		state_fd(state)->nasgwd_share = true;
	return rc;
}

static fsal_status_t share_status(int rc)
{
	if (rc == -EBUSY)
		return fsalstat(ERR_FSAL_SHARE_DENIED, 0);
	return nasgw_status(rc);
}

/* O_TRUNC: size 0, attributes after it in *a. */
static int truncate_zero(nasgw_client *c, const nasgw_cred *cr,
			 const nasgw_handle *h, nasgw_attr *a)
{
	nasgw_sattr s;

	memset(&s, 0, sizeof(s));
	s.mask = NASGW_SET_SIZE;
	return nasgw_setattr(c, cr, h, &s, a);
}

/* Opens an existing regular file `o` for `state` (or the global fd). */
static fsal_status_t open_existing(struct nasgw_fsal_obj *o,
				   struct state_t *state,
				   fsal_openflags_t openflags,
				   enum fsal_create_mode createmode,
				   fsal_verifier_t verifier,
				   struct fsal_attrlist *attrs_out)
{
	struct fsal_obj_handle *obj_hdl = &o->obj_handle;
	nasgw_client *c;
	nasgw_cred cr;
	nasgw_attr a;
	int rc;

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
	if (state != NULL) {
		fsal_status_t st = check_share_conflict(&o->share, openflags,
							 false);

		if (FSAL_IS_ERROR(st)) {
			PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
			return st;
		}
		update_share_counters(&o->share, FSAL_O_CLOSED, openflags);
	}
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);

	/* Ganesha checked the caller's access; nasgwd is asked only to hold
	 * the file open (an unlinked file lives while an NFSv4 open holds
	 * it). Stateless NFSv3 I/O needs no open. */
	if (state != NULL)
		rc = nasgw_open(c, &cr, &o->h, 0, &a);
	else
		rc = nasgw_getattr(c, &cr, &o->h, &a);
	/* the reservation before the truncation it may refuse */
	if (rc == 0 && state != NULL && is_share_state(state))
		rc = nasgwd_share(c, &cr, &o->h, state, openflags);
	if (rc == 0 && (openflags & FSAL_O_TRUNC) && a.size != 0)
		rc = truncate_zero(c, &cr, &o->h, &a);
	if (rc == 0)
		saw_attrs(o, &a, false);
	if (rc == 0 && createmode >= FSAL_EXCLUSIVE &&
	    createmode != FSAL_EXCLUSIVE_9P) {
		struct fsal_attrlist fa;

		memset(&fa, 0, sizeof(fa));
		nasgw_to_attrs(&a, &fa);
		if (!check_verifier_attrlist(&fa, verifier, false))
			rc = -EEXIST;
	}
	if (rc != 0) {
		if (state != NULL) {
			if (state_fd(state)->nasgwd_share)
				(void)nasgw_share(c, &cr, &o->h,
						  (uint64_t)(uintptr_t)state,
						  0, 0);
			state_fd(state)->nasgwd_share = false;
			(void)nasgw_release(c, &cr, &o->h);
			PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
			update_share_counters(&o->share, openflags,
					      FSAL_O_CLOSED);
			PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
		}
		return share_status(rc);
	}
	if (state != NULL) {
		state_fd(state)->fd.openflags = FSAL_O_NFS_FLAGS(openflags);
		state_fd(state)->nasgwd_open = true;
	} else {
		PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
		o->fd.openflags = FSAL_O_NFS_FLAGS(openflags);
		PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	}
	nasgw_to_attrs(&a, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* A file found by name: a new object for it, opened. */
static fsal_status_t open_found(const nasgw_attr *a, struct state_t *state,
				fsal_openflags_t openflags,
				enum fsal_create_mode createmode,
				fsal_verifier_t verifier,
				struct fsal_obj_handle **new_obj,
				struct fsal_attrlist *attrs_out)
{
	struct nasgw_fsal_obj *o = nasgw_alloc_obj(op_ctx->fsal_export, a);
	fsal_status_t st = open_existing(o, state, openflags, createmode,
					 verifier, attrs_out);

	if (FSAL_IS_ERROR(st)) {
		op_release(&o->obj_handle);
		*new_obj = NULL;
	} else {
		*new_obj = &o->obj_handle;
	}
	return st;
}

static fsal_status_t op_open2(struct fsal_obj_handle *obj_hdl,
				 struct state_t *state,
				 fsal_openflags_t openflags,
				 enum fsal_create_mode createmode,
				 const char *name,
				 struct fsal_attrlist *attrs_set,
				 fsal_verifier_t verifier,
				 struct fsal_obj_handle **new_obj,
				 struct fsal_attrlist *attrs_out,
				 bool *caller_perm_check)
{
	struct fsal_attrlist verifier_attr;
	struct nasgw_fsal_obj *o;
	uint32_t flags = 0, mode = 0644;
	nasgw_client *c;
	nasgw_cred cr;
	nasgw_attr a;
	fsal_status_t st;
	int rc;

	if (createmode >= FSAL_EXCLUSIVE) {
		/* The verifier lives in the new file's times. */
		if (attrs_set == NULL) {
			memset(&verifier_attr, 0, sizeof(verifier_attr));
			attrs_set = &verifier_attr;
		}
		set_common_verifier(attrs_set, verifier, false);
	}
	if (name == NULL) {
		/* open by handle */
		if (obj_hdl->type != REGULAR_FILE)
			return fsalstat(obj_hdl->type == DIRECTORY
						? ERR_FSAL_ISDIR
						: ERR_FSAL_INVAL, 0);
		return open_existing(obj_of(obj_hdl), state, openflags,
				     createmode, verifier, attrs_out);
	}

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	if (createmode == FSAL_NO_CREATE) {
		rc = nasgw_lookup(c, &cr, &obj_of(obj_hdl)->h, name, &a);
		if (rc != 0)
			return nasgw_status(rc);
		if (a.type != NASGW_TYPE_REG)
			return fsalstat(a.type == NASGW_TYPE_DIR
						? ERR_FSAL_ISDIR
						: ERR_FSAL_INVAL, 0);
		*caller_perm_check = true;
		return open_found(&a, state, openflags, createmode, verifier,
				  new_obj, attrs_out);
	}

	/* Create. UNCHECKED opens an existing file; GUARDED and EXCLUSIVE
	 * fail on one (EXCLUSIVE then compares the verifier, so a resent
	 * create succeeds). */
	if (createmode == FSAL_UNCHECKED)
		flags |= NASGW_CREATE_UNCHECKED;
	if (state != NULL)
		flags |= NASGW_CREATE_OPEN;
	if (attrs_set != NULL && (attrs_set->valid_mask & ATTR_MODE))
		mode = attrs_set->mode & 07777;
	rc = nasgw_create(c, &cr, &obj_of(obj_hdl)->h, name, NASGW_TYPE_REG,
			  mode, 0, NULL, flags, &a);
	if (rc == -EEXIST && createmode >= FSAL_EXCLUSIVE) {
		/* maybe our own earlier create: open it and check */
		rc = nasgw_lookup(c, &cr, &obj_of(obj_hdl)->h, name, &a);
		if (rc != 0)
			return nasgw_status(rc);
		if (a.type != NASGW_TYPE_REG)
			return fsalstat(ERR_FSAL_EXIST, EEXIST);
		*caller_perm_check = true;
		return open_found(&a, state, openflags, createmode, verifier,
				  new_obj, attrs_out);
	}
	if (rc != 0)
		return nasgw_status(rc);
	/* The create did not say whether the file was new (UNCHECKED):
	 * Ganesha checks permission on it unless we made it now. */
	*caller_perm_check = a.uid != cr.uid || a.size != 0;
	if (state != NULL && is_share_state(state))
		rc = nasgwd_share(c, &cr, &a.handle, state, openflags);
	if (rc == 0 && attrs_set != NULL) {
		struct fsal_attrlist rest = *attrs_set;

		rest.valid_mask &= ~(attrmask_t)ATTR_MODE;
		rc = set_rest(c, &cr, &a, &rest);
	}
	if (rc == 0 && (openflags & FSAL_O_TRUNC) && a.size != 0)
		rc = truncate_zero(c, &cr, &a.handle, &a);
	o = nasgw_alloc_obj(op_ctx->fsal_export, &a);
	if (rc != 0) {
		if (state != NULL) {
			if (state_fd(state)->nasgwd_share)
				(void)nasgw_share(c, &cr, &a.handle,
						  (uint64_t)(uintptr_t)state,
						  0, 0);
			state_fd(state)->nasgwd_share = false;
			(void)nasgw_release(c, &cr, &a.handle);
		}
		op_release(&o->obj_handle);
		return share_status(rc);
	}
	if (state != NULL) {
		PTHREAD_RWLOCK_wrlock(&o->obj_handle.obj_lock);
		update_share_counters(&o->share, FSAL_O_CLOSED, openflags);
		PTHREAD_RWLOCK_unlock(&o->obj_handle.obj_lock);
		state_fd(state)->fd.openflags = FSAL_O_NFS_FLAGS(openflags);
		state_fd(state)->nasgwd_open = true;
	} else {
		o->fd.openflags = FSAL_O_NFS_FLAGS(openflags);
	}
	*new_obj = &o->obj_handle;
	nasgw_to_attrs(&a, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t op_reopen2(struct fsal_obj_handle *obj_hdl,
				   struct state_t *state,
				   fsal_openflags_t openflags)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	struct nasgw_state_fd *fd = state_fd(state);
	fsal_openflags_t old = fd->fd.openflags;
	fsal_status_t st;

	PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
	update_share_counters(&o->share, old, FSAL_O_CLOSED);
	st = check_share_conflict(&o->share, openflags, false);
	if (FSAL_IS_ERROR(st)) {
		update_share_counters(&o->share, FSAL_O_CLOSED, old);
		PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
		return st;
	}
	update_share_counters(&o->share, FSAL_O_CLOSED, openflags);
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	if (is_share_state(state)) {
		/* OPEN_UPGRADE, OPEN_DOWNGRADE: nasgwd replaces the
		 * reservation, or refuses it and keeps the old one. */
		nasgw_client *c = nasgw_get_client();
		nasgw_cred cr;
		int rc;

		if (c == NULL)
			rc = -ENOTCONN;
		else {
			nasgw_creds(&cr);
			rc = nasgwd_share(c, &cr, &o->h, state, openflags);
		}
		if (rc != 0) {
			PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
			update_share_counters(&o->share, openflags, old);
			PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
			return share_status(rc);
		}
	}
	fd->fd.openflags = FSAL_O_NFS_FLAGS(openflags);
	if (openflags & FSAL_O_TRUNC) {
		nasgw_client *c = nasgw_get_client();
		nasgw_cred cr;
		nasgw_attr a;
		int rc;

		if (c == NULL)
			return fsalstat(ERR_FSAL_DELAY, ENOTCONN);
		nasgw_creds(&cr);
		rc = truncate_zero(c, &cr, &o->h, &a);
		if (rc == 0)
			saw_attrs(o, &a, false);
		return nasgw_status(rc);
	}
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_openflags_t op_status2(struct fsal_obj_handle *obj_hdl,
				      struct state_t *state)
{
	return state_fd(state)->fd.openflags;
}

static fsal_status_t op_close(struct fsal_obj_handle *obj_hdl)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	fsal_status_t st = fsalstat(ERR_FSAL_NO_ERROR, 0);

	PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
	if (o->fd.openflags == FSAL_O_CLOSED)
		st = fsalstat(ERR_FSAL_NOT_OPENED, 0);
	o->fd.openflags = FSAL_O_CLOSED;
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	return st;
}

static fsal_status_t op_close2(struct fsal_obj_handle *obj_hdl,
				  struct state_t *state)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	struct nasgw_state_fd *fd = state_fd(state);
	bool held, shared;

	PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
	if (is_share_state(state))
		update_share_counters(&o->share, fd->fd.openflags,
				      FSAL_O_CLOSED);
	fd->fd.openflags = FSAL_O_CLOSED;
	held = fd->nasgwd_open;
	fd->nasgwd_open = false;
	shared = fd->nasgwd_share;
	fd->nasgwd_share = false;
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	if (held || shared) {
		nasgw_client *c = nasgw_get_client();
		nasgw_cred cr;

		if (c != NULL) {
			nasgw_creds(&cr);
			if (shared)
				(void)nasgw_share(c, &cr, &o->h,
						  (uint64_t)(uintptr_t)state,
						  0, 0);
			if (held)
				(void)nasgw_release(c, &cr, &o->h);
		}
	}
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* ---- data -------------------------------------------------------------- */

struct nasgw_io {
	struct fsal_obj_handle *obj_hdl;
	fsal_async_cb done_cb;
	struct fsal_io_arg *arg;
	void *caller_arg;
	struct req_op_context *req_ctx;	/* the request's (lives until it completes) */
	struct gsh_export *ctx_export;
	struct fsal_export *fsal_export;
	fsal_status_t st;	/* the result, for the completion (io_done) */
	nasgw_cred cred;
	uint32_t groups[];
};

static struct nasgw_io *io_new(struct fsal_obj_handle *obj_hdl,
			       fsal_async_cb done_cb, struct fsal_io_arg *arg,
			       void *caller_arg)
{
	nasgw_cred cr;
	struct nasgw_io *io;

	nasgw_creds(&cr);
	io = gsh_malloc(sizeof(*io) + cr.ngroups * sizeof(uint32_t));
	io->obj_hdl = obj_hdl;
	io->done_cb = done_cb;
	io->arg = arg;
	io->caller_arg = caller_arg;
	io->req_ctx = op_ctx;
	io->ctx_export = op_ctx->ctx_export;
	io->fsal_export = op_ctx->fsal_export;
	get_gsh_export_ref(io->ctx_export);
	io->cred = cr;
	if (cr.ngroups)
		memcpy(io->groups, cr.groups, cr.ngroups * sizeof(uint32_t));
	io->cred.groups = io->groups;
	return io;
}

/* How durable a WRITE must be when it is answered. NFSv4 asks the export
 * for the verifier (nasgw_write_verifier), which is nasgwd's, so UNSTABLE
 * stays unstable. NFSv3 replies carry Ganesha's own write verifier
 * (NFS3_write_verifier, its epoch: nfs3_write.c and nfs3_commit.c never ask
 * the FSAL), so a v3 UNSTABLE write is held by the client library until a
 * COMMIT covers it: should nasgwd lose it, Ganesha restarts with a new epoch
 * (nasgw_verifier_changed). NFSv3_Unstable = false makes every v3 write
 * durable before the reply instead (FILE_SYNC). */
static uint32_t write_stability(const struct fsal_io_arg *arg)
{
	if (arg->fsal_stable)
		return NASGW_FILE_SYNC;
	if (op_ctx->nfs_vers == NFS_V3)
		return NASGW.v3_unstable ?
			NASGW_UNSTABLE | NASGW_HOLD_UNSTABLE : NASGW_FILE_SYNC;
	return NASGW_UNSTABLE;
}

/* A write nasgwd answered: the level it reached, and its write verifier
 * kept in the request's op context, where nasgw_write_verifier finds it
 * when Ganesha builds the reply: the verifier of the nasgwd that executed
 * this write, even if nasgwd restarted since. The attributes after the
 * write answer the GETATTR Ganesha makes next (op_getattrs). */
static void wrote(struct fsal_obj_handle *obj_hdl, struct fsal_io_arg *arg,
		  struct req_op_context *req_ctx, const nasgw_write_result *r)
{
	arg->fsal_stable = r->stable != NASGW_UNSTABLE;
	req_ctx->fsal_private = nasgw_verifier_to_ctx(r->verifier);
	saw_attrs(obj_of(obj_hdl), &r->post, true);
}

/* Completes the request on a thread of NASGW.io_fridge: gives Ganesha an
 * op context there. */
static void io_done(struct fridgethr_context *fctx)
{
	struct nasgw_io *io = fctx->arg;
	struct req_op_context ctx;

	init_op_context_simple(&ctx, io->ctx_export, io->fsal_export);
	io->done_cb(io->obj_hdl, io->st, io->arg, io->caller_arg);
	release_op_context();	/* drops the export reference io_new took */
	gsh_free(io);
}

/* Runs on a client library thread (a connection's reader, mostly), which
 * must not block nor call the library synchronously (nasgw_client.h): a
 * reader would wait for a reply only it can read, and that connection, and
 * every call sent on it, would hang for good. Ganesha's completion may do
 * just that (an ESTALE READ has MDCACHE kill the entry, whose states are
 * closed: close2, nasgw_release), so it runs on the FSAL's own threads. */
static void io_finish(struct nasgw_io *io, fsal_status_t st)
{
	struct fridgethr_context inline_ctx = { .arg = io };
	int rc = EPIPE;

	io->st = st;
	if (NASGW.io_fridge != NULL)
		rc = fridgethr_submit(NASGW.io_fridge, io_done, io);
	if (rc != 0) {
		/* The fridge is stopped (the plugin is being unloaded) or
		 * could not make a thread: complete here, as a last resort
		 * (the request must be answered). */
		LogWarn(COMPONENT_FSAL,
			"FSAL_NASGW: I/O completion run on the client library's thread (fridge: %s)",
			strerror(rc));
		io_done(&inline_ctx);
	}
}

static void read_done(void *p, int64_t result, int eof)
{
	struct nasgw_io *io = p;

	if (result >= 0) {
		io->arg->io_amount = (size_t)result;
		io->arg->end_of_file = eof != 0;
	}
	io_finish(io, nasgw_status(result < 0 ? (int)result : 0));
}

static void write_done(void *p, int64_t result, const nasgw_write_result *r)
{
	struct nasgw_io *io = p;

	if (result >= 0) {	/* r is valid during this callback only */
		io->arg->io_amount = (size_t)result;
		wrote(io->obj_hdl, io->arg, io->req_ctx, r);
	}
	io_finish(io, nasgw_status(result < 0 ? (int)result : 0));
}

/* Share reservations against I/O without an open state (NFSv3, or
 * anonymous NFSv4 stateids). */
static fsal_status_t io_share_check(struct fsal_obj_handle *obj_hdl,
				    struct state_t *state, bool bypass,
				    fsal_openflags_t want)
{
	fsal_status_t st = fsalstat(ERR_FSAL_NO_ERROR, 0);

	if (state != NULL && is_share_state(state))
		return st;
	PTHREAD_RWLOCK_rdlock(&obj_hdl->obj_lock);
	st = check_share_conflict(&obj_of(obj_hdl)->share, want, bypass);
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	return st;
}

/* Several buffers (rare: Ganesha 4.3's NFS READ and WRITE pass one) are
 * done one after another, synchronously. */
static fsal_status_t io_vector(struct fsal_obj_handle *obj_hdl,
			       struct fsal_io_arg *arg, bool write)
{
	nasgw_client *c = nasgw_get_client();
	uint64_t off = arg->offset;
	uint32_t stable = NASGW_UNSTABLE;
	nasgw_cred cr;
	int i;

	if (c == NULL)
		return fsalstat(ERR_FSAL_DELAY, ENOTCONN);
	nasgw_creds(&cr);
	if (write)
		stable = write_stability(arg);
	arg->io_amount = 0;
	for (i = 0; i < arg->iov_count; i++) {
		int64_t n;
		int eof = 0;
		nasgw_write_result r;

		if (write) {
			n = nasgw_write(c, &cr, &obj_of(obj_hdl)->h, off,
					arg->iov[i].iov_base,
					(uint32_t)arg->iov[i].iov_len, stable,
					&r);
			/* The level and verifier of the last buffer: each
			 * buffer asked the same level. */
			if (n >= 0)
				wrote(obj_hdl, arg, op_ctx, &r);
		} else
			n = nasgw_read(c, &cr, &obj_of(obj_hdl)->h, off,
				       arg->iov[i].iov_base,
				       (uint32_t)arg->iov[i].iov_len, &eof);
		if (n < 0)
			return nasgw_status((int)n);
		arg->io_amount += (size_t)n;
		off += (uint64_t)n;
		if (!write && (eof || (size_t)n < arg->iov[i].iov_len)) {
			arg->end_of_file = true;
			break;
		}
	}
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* READ and WRITE: checks, then one asynchronous call whose reply completes
 * the request (or the synchronous loop for several buffers). */
static void io2(struct fsal_obj_handle *obj_hdl, bool bypass,
		fsal_async_cb done_cb, struct fsal_io_arg *arg,
		void *caller_arg, bool write)
{
	nasgw_client *c = nasgw_get_client();
	fsal_status_t st = fsalstat(ERR_FSAL_NO_ERROR, 0);
	struct nasgw_io *io;
	int rc;

	if (!write && arg->info != NULL)	/* READ_PLUS */
		st = fsalstat(ERR_FSAL_NOTSUPP, 0);
	else if (write && obj_hdl->type != REGULAR_FILE)
		st = fsalstat(ERR_FSAL_INVAL, EINVAL);
	else if (c == NULL)
		st = fsalstat(ERR_FSAL_DELAY, ENOTCONN);
	else
		st = io_share_check(obj_hdl, arg->state, bypass,
				    write ? FSAL_O_WRITE : FSAL_O_READ);
	if (!FSAL_IS_ERROR(st) && (arg->iov_count != 1 || !NASGW.async_io))
		st = io_vector(obj_hdl, arg, write);
	if (FSAL_IS_ERROR(st) || arg->iov_count != 1 || !NASGW.async_io) {
		done_cb(obj_hdl, st, arg, caller_arg);
		return;
	}
	arg->io_amount = 0;
	if (!write)
		arg->end_of_file = false;
	io = io_new(obj_hdl, done_cb, arg, caller_arg);
	if (write)
		rc = nasgw_write_async(c, &io->cred, &obj_of(obj_hdl)->h,
				       arg->offset, arg->iov[0].iov_base,
				       (uint32_t)arg->iov[0].iov_len,
				       write_stability(arg), write_done, io);
	else
		rc = nasgw_read_async(c, &io->cred, &obj_of(obj_hdl)->h,
				      arg->offset, arg->iov[0].iov_base,
				      (uint32_t)arg->iov[0].iov_len, read_done,
				      io);
	if (rc != 0) {
		put_gsh_export(io->ctx_export);
		gsh_free(io);
		done_cb(obj_hdl, nasgw_status(rc), arg, caller_arg);
	}
}

static void op_read2(struct fsal_obj_handle *obj_hdl, bool bypass,
		     fsal_async_cb done_cb, struct fsal_io_arg *arg,
		     void *caller_arg)
{
	io2(obj_hdl, bypass, done_cb, arg, caller_arg, false);
}

static void op_write2(struct fsal_obj_handle *obj_hdl, bool bypass,
		      fsal_async_cb done_cb, struct fsal_io_arg *arg,
		      void *caller_arg)
{
	io2(obj_hdl, bypass, done_cb, arg, caller_arg, true);
}

/* COMMIT: nasgwd's FSYNC, which returns once what the file was written is
 * durable (brief, decision 5). Its verifier goes in the request's op
 * context, for the reply (nasgw_write_verifier): a client whose UNSTABLE
 * WRITEs were answered with another one writes them again. */
static fsal_status_t op_commit2(struct fsal_obj_handle *obj_hdl,
				   off_t offset, size_t len)
{
	uint64_t verifier = 0;
	nasgw_client *c;
	nasgw_cred cr;
	int rc;

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	rc = nasgw_fsync(c, &cr, &obj_of(obj_hdl)->h, &verifier);
	if (rc == 0)
		op_ctx->fsal_private = nasgw_verifier_to_ctx(verifier);
	return nasgw_status(rc);
}

/* ---- NFSv4.2: ALLOCATE, DEALLOCATE, SEEK ---------------------------------- */

/* What ALLOCATE, DEALLOCATE and SEEK need first: a regular file, nasgwd
 * reachable, no share reservation of another open in the way (for an
 * anonymous stateid), the caller's credentials. */
static fsal_status_t file_op_begin(struct fsal_obj_handle *obj_hdl,
				   struct state_t *state, fsal_openflags_t want,
				   nasgw_client **c, nasgw_cred *cr)
{
	fsal_status_t st;

	if (obj_hdl->type != REGULAR_FILE)
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	*c = nasgw_get_client();
	if (*c == NULL)
		return fsalstat(ERR_FSAL_DELAY, ENOTCONN);
	st = io_share_check(obj_hdl, state, false, want);
	if (!FSAL_IS_ERROR(st))
		nasgw_creds(cr);
	return st;
}

/* nasgwd's FALLOCATE. ALLOCATE is fallocate's mode 0, as knfsd does it (the
 * file grows to cover the range); DEALLOCATE punches a hole, the size
 * kept. Ganesha checked the stateid and write access; a share reservation
 * of another open still refuses an anonymous stateid's change. */
static fsal_status_t op_fallocate(struct fsal_obj_handle *obj_hdl,
				  struct state_t *state, uint64_t offset,
				  uint64_t length, bool allocate)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	nasgw_client *c = NULL;
	nasgw_cred cr;
	nasgw_attr a;
	fsal_status_t st;
	int rc;

	st = file_op_begin(obj_hdl, state, FSAL_O_WRITE, &c, &cr);
	if (FSAL_IS_ERROR(st))
		return st;
	rc = nasgw_fallocate(c, &cr, &o->h,
			     allocate ? 0
				      : NASGW_FALLOC_PUNCH_HOLE |
					NASGW_FALLOC_KEEP_SIZE,
			     offset, length, &a);
	if (rc == 0)
		saw_attrs(o, &a, false);
	else
		attrs_changed(o);	/* it may have happened */
	return nasgw_status(rc);
}

/* nasgwd's SEEK (SEEK_DATA, SEEK_HOLE). As RFC 7862 15.11.3 and FSAL_VFS:
 * an offset at or past the end is NFS4ERR_NXIO; no data after it is not an
 * error but sr_eof. */
static fsal_status_t op_seek2(struct fsal_obj_handle *obj_hdl,
			      struct state_t *state, struct io_info *info)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	const uint64_t off = (uint64_t)info->io_content.hole.di_offset;
	uint64_t at = 0;
	nasgw_client *c = NULL;
	nasgw_cred cr;
	nasgw_attr a;
	fsal_status_t st;
	int rc;

	if (info->io_content.what != NFS4_CONTENT_DATA &&
	    info->io_content.what != NFS4_CONTENT_HOLE)
		return fsalstat(ERR_FSAL_UNION_NOTSUPP, 0);
	st = file_op_begin(obj_hdl, state, FSAL_O_READ, &c, &cr);
	if (FSAL_IS_ERROR(st))
		return st;
	rc = nasgw_getattr(c, &cr, &o->h, &a);
	if (rc != 0)
		return nasgw_status(rc);
	if (off >= a.size)
		return fsalstat(ERR_FSAL_NXIO, ENXIO);
	rc = nasgw_seek(c, &cr, &o->h, off,
			info->io_content.what == NFS4_CONTENT_HOLE, &at);
	if (rc == -ENXIO) {	/* no data after off */
		info->io_eof = TRUE;
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}
	if (rc != 0)
		return nasgw_status(rc);
	info->io_content.hole.di_offset = (offset4)at;
	info->io_eof = at >= a.size;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* ---- NFSv4.2 extended attributes (RFC 8276) ------------------------------- */

/* An attribute's full name: 255 bytes (Linux's XATTR_NAME_MAX) and a NUL. */
#define NASGW_XATTR_NAME 256

/* The protocol names user.* attributes without their prefix; nasgwd stores
 * the full name and checks the caller's permissions as Linux does. */
static int xattr_name(const xattrkey4 *k, char *out, size_t size)
{
	int n;

	if (k->utf8string_len == 0 ||
	    memchr(k->utf8string_val, '\0', k->utf8string_len) != NULL)
		return -EINVAL;
	n = snprintf(out, size, "user.%.*s", (int)k->utf8string_len,
		     k->utf8string_val);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static fsal_status_t xattr_status(int rc)
{
	if (rc == -ENODATA)
		return fsalstat(ERR_FSAL_NOXATTR, ENODATA);
	if (rc == -ERANGE || rc == -E2BIG)
		return fsalstat(ERR_FSAL_XATTR2BIG, -rc);
	return nasgw_status(rc);
}

/* What GETXATTR, SETXATTR and REMOVEXATTR need first: the full name,
 * nasgwd reachable, the caller's credentials. */
static fsal_status_t xattr_begin(const xattrkey4 *k, char *name, size_t size,
				 nasgw_client **c, nasgw_cred *cr)
{
	int rc = xattr_name(k, name, size);

	if (rc != 0)
		return nasgw_status(rc);
	*c = nasgw_get_client();
	if (*c == NULL)
		return fsalstat(ERR_FSAL_DELAY, ENOTCONN);
	nasgw_creds(cr);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* A value larger than the buffer is XATTR2BIG; Ganesha then asks with an
 * empty one for the length, and again with a buffer that size. */
static fsal_status_t op_getxattrs(struct fsal_obj_handle *obj_hdl,
				  xattrkey4 *xa_name, xattrvalue4 *xa_value)
{
	char name[NASGW_XATTR_NAME];
	nasgw_client *c = NULL;
	nasgw_cred cr;
	fsal_status_t st;
	int64_t n;

	st = xattr_begin(xa_name, name, sizeof(name), &c, &cr);
	if (FSAL_IS_ERROR(st))
		return st;
	n = nasgw_getxattr(c, &cr, &obj_of(obj_hdl)->h, name,
			   xa_value->utf8string_val, xa_value->utf8string_len);
	if (n < 0)
		return xattr_status((int)n);
	xa_value->utf8string_len = (u_int)n;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t op_setxattrs(struct fsal_obj_handle *obj_hdl,
				  setxattr_option4 option, xattrkey4 *xa_name,
				  xattrvalue4 *xa_value)
{
	char name[NASGW_XATTR_NAME];
	uint32_t flags;
	nasgw_client *c = NULL;
	nasgw_cred cr;
	fsal_status_t st;
	int rc;

	switch (option) {
	case SETXATTR4_EITHER:
		flags = 0;
		break;
	case SETXATTR4_CREATE:
		flags = NASGW_XATTR_CREATE;
		break;
	case SETXATTR4_REPLACE:
		flags = NASGW_XATTR_REPLACE;
		break;
	default:
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	}
	st = xattr_begin(xa_name, name, sizeof(name), &c, &cr);
	if (FSAL_IS_ERROR(st))
		return st;
	rc = nasgw_setxattr(c, &cr, &obj_of(obj_hdl)->h, name,
			    xa_value->utf8string_val, xa_value->utf8string_len,
			    flags);
	attrs_changed(obj_of(obj_hdl));	/* the change time moved */
	return xattr_status(rc);
}

static fsal_status_t op_removexattrs(struct fsal_obj_handle *obj_hdl,
				     xattrkey4 *xa_name)
{
	char name[NASGW_XATTR_NAME];
	nasgw_client *c = NULL;
	nasgw_cred cr;
	fsal_status_t st;
	int rc;

	st = xattr_begin(xa_name, name, sizeof(name), &c, &cr);
	if (FSAL_IS_ERROR(st))
		return st;
	rc = nasgw_removexattr(c, &cr, &obj_of(obj_hdl)->h, name);
	attrs_changed(obj_of(obj_hdl));
	return xattr_status(rc);
}

/* Ganesha's helper keeps the user.* names of a Linux-style list, without
 * their prefix, from the cookie on, as many as fit. */
static fsal_status_t op_listxattrs(struct fsal_obj_handle *obj_hdl,
				   count4 la_maxcount, nfs_cookie4 *la_cookie,
				   bool_t *lr_eof, xattrlist4 *lr_names)
{
	nasgw_client *c;
	nasgw_cred cr;
	fsal_status_t st;
	char *buf;
	int64_t n;

	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	n = nasgw_listxattr(c, &cr, &obj_of(obj_hdl)->h, NULL, 0);
	if (n < 0)
		return xattr_status((int)n);
	buf = gsh_malloc((size_t)n + 1);
	n = nasgw_listxattr(c, &cr, &obj_of(obj_hdl)->h, buf, (size_t)n + 1);
	if (n < 0) {
		gsh_free(buf);
		/* grew in between: the client asks again */
		return n == -ERANGE ? fsalstat(ERR_FSAL_DELAY, ERANGE)
				    : xattr_status((int)n);
	}
	st = fsal_listxattr_helper(buf, (size_t)n, la_maxcount, la_cookie,
				   lr_eof, lr_names);
	gsh_free(buf);
	return st;
}

/* ---- locks --------------------------------------------------------------- */

/* Byte-range locks (NLM and NFSv4) are arbitrated in nasgwd, so every head
 * and, later, every node sees the same locks. Ganesha's own lock manager
 * checks its clients first and then pushes each lock here; the owner is
 * Ganesha's lock owner (stable while it holds locks). A conflict is
 * answered DELAY with the conflicting range, which Ganesha's state layer
 * reads as "denied" (as fcntl's EAGAIN). */
static fsal_status_t op_lock_op2(struct fsal_obj_handle *obj_hdl,
				 struct state_t *state, void *owner,
				 fsal_lock_op_t lock_op,
				 fsal_lock_param_t *request_lock,
				 fsal_lock_param_t *conflicting_lock)
{
	uint64_t id = (uint64_t)(uintptr_t)owner;
	nasgw_lock_info conflict;
	uint32_t type;
	nasgw_client *c;
	nasgw_cred cr;
	int rc;

	if (obj_hdl->type != REGULAR_FILE)
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	if (request_lock->lock_sle_type != FSAL_POSIX_LOCK)
		return fsalstat(ERR_FSAL_NOTSUPP, 0);
	c = nasgw_get_client();
	if (c == NULL)
		return fsalstat(ERR_FSAL_IO, ENOTCONN);
	nasgw_creds(&cr);
	type = request_lock->lock_type == FSAL_LOCK_R ? NASGW_LOCK_READ
						      : NASGW_LOCK_WRITE;
	memset(&conflict, 0, sizeof(conflict));
	switch (lock_op) {
	case FSAL_OP_LOCKT:
		rc = nasgw_testlock(c, &cr, &obj_of(obj_hdl)->h, id, type,
				    request_lock->lock_start,
				    request_lock->lock_length, &conflict);
		if (rc == 0 && conflict.type != 0)
			rc = -EAGAIN;
		break;
	case FSAL_OP_LOCK:
	case FSAL_OP_LOCKB:	/* not async-capable: Ganesha polls */
		/* A reclaim (NFSv4 LOCK with reclaim, NLM LOCK with reclaim)
		 * in ganesha's grace period: nasgwd grants it over the locks a
		 * ganesha that died still holds there (its session is kept
		 * for 30 s), which are this client's own. */
		rc = nasgw_lock_flags(c, &cr, &obj_of(obj_hdl)->h, id, type,
				      request_lock->lock_start,
				      request_lock->lock_length,
				      request_lock->lock_reclaim ?
					      NASGW_LOCK_RECLAIM : 0,
				      &conflict);
		break;
	case FSAL_OP_UNLOCK:
		rc = nasgw_unlock(c, &cr, &obj_of(obj_hdl)->h, id,
				  request_lock->lock_start,
				  request_lock->lock_length);
		break;
	default:
		return fsalstat(ERR_FSAL_NOTSUPP, 0);
	}
	if (rc == -EAGAIN) {
		if (conflicting_lock != NULL) {
			conflicting_lock->lock_sle_type = FSAL_POSIX_LOCK;
			conflicting_lock->lock_type =
				conflict.type == NASGW_LOCK_READ ? FSAL_LOCK_R
								 : FSAL_LOCK_W;
			conflicting_lock->lock_start = conflict.start;
			conflicting_lock->lock_length = conflict.length;
		}
		return fsalstat(ERR_FSAL_DELAY, EAGAIN);
	}
	if (lock_op == FSAL_OP_LOCKT && conflicting_lock != NULL)
		conflicting_lock->lock_type = FSAL_NO_LOCK;
	/* nasgwd unreachable is an error here, not a conflict */
	if (rc == -ENOTCONN)
		return fsalstat(ERR_FSAL_IO, ENOTCONN);
	return nasgw_status(rc);
}

/* ---- handles ------------------------------------------------------------- */

static fsal_status_t op_handle_to_wire(const struct fsal_obj_handle *obj_hdl,
					  fsal_digesttype_t output_type,
					  struct gsh_buffdesc *fh_desc)
{
	const struct nasgw_fsal_obj *o =
		container_of(obj_hdl, const struct nasgw_fsal_obj, obj_handle);

	switch (output_type) {
	case FSAL_DIGEST_NFSV3:
	case FSAL_DIGEST_NFSV4:
		if (fh_desc->len < NASGW_WIRE_LEN)
			return fsalstat(ERR_FSAL_TOOSMALL, 0);
		memcpy(fh_desc->addr, o->wire, NASGW_WIRE_LEN);
		fh_desc->len = NASGW_WIRE_LEN;
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	default:
		return fsalstat(ERR_FSAL_SERVERFAULT, 0);
	}
}

static void op_handle_to_key(struct fsal_obj_handle *obj_hdl,
				struct gsh_buffdesc *fh_desc)
{
	fh_desc->addr = obj_of(obj_hdl)->key;
	fh_desc->len = NASGW_KEY_LEN;
}

/* ---- delegations ------------------------------------------------------
 *
 * Ganesha grants NFSv4 delegations among its own clients (SAL) and asks
 * the FSAL for each (lease_op2); FSAL_NASGW asks nasgwd, which holds it as
 * a lease of this head, so an SMB open or a FUSE write recalls it: nasgwd
 * sends RECALL, and nasgw_deleg_recall has Ganesha recall the delegation
 * from its client (CB_RECALL); the client's DELEGRETURN comes back here as
 * FSAL_DELEG_NONE, which gives nasgwd the lease back. A delegation nasgwd
 * refuses (another head caches the file) is not granted. */

static void deleg_forget(uint64_t owner)
{
	struct nasgw_deleg **p;

	PTHREAD_MUTEX_lock(&NASGW.deleg_lock);
	for (p = &NASGW.delegs; *p != NULL; p = &(*p)->next) {
		if ((*p)->owner == owner) {
			struct nasgw_deleg *d = *p;

			*p = d->next;
			gsh_free(d);
			break;
		}
	}
	PTHREAD_MUTEX_unlock(&NASGW.deleg_lock);
}

static fsal_status_t op_lease_op2(struct fsal_obj_handle *obj_hdl,
				     struct state_t *state, void *owner,
				     fsal_deleg_t deleg)
{
	struct nasgw_fsal_obj *o = obj_of(obj_hdl);
	const uint64_t id = (uint64_t)(uintptr_t)state;
	uint32_t type = 0;
	nasgw_client *c;
	nasgw_cred cr;
	int rc;

	if (deleg == FSAL_DELEG_RD)
		type = NASGW_LEASE_READ;
	else if (deleg == FSAL_DELEG_WR)
		type = NASGW_LEASE_READ | NASGW_LEASE_WRITE;
	CLIENT_OR_DELAY(c);
	nasgw_creds(&cr);
	if (type != 0) {
		/* known before nasgwd can recall it */
		struct nasgw_deleg *d = gsh_calloc(1, sizeof(*d));

		d->owner = id;
		memcpy(d->key, o->key, NASGW_KEY_LEN);
		d->up_ops = op_ctx->fsal_export->up_ops;
		PTHREAD_MUTEX_lock(&NASGW.deleg_lock);
		d->next = NASGW.delegs;
		NASGW.delegs = d;
		PTHREAD_MUTEX_unlock(&NASGW.deleg_lock);
	}
	rc = nasgw_lease(c, &cr, &o->h, id, type);
	if (type == 0 || rc != 0)
		deleg_forget(id);
	if (rc == -EAGAIN)	/* another head caches the file */
		return fsalstat(ERR_FSAL_DELAY, EAGAIN);
	return nasgw_status(rc);
}

void nasgw_deleg_recall(void *arg, uint32_t volume, uint64_t ino,
			uint64_t owner, uint32_t break_to)
{
	const struct fsal_up_vector *up_ops = NULL;
	uint8_t key[NASGW_KEY_LEN];
	/* the host handle (the key's wire part): what create_handle takes */
	struct gsh_buffdesc desc = { .addr = key, .len = NASGW_WIRE_LEN };
	struct nasgw_deleg *d;
	fsal_status_t st;

	PTHREAD_MUTEX_lock(&NASGW.deleg_lock);
	for (d = NASGW.delegs; d != NULL; d = d->next) {
		if (d->owner == owner) {
			memcpy(key, d->key, NASGW_KEY_LEN);
			up_ops = d->up_ops;
			break;
		}
	}
	PTHREAD_MUTEX_unlock(&NASGW.deleg_lock);
	if (up_ops == NULL)
		return;	/* returned meanwhile */
	/* On the client library's reader thread: Ganesha's fridge sends the
	 * CB_RECALL (the key is copied). */
	st = up_async_delegrecall(general_fridge, up_ops, &desc, NULL, NULL);
	if (FSAL_IS_ERROR(st))
		LogWarn(COMPONENT_FSAL,
			"FSAL_NASGW: cannot recall the delegation on volume %u inode %llu: %s",
			volume, (unsigned long long)ino, msg_fsal_err(st.major));
}

void nasgw_handle_ops_init(struct fsal_obj_ops *ops)
{
	fsal_default_obj_ops_init(ops);
	ops->release = op_release;
	ops->merge = op_merge;
	ops->lookup = op_lookup;
	ops->readdir = op_readdir;
	ops->mkdir = op_mkdir;
	ops->mknode = op_mknode;
	ops->symlink = op_symlink;
	ops->readlink = op_readlink;
	ops->getattrs = op_getattrs;
	ops->setattr2 = op_setattr2;
	ops->link = op_link;
	ops->rename = op_rename;
	ops->unlink = op_unlink;
	ops->open2 = op_open2;
	ops->reopen2 = op_reopen2;
	ops->status2 = op_status2;
	ops->close = op_close;
	ops->close2 = op_close2;
	ops->read2 = op_read2;
	ops->write2 = op_write2;
	ops->commit2 = op_commit2;
	ops->lock_op2 = op_lock_op2;
	ops->handle_to_wire = op_handle_to_wire;
	ops->handle_to_key = op_handle_to_key;
	ops->lease_op2 = op_lease_op2;
	ops->fallocate = op_fallocate;
	ops->seek2 = op_seek2;
	ops->getxattrs = op_getxattrs;
	ops->setxattrs = op_setxattrs;
	ops->removexattrs = op_removexattrs;
	ops->listxattrs = op_listxattrs;
}
