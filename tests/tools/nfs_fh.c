/* nasgw-nfs-fh: sends NFS requests with a file handle given on the command
 * line (libnfs's raw RPC API), so a test can present crafted handles to a
 * server the way a malicious NFS client would, and see what it answers.
 *
 *   nasgw-nfs-fh --url nfs://SERVER/EXPORT[/FILE]?version=3|4 CMD [ARGS]
 *
 * (the URL names a file for get, the export for the other commands)
 *
 *   get                      the handle of FILE (LOOKUPs from the export's
 *                            root): prints "fh HEX"
 *   getattr HEX              GETATTR: prints "status N"
 *   read HEX OFFSET COUNT    READ (v4: the anonymous stateid): prints
 *                            "status N eof E count C"
 *   setsize HEX SIZE         SETATTR of the size (v3 SETATTR3, v4 SETATTR
 *                            with the anonymous stateid): prints "status N"
 *   write HEX OFFSET STABLE [N]
 *                            N WRITEs (default 1) of 4096 bytes (v4: 512,
 *                            libnfs 4.0 cannot encode a v4 WRITE of about
 *                            4 KiB), one after another from OFFSET (v4: the
 *                            anonymous stateid), STABLE 0 unstable, 1 data_sync, 2
 *                            file_sync: prints "status N count C committed S
 *                            verf HEX same B" for the last, B 1 when every
 *                            WRITE's verifier was the same
 *   commit HEX               COMMIT of the whole file: prints "status N verf
 *                            HEX"
 *   getacl HEX               (v4) GETATTR of the ACL: prints "status N", then
 *                            "ace TYPE FLAGS MASK WHO" per ACE (numbers in hex),
 *                            or "acl absent" when the reply has no ACL
 *   setacl HEX [TYPE:FLAGS:MASK:WHO ...]
 *                            (v4) SETATTR of the ACL (the anonymous stateid),
 *                            these ACEs (numbers in hex, WHO e.g. OWNER@ or a
 *                            uid): prints "status N"
 *   mkdiracl HEX NAME [TYPE:FLAGS:MASK:WHO ...]
 *                            (v4) CREATE of directory NAME in directory HEX
 *                            with these ACEs as its ACL: prints "status N"
 *
 * N is the protocol's status number (nfsstat3 / nfsstat4: 0 OK, 70 STALE,
 * 10001 BADHANDLE, 27 FBIG, 22 INVAL). The export is mounted first (MOUNT
 * for v3, SETCLIENTID for v4.0), so the requests go out on an established
 * connection. Exit code 0 when the server answered (whatever the status), 2
 * and "error: ..." otherwise.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <nfsc/libnfs-raw-nfs4.h>

/* nfs_get_fh() returns this; libnfs declares it only in its private header. */
struct nfs_fh {
	int len;
	char *val;
};

struct call {
	bool done, ok;
	int status;
	int eof;
	uint32_t count;
	int committed;		/* WRITE: the stability the server reached */
	unsigned char verf[8];	/* WRITE, COMMIT: the write verifier */
	char attrs[16384];	/* GETATTR: the attribute values (XDR) */
	int attrs_len;
	char err[256];
};

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int fail(const char *fmt, const char *a, const char *b)
{
	printf("error: ");
	printf(fmt, a, b);
	printf("\n");
	return 2;
}

static bool wait_call(struct rpc_context *rpc, struct call *c)
{
	int64_t deadline = now_ms() + 30000;

	while (!c->done) {
		if (now_ms() > deadline) {
			snprintf(c->err, sizeof(c->err), "no answer in 30 s");
			return false;
		}
		struct pollfd p = {.fd = rpc_get_fd(rpc), .events = (short)rpc_which_events(rpc)};
		int n = poll(&p, 1, 100);
		if (n < 0 && errno != EINTR)
			return false;
		if (rpc_service(rpc, n > 0 ? p.revents : 0) < 0) {
			snprintf(c->err, sizeof(c->err), "connection: %s", rpc_get_error(rpc));
			return false;
		}
	}
	return c->ok;
}

static bool transport_ok(struct call *c, int status, void *data)
{
	c->done = true;
	if (status == RPC_STATUS_SUCCESS) {
		c->ok = true;
		return true;
	}
	snprintf(c->err, sizeof(c->err), "RPC failed: %s",
		 status == RPC_STATUS_ERROR && data ? (const char *)data : "?");
	return false;
}

static void v3_getattr_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (transport_ok(c, status, data))
		c->status = ((GETATTR3res *)data)->status;
}

static void v3_read_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status, data))
		return;
	READ3res *r = data;
	c->status = r->status;
	if (r->status == NFS3_OK) {
		c->eof = r->READ3res_u.resok.eof;
		c->count = r->READ3res_u.resok.count;
	}
}

static void v3_setattr_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (transport_ok(c, status, data))
		c->status = ((SETATTR3res *)data)->status;
}

static void v3_write_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status, data))
		return;
	WRITE3res *r = data;
	c->status = r->status;
	if (r->status == NFS3_OK) {
		c->count = r->WRITE3res_u.resok.count;
		c->committed = r->WRITE3res_u.resok.committed;
		memcpy(c->verf, r->WRITE3res_u.resok.verf, sizeof(c->verf));
	}
}

static void v3_commit_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status, data))
		return;
	COMMIT3res *r = data;
	c->status = r->status;
	if (r->status == NFS3_OK)
		memcpy(c->verf, r->COMMIT3res_u.resok.verf, sizeof(c->verf));
}

static char got_fh[NFS4_FHSIZE];
static int got_fh_len = -1;

static void v4_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status, data))
		return;
	COMPOUND4res *r = data;
	c->status = r->status;
	for (u_int i = 0; i < r->resarray.resarray_len; i++) {
		nfs_resop4 *op = &r->resarray.resarray_val[i];
		if (op->resop == OP_GETFH && op->nfs_resop4_u.opgetfh.status == NFS4_OK) {
			nfs_fh4 *f = &op->nfs_resop4_u.opgetfh.GETFH4res_u.resok4.object;
			got_fh_len = (int)f->nfs_fh4_len;
			memcpy(got_fh, f->nfs_fh4_val, f->nfs_fh4_len);
		}
		if (op->resop == OP_READ && op->nfs_resop4_u.opread.status == NFS4_OK) {
			c->eof = op->nfs_resop4_u.opread.READ4res_u.resok4.eof;
			c->count = op->nfs_resop4_u.opread.READ4res_u.resok4.data.data_len;
		}
		if (op->resop == OP_WRITE && op->nfs_resop4_u.opwrite.status == NFS4_OK) {
			WRITE4resok *w = &op->nfs_resop4_u.opwrite.WRITE4res_u.resok4;
			c->count = w->count;
			c->committed = w->committed;
			memcpy(c->verf, w->writeverf, sizeof(c->verf));
		}
		if (op->resop == OP_GETATTR && op->nfs_resop4_u.opgetattr.status == NFS4_OK) {
			attrlist4 *v = &op->nfs_resop4_u.opgetattr.GETATTR4res_u.resok4.obj_attributes.attr_vals;
			if (v->attrlist4_len <= sizeof(c->attrs)) {
				memcpy(c->attrs, v->attrlist4_val, v->attrlist4_len);
				c->attrs_len = (int)v->attrlist4_len;
			}
		}
		if (op->resop == OP_COMMIT && op->nfs_resop4_u.opcommit.status == NFS4_OK)
			memcpy(c->verf, op->nfs_resop4_u.opcommit.COMMIT4res_u.resok4.writeverf, sizeof(c->verf));
	}
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static bool parse_hex(const char *s, struct nfs_fh *fh)
{
	size_t n = strlen(s);
	if (n % 2 != 0 || n / 2 > 128)
		return false;
	fh->len = (int)(n / 2);
	fh->val = malloc(n / 2 + 1);
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		fh->val[i] = (char)(hi << 4 | lo);
	}
	return true;
}

static void print_verf(const unsigned char *v)
{
	for (int k = 0; k < 8; k++)
		printf("%02x", v[k]);
}

static bool compound(struct rpc_context *rpc, nfs_argop4 *ops, u_int n, struct call *c)
{
	COMPOUND4args args;
	memset(&args, 0, sizeof(args));
	args.argarray.argarray_len = n;
	args.argarray.argarray_val = ops;
	return rpc_nfs4_compound_async(rpc, v4_cb, &args, c) == 0 && wait_call(rpc, c);
}

static uint32_t get32(const char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return ntohl(v);
}

static void put32(char *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

/* An fattr4_acl (XDR: count, then type, flag, access mask, who) as lines. */
static bool print_acl(const char *b, int len)
{
	int at = 4;
	if (len == 0) {  /* the server returned no ACL attribute */
		printf("acl absent\n");
		return true;
	}
	if (len < 4)
		return false;
	uint32_t n = get32(b);
	for (uint32_t k = 0; k < n; k++) {
		if (at + 16 > len)
			return false;
		uint32_t type = get32(b + at), flag = get32(b + at + 4), mask = get32(b + at + 8);
		uint32_t wl = get32(b + at + 12);
		at += 16;
		if (wl > 1024 || at + (int)wl > len)
			return false;
		printf("ace %x %x %x %.*s\n", type, flag, mask, (int)wl, b + at);
		at += (int)((wl + 3) & ~3u);
	}
	return at == len;
}

/* TYPE:FLAGS:MASK:WHO arguments as an fattr4_acl; its length, -1 if bad. */
static int encode_acl(char **aces, int n, char *b, int cap)
{
	int at = 4;
	put32(b, (uint32_t)n);
	for (int k = 0; k < n; k++) {
		unsigned type, flag, mask;
		int used = 0;
		if (sscanf(aces[k], "%x:%x:%x:%n", &type, &flag, &mask, &used) != 3 || used == 0)
			return -1;
		const char *who = aces[k] + used;
		uint32_t wl = (uint32_t)strlen(who);
		if (at + 16 + (int)((wl + 3) & ~3u) > cap)
			return -1;
		put32(b + at, type);
		put32(b + at + 4, flag);
		put32(b + at + 8, mask);
		put32(b + at + 12, wl);
		at += 16;
		memset(b + at, 0, (wl + 3) & ~3u);
		memcpy(b + at, who, wl);
		at += (int)((wl + 3) & ~3u);
	}
	return at;
}

static void putfh(nfs_argop4 *op, struct nfs_fh *fh)
{
	op->argop = OP_PUTFH;
	op->nfs_argop4_u.opputfh.object.nfs_fh4_len = (u_int)fh->len;
	op->nfs_argop4_u.opputfh.object.nfs_fh4_val = fh->val;
}

/* PUTFH, SETATTR (the anonymous stateid) of one attribute, XDR `vals`. */
static bool setattr4(struct rpc_context *rpc, struct nfs_fh *fh, uint32_t attr, char *vals, u_int len,
		     struct call *c)
{
	nfs_argop4 ops[2];
	uint32_t mask[2] = {0, 0};
	mask[attr / 32] = 1u << (attr % 32);
	memset(ops, 0, sizeof(ops));
	putfh(&ops[0], fh);
	ops[1].argop = OP_SETATTR;
	ops[1].nfs_argop4_u.opsetattr.obj_attributes.attrmask.bitmap4_len = attr < 32 ? 1 : 2;
	ops[1].nfs_argop4_u.opsetattr.obj_attributes.attrmask.bitmap4_val = mask;
	ops[1].nfs_argop4_u.opsetattr.obj_attributes.attr_vals.attrlist4_len = len;
	ops[1].nfs_argop4_u.opsetattr.obj_attributes.attr_vals.attrlist4_val = vals;
	return compound(rpc, ops, 2, c);
}

int main(int argc, char **argv)
{
	const char *url = NULL;
	int i = 1;

	if (argc > 2 && strcmp(argv[1], "--url") == 0) {
		url = argv[2];
		i = 3;
	}
	if (url == NULL || i >= argc) {
		fprintf(stderr, "usage: nasgw-nfs-fh --url nfs://SERVER/EXPORT[/FILE]?version=3|4 "
				"get | getattr HEX | read HEX OFF COUNT | setsize HEX SIZE | "
				"write HEX OFF STABLE [N] | commit HEX\n");
		return 2;
	}
	const char *cmd = argv[i++];
	struct nfs_context *nfs = nfs_init_context();
	/* get: the URL names a file; the others: the export. */
	struct nfs_url *u = strcmp(cmd, "get") == 0 ? nfs_parse_url_full(nfs, url) : nfs_parse_url_dir(nfs, url);
	if (u == NULL)
		return fail("URL %s: %s", url, nfs_get_error(nfs));
	int version = strstr(url, "version=4") ? 4 : 3;
	if (version == 4) {
		char id[64];
		snprintf(id, sizeof(id), "nasgw-nfs-fh pid:%d t:%" PRId64, (int)getpid(), now_ms());
		nfs4_set_client_name(nfs, id);
	}
	nfs_set_timeout(nfs, 30000);
	if (nfs_mount(nfs, u->server, u->path) != 0)
		return fail("mount %s: %s", u->path, nfs_get_error(nfs));
	struct rpc_context *rpc = nfs_get_rpc_context(nfs);
	struct call c = {0};
	struct nfs_fh fh = {0};

	if (strcmp(cmd, "get") == 0 && version == 4) {
		/* PUTROOTFH, LOOKUP each component, GETFH: works for directories
		 * too (an OPEN would not). */
		char path[1024];
		nfs_argop4 ops[34];
		u_int n = 0;
		memset(ops, 0, sizeof(ops));
		snprintf(path, sizeof(path), "%s/%s", u->path, u->file ? u->file : "");
		ops[n++].argop = OP_PUTROOTFH;
		for (char *tok = strtok(path, "/"); tok != NULL && n < 33; tok = strtok(NULL, "/")) {
			ops[n].argop = OP_LOOKUP;
			ops[n].nfs_argop4_u.oplookup.objname.utf8string_len = (u_int)strlen(tok);
			ops[n].nfs_argop4_u.oplookup.objname.utf8string_val = tok;
			n++;
		}
		ops[n++].argop = OP_GETFH;
		if (!compound(rpc, ops, n, &c) || c.status != NFS4_OK || got_fh_len < 0) {
			char st[32];
			snprintf(st, sizeof(st), "%d", c.status);
			return fail("GETFH: status %s %s", st, c.err);
		}
		printf("fh ");
		for (int k = 0; k < got_fh_len; k++)
			printf("%02x", (unsigned char)got_fh[k]);
		printf("\n");
		return 0;
	}
	if (strcmp(cmd, "get") == 0) {
		struct nfsfh *f = NULL;
		if (nfs_open(nfs, u->file ? u->file : "/", O_RDONLY, &f) != 0)
			return fail("open %s: %s", u->file ? u->file : "/", nfs_get_error(nfs));
		const struct nfs_fh *w = nfs_get_fh(f);
		printf("fh ");
		for (int k = 0; k < w->len; k++)
			printf("%02x", (unsigned char)w->val[k]);
		printf("\n");
		return 0;
	}
	if (i >= argc || !parse_hex(argv[i++], &fh))
		return fail("%s: a hex handle is needed%s", cmd, "");
	if (strcmp(cmd, "getattr") == 0) {
		if (version == 3) {
			GETATTR3args a = {.object = {.data = {.data_len = (u_int)fh.len, .data_val = fh.val}}};
			if (rpc_nfs3_getattr_async(rpc, v3_getattr_cb, &a, &c) != 0 || !wait_call(rpc, &c))
				return fail("GETATTR: %s%s", c.err, "");
		} else {
			nfs_argop4 ops[2];
			uint32_t mask[2] = {1u << FATTR4_TYPE, 0};
			memset(ops, 0, sizeof(ops));
			putfh(&ops[0], &fh);
			ops[1].argop = OP_GETATTR;
			ops[1].nfs_argop4_u.opgetattr.attr_request.bitmap4_len = 2;
			ops[1].nfs_argop4_u.opgetattr.attr_request.bitmap4_val = mask;
			if (!compound(rpc, ops, 2, &c))
				return fail("COMPOUND GETATTR: %s%s", c.err, "");
		}
		printf("status %d\n", c.status);
		return 0;
	}
	if (strcmp(cmd, "read") == 0 && i + 1 < argc) {
		uint64_t off = strtoull(argv[i], NULL, 0);
		uint32_t count = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		if (version == 3) {
			READ3args a = {.file = {.data = {.data_len = (u_int)fh.len, .data_val = fh.val}},
				       .offset = off,
				       .count = count};
			if (rpc_nfs3_read_async(rpc, v3_read_cb, &a, &c) != 0 || !wait_call(rpc, &c))
				return fail("READ: %s%s", c.err, "");
		} else {
			nfs_argop4 ops[2];
			memset(ops, 0, sizeof(ops));
			putfh(&ops[0], &fh);
			ops[1].argop = OP_READ;
			ops[1].nfs_argop4_u.opread.offset = off;  /* anonymous stateid: all zero */
			ops[1].nfs_argop4_u.opread.count = count;
			if (!compound(rpc, ops, 2, &c))
				return fail("COMPOUND READ: %s%s", c.err, "");
		}
		printf("status %d eof %d count %u\n", c.status, c.eof, c.count);
		return 0;
	}
	if (strcmp(cmd, "setsize") == 0 && i < argc) {
		uint64_t size = strtoull(argv[i], NULL, 0);
		if (version == 3) {
			SETATTR3args a;
			memset(&a, 0, sizeof(a));
			a.object.data.data_len = (u_int)fh.len;
			a.object.data.data_val = fh.val;
			a.new_attributes.size.set_it = 1;
			a.new_attributes.size.set_size3_u.size = size;
			if (rpc_nfs3_setattr_async(rpc, v3_setattr_cb, &a, &c) != 0 || !wait_call(rpc, &c))
				return fail("SETATTR: %s%s", c.err, "");
		} else {
			uint64_t be = ((uint64_t)htonl((uint32_t)size) << 32) | htonl((uint32_t)(size >> 32));
			if (!setattr4(rpc, &fh, FATTR4_SIZE, (char *)&be, 8, &c))
				return fail("COMPOUND SETATTR: %s%s", c.err, "");
		}
		printf("status %d\n", c.status);
		return 0;
	}
	if (strcmp(cmd, "write") == 0 && i + 1 < argc) {
		uint64_t off = strtoull(argv[i], NULL, 0);
		int stable = atoi(argv[i + 1]);
		long n = i + 2 < argc ? strtol(argv[i + 2], NULL, 0) : 1;
		static char buf[4096];
		const u_int len = version == 3 ? sizeof(buf) : 512;
		unsigned char first[8];
		bool same = true;
		for (long k = 0; k < n; k++) {
			memset(buf, 'a' + (int)(k % 26), sizeof(buf));
			memset(&c, 0, sizeof(c));
			if (version == 3) {
				WRITE3args a;
				memset(&a, 0, sizeof(a));
				a.file.data.data_len = (u_int)fh.len;
				a.file.data.data_val = fh.val;
				a.offset = off + (uint64_t)k * len;
				a.count = len;
				a.stable = (stable_how)stable;
				a.data.data_len = len;
				a.data.data_val = buf;
				if (rpc_nfs3_write_async(rpc, v3_write_cb, &a, &c) != 0 || !wait_call(rpc, &c))
					return fail("WRITE: %s%s", c.err, "");
			} else {
				nfs_argop4 ops[2];
				memset(ops, 0, sizeof(ops));
				putfh(&ops[0], &fh);
				ops[1].argop = OP_WRITE;  /* anonymous stateid: all zero */
				ops[1].nfs_argop4_u.opwrite.offset = off + (uint64_t)k * len;
				ops[1].nfs_argop4_u.opwrite.stable = (stable_how4)stable;
				ops[1].nfs_argop4_u.opwrite.data.data_len = len;
				ops[1].nfs_argop4_u.opwrite.data.data_val = buf;
				if (!compound(rpc, ops, 2, &c))
					return fail("COMPOUND WRITE: %s %s", c.err, rpc_get_error(rpc));
			}
			if (c.status != 0)
				break;
			if (k == 0)
				memcpy(first, c.verf, sizeof(first));
			else if (memcmp(first, c.verf, sizeof(first)) != 0)
				same = false;
		}
		printf("status %d count %u committed %d verf ", c.status, c.count, c.committed);
		print_verf(c.verf);
		printf(" same %d\n", same ? 1 : 0);
		return 0;
	}
	if (strcmp(cmd, "commit") == 0) {
		if (version == 3) {
			COMMIT3args a;
			memset(&a, 0, sizeof(a));
			a.file.data.data_len = (u_int)fh.len;
			a.file.data.data_val = fh.val;
			if (rpc_nfs3_commit_async(rpc, v3_commit_cb, &a, &c) != 0 || !wait_call(rpc, &c))
				return fail("COMMIT: %s%s", c.err, "");
		} else {
			nfs_argop4 ops[2];
			memset(ops, 0, sizeof(ops));
			putfh(&ops[0], &fh);
			ops[1].argop = OP_COMMIT;  /* offset 0, count 0: the whole file */
			if (!compound(rpc, ops, 2, &c))
				return fail("COMPOUND COMMIT: %s%s", c.err, "");
		}
		printf("status %d verf ", c.status);
		print_verf(c.verf);
		printf("\n");
		return 0;
	}
	if (strcmp(cmd, "getacl") == 0 && version == 4) {
		nfs_argop4 ops[2];
		uint32_t mask[1] = {1u << FATTR4_ACL};
		memset(ops, 0, sizeof(ops));
		putfh(&ops[0], &fh);
		ops[1].argop = OP_GETATTR;
		ops[1].nfs_argop4_u.opgetattr.attr_request.bitmap4_len = 1;
		ops[1].nfs_argop4_u.opgetattr.attr_request.bitmap4_val = mask;
		if (!compound(rpc, ops, 2, &c))
			return fail("COMPOUND GETATTR: %s%s", c.err, "");
		printf("status %d\n", c.status);
		if (c.status == 0 && !print_acl(c.attrs, c.attrs_len))
			return fail("GETATTR: a malformed ACL%s%s", "", "");
		return 0;
	}
	if (strcmp(cmd, "setacl") == 0 && version == 4) {
		static char b[16384];
		int len = encode_acl(argv + i, argc - i, b, sizeof(b));
		if (len < 0)
			return fail("setacl: ACEs are TYPE:FLAGS:MASK:WHO%s%s", "", "");
		if (!setattr4(rpc, &fh, FATTR4_ACL, b, (u_int)len, &c))
			return fail("COMPOUND SETATTR: %s%s", c.err, "");
		printf("status %d\n", c.status);
		return 0;
	}
	if (strcmp(cmd, "mkdiracl") == 0 && version == 4 && i < argc) {
		nfs_argop4 ops[2];
		uint32_t mask[1] = {1u << FATTR4_ACL};
		static char b[16384];
		const char *name = argv[i++];
		int len = encode_acl(argv + i, argc - i, b, sizeof(b));
		if (len < 0)
			return fail("mkdiracl: ACEs are TYPE:FLAGS:MASK:WHO%s%s", "", "");
		memset(ops, 0, sizeof(ops));
		putfh(&ops[0], &fh);
		ops[1].argop = OP_CREATE;
		ops[1].nfs_argop4_u.opcreate.objtype.type = NF4DIR;
		ops[1].nfs_argop4_u.opcreate.objname.utf8string_len = (u_int)strlen(name);
		ops[1].nfs_argop4_u.opcreate.objname.utf8string_val = (char *)name;
		ops[1].nfs_argop4_u.opcreate.createattrs.attrmask.bitmap4_len = 1;
		ops[1].nfs_argop4_u.opcreate.createattrs.attrmask.bitmap4_val = mask;
		ops[1].nfs_argop4_u.opcreate.createattrs.attr_vals.attrlist4_len = (u_int)len;
		ops[1].nfs_argop4_u.opcreate.createattrs.attr_vals.attrlist4_val = b;
		if (!compound(rpc, ops, 2, &c))
			return fail("COMPOUND CREATE: %s%s", c.err, "");
		printf("status %d\n", c.status);
		return 0;
	}
	return fail("unknown command %s%s", cmd, "");
}
