/* FSAL_NASGW exports: an export is a volume or a directory inside one,
 * named by its Path, "/<volume>[/sub/path]" (the form nasgwd writes into the
 * exports file it renders; docs/nfs.md). */
#include "nasgw_int.h"

#include <errno.h>
#include <string.h>

#include "fsal_convert.h"
#include "nfs_exports.h"
#include "export_mgr.h"

static struct nasgw_fsal_export *of(struct fsal_export *e)
{
	return container_of(e, struct nasgw_fsal_export, export);
}

static void nasgw_release_export(struct fsal_export *exp_hdl)
{
	struct nasgw_fsal_export *me = of(exp_hdl);

	fsal_detach_export(exp_hdl->fsal, &exp_hdl->exports);
	free_export_ops(exp_hdl);
	gsh_free(me->volume);
	gsh_free(me->path);
	gsh_free(me);
}

/* Walks `rest` ("a/b/c", may be empty) from `from` as root. */
static int walk(nasgw_client *c, const nasgw_handle *from, const char *rest,
		nasgw_attr *out)
{
	nasgw_cred root = { 0, 0, 0, NULL };
	char name[NASGW_NAME_MAX + 1];
	nasgw_handle at = *from;
	int rc = nasgw_getattr(c, &root, &at, out);

	while (rc == 0 && *rest != '\0') {
		const char *slash = strchr(rest, '/');
		size_t n = slash ? (size_t)(slash - rest) : strlen(rest);

		if (n == 0) {
			rest++;
			continue;
		}
		if (n > NASGW_NAME_MAX)
			return -ENAMETOOLONG;
		memcpy(name, rest, n);
		name[n] = '\0';
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			return -EINVAL;
		rc = nasgw_lookup(c, &root, &at, name, out);
		at = out->handle;
		rest += n;
	}
	return rc;
}

static fsal_status_t nasgw_lookup_path(struct fsal_export *exp_hdl,
				       const char *path,
				       struct fsal_obj_handle **handle,
				       struct fsal_attrlist *attrs_out)
{
	struct nasgw_fsal_export *me = of(exp_hdl);
	nasgw_client *c = nasgw_get_client();
	size_t n = strlen(me->path);
	nasgw_attr a;
	int rc;

	*handle = NULL;
	if (c == NULL)
		return fsalstat(ERR_FSAL_DELAY, ENOTCONN);
	if (strncmp(path, me->path, n) != 0 ||
	    (path[n] != '\0' && path[n] != '/'))
		return fsalstat(ERR_FSAL_NOENT, ENOENT);
	rc = walk(c, &me->root, path + n, &a);
	if (rc != 0)
		return nasgw_status(rc);
	*handle = &nasgw_alloc_obj(exp_hdl, &a)->obj_handle;
	nasgw_to_attrs(&a, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t nasgw_wire_to_host(struct fsal_export *exp_hdl,
					fsal_digesttype_t in_type,
					struct gsh_buffdesc *fh_desc, int flags)
{
	nasgw_handle h;
	fsal_errors_t e;

	/* The wire form has a fixed byte order: nothing to swap. A handle of
	 * another volume is refused here, before any cache lookup. */
	e = nasgw_decode_wire(of(exp_hdl), fh_desc->addr, fh_desc->len, &h);
	return fsalstat(e, 0);
}

/* The MDCACHE key: the host (= wire) handle and the export id, so that an
 * object is found only through the export it was made in (Ganesha leaves
 * FSAL_KEY_EXTRA_BYTES of room behind the handle for this). */
static fsal_status_t nasgw_host_to_key(struct fsal_export *exp_hdl,
				       struct gsh_buffdesc *fh_desc)
{
	uint16_t id = of(exp_hdl)->export_id;

	if (fh_desc->len != NASGW_WIRE_LEN)
		return fsalstat(ERR_FSAL_BADHANDLE, 0);
	memcpy((uint8_t *)fh_desc->addr + NASGW_WIRE_LEN, &id, sizeof(id));
	fh_desc->len = NASGW_KEY_LEN;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t nasgw_create_handle(struct fsal_export *exp_hdl,
					 struct gsh_buffdesc *fh_desc,
					 struct fsal_obj_handle **handle,
					 struct fsal_attrlist *attrs_out)
{
	nasgw_client *c = nasgw_get_client();
	nasgw_handle h;
	nasgw_attr a;
	nasgw_cred cr;
	int rc;

	fsal_errors_t e;

	*handle = NULL;
	e = nasgw_decode_wire(of(exp_hdl), fh_desc->addr, fh_desc->len, &h);
	if (e != ERR_FSAL_NO_ERROR)
		return fsalstat(e, 0);
	if (c == NULL)
		return fsalstat(ERR_FSAL_DELAY, ENOTCONN);
	nasgw_creds(&cr);
	rc = nasgw_getattr(c, &cr, &h, &a);
	if (rc != 0)
		return nasgw_status(rc);
	*handle = &nasgw_alloc_obj(exp_hdl, &a)->obj_handle;
	nasgw_to_attrs(&a, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t nasgw_dynamic_info(struct fsal_export *exp_hdl,
					struct fsal_obj_handle *obj_hdl,
					fsal_dynamicfsinfo_t *info)
{
	struct nasgw_fsal_export *me = of(exp_hdl);
	nasgw_client *c = nasgw_get_client();
	nasgw_fs_stats st;
	nasgw_cred cr;
	int rc;

	if (c == NULL)
		return fsalstat(ERR_FSAL_DELAY, ENOTCONN);
	nasgw_creds(&cr);
	rc = nasgw_statfs(c, &cr, me->root.volume, &st);
	if (rc != 0)
		return nasgw_status(rc);
	memset(info, 0, sizeof(*info));
	info->total_bytes = st.total_bytes;
	info->free_bytes = st.free_bytes;
	info->avail_bytes = st.free_bytes;
	/* Inodes are not preallocated: one per 4 KiB of free space is what
	 * could still be made. */
	info->free_files = st.free_bytes / 4096;
	info->avail_files = info->free_files;
	info->total_files = st.files + info->free_files;
	info->maxread = NASGW_IO_MAX;
	info->maxwrite = NASGW_IO_MAX;
	info->time_delta.tv_sec = 0;
	info->time_delta.tv_nsec = 1;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static struct state_t *nasgw_alloc_state(struct fsal_export *exp_hdl,
					 enum state_type state_type,
					 struct state_t *related_state)
{
	struct state_t *st = gsh_calloc(1, sizeof(struct state_t) +
					       sizeof(struct nasgw_state_fd));

	return init_state(st, exp_hdl, state_type, related_state);
}

/* The write verifier of an NFSv4 WRITE or COMMIT reply (Ganesha's NFSv3
 * uses its own: see write_stability in nasgw_handle.c). It must change
 * whenever data a client wrote UNSTABLE may have been lost, so the client
 * sends it again. Unstable data lives in nasgwd, which draws a new verifier
 * every time it opens the domain (a restart, a crash, a takeover) and puts
 * it in every WRITE and FSYNC reply: the reply carries the verifier of the
 * nasgwd that executed that very WRITE or COMMIT (kept in the request's op
 * context), else the latest the client library saw. A ganesha restart
 * loses no unstable data, so it leaves the verifier alone. */
static void nasgw_write_verifier(struct fsal_export *exp_hdl,
				 struct gsh_buffdesc *verf_desc)
{
	uint64_t v = op_ctx != NULL ? nasgw_verifier_of_ctx(op_ctx) : 0;
	nasgw_client *c;

	if (v == 0 && (c = nasgw_get_client()) != NULL)
		v = nasgw_client_write_verifier(c);
	memset(verf_desc->addr, 0, verf_desc->len);
	memcpy(verf_desc->addr, &v,
	       verf_desc->len < sizeof(v) ? verf_desc->len : sizeof(v));
}

static void nasgw_export_ops_init(struct export_ops *ops)
{
	ops->release = nasgw_release_export;
	ops->lookup_path = nasgw_lookup_path;
	ops->wire_to_host = nasgw_wire_to_host;
	ops->host_to_key = nasgw_host_to_key;
	ops->create_handle = nasgw_create_handle;
	ops->get_fs_dynamic_info = nasgw_dynamic_info;
	ops->alloc_state = nasgw_alloc_state;
	ops->get_write_verifier = nasgw_write_verifier;
}

static struct config_item nasgw_export_params[] = {
	CONF_ITEM_NOOP("name"),
	/* Every directory's `.snapshot` is found by name; this lists it too
	 * (NetApp's snapdir visible, ZFS's snapdir=visible). */
	CONF_ITEM_BOOL("Show_Snapshot_Dir", false, nasgw_fsal_export,
		       show_snapshot_dir),
	CONFIG_EOL
};

static struct config_block nasgw_export_block = {
	.dbus_interface_name = "org.ganesha.nfsd.config.fsal.nasgw-export%d",
	.blk_desc.name = "FSAL",
	.blk_desc.type = CONFIG_BLOCK,
	.blk_desc.u.blk.init = noop_conf_init,
	.blk_desc.u.blk.params = nasgw_export_params,
	.blk_desc.u.blk.commit = noop_conf_commit
};

fsal_status_t nasgw_create_export(struct fsal_module *fsal_hdl,
				  void *parse_node,
				  struct config_error_type *err_type,
				  const struct fsal_up_vector *up_ops)
{
	const char *path = CTX_FULLPATH(op_ctx);
	nasgw_cred root = { 0, 0, 0, NULL };
	struct nasgw_fsal_export *me;
	nasgw_client *c;
	nasgw_attr dir;
	const char *slash;
	int rc;

	if (path == NULL || path[0] != '/' || path[1] == '\0') {
		LogCrit(COMPONENT_FSAL,
			"FSAL_NASGW: export path \"%s\" must be /<volume>[/path]",
			path ? path : "");
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	}
	me = gsh_calloc(1, sizeof(*me));
	me->path = gsh_strdup(path);
	/* drop trailing slashes: "/vol1/" is "/vol1" */
	while (strlen(me->path) > 1 && me->path[strlen(me->path) - 1] == '/')
		me->path[strlen(me->path) - 1] = '\0';
	slash = strchr(me->path + 1, '/');
	if (slash != NULL) {
		size_t n = (size_t)(slash - me->path - 1);

		me->volume = gsh_malloc(n + 1);
		memcpy(me->volume, me->path + 1, n);
		me->volume[n] = '\0';
	} else {
		me->volume = gsh_strdup(me->path + 1);
	}
	fsal_export_init(&me->export);
	nasgw_export_ops_init(&me->export.exp_ops);

	if (load_config_from_node(parse_node, &nasgw_export_block, me, true,
				  err_type) != 0) {
		rc = -EINVAL;
		goto fail;
	}
	c = nasgw_get_client();
	if (c == NULL) {
		rc = -ENOTCONN;
		goto fail;
	}
	/* nasgwd walks the sub-path and makes the directory the scope of
	 * every handle of this export. */
	rc = nasgw_mount_path(c, &root, me->volume, slash ? slash + 1 : "",
			      &dir);
	if (rc != 0) {
		LogCrit(COMPONENT_FSAL,
			"FSAL_NASGW: export %s: volume \"%s\": %s (%s)",
			me->path, me->volume, strerror(-rc),
			nasgw_client_last_message());
		goto fail;
	}
	me->root = dir.handle;
	me->export_id = op_ctx->ctx_export != NULL ?
				op_ctx->ctx_export->export_id : 0;
	rc = fsal_attach_export(fsal_hdl, &me->export.exports);
	if (rc != 0) {
		rc = -rc;
		goto fail;
	}
	me->export.fsal = fsal_hdl;
	me->export.up_ops = up_ops;
	op_ctx->fsal_export = &me->export;
	LogEvent(COMPONENT_FSAL,
		 "FSAL_NASGW: export %s: volume %s (id %u), directory ino %llu",
		 me->path, me->volume, me->root.volume,
		 (unsigned long long)me->root.ino);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);

fail:
	free_export_ops(&me->export);
	gsh_free(me->volume);
	gsh_free(me->path);
	gsh_free(me);
	return nasgw_status(rc);
}
