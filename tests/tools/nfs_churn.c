/* nasgw-nfs-churn: an NFSv3 client (libnfs's raw RPCs) that keeps changing
 * files through one server address and knows exactly what the server
 * acknowledged, for the controller pair's kill rounds
 * (tests/integration/cluster_lab.py nfskill): what must survive a takeover.
 *
 *   nasgw-nfs-churn --url nfs://SERVER/EXPORT --dir NAME --stop FILE
 *                   [--progress FILE] [--max-s S]
 *
 * In directory NAME of the export (made if missing), step k:
 *   - CREATE f<k> (GUARDED);
 *   - three UNSTABLE WRITEs of 8 KiB and a COMMIT; when a WRITE's verifier
 *     differs from the COMMIT's, the server lost them (a new owner): all
 *     three are sent again and committed again, as the Linux client does;
 *   - a FILE_SYNC WRITE of the last 8 KiB;
 *   - every 3rd step, RENAME f<k-1> to r<k-1>;
 *   - every 5th, REMOVE r<k-4> (when it was renamed);
 *   - every 7th, MKDIR d<k>.
 * Only then is step k acknowledged (--progress holds the count).
 *
 * A call that gets no answer in 3 s, or whose connection breaks, is sent
 * again on a new connection until answered; one answered JUKEBOX is sent
 * again 0.2 s later. A resent CREATE or MKDIR
 * answered EXIST, a resent REMOVE or RENAME answered NOENT, was done by the
 * attempt before (one client, names of its own).
 *
 * Until the stop file exists (or --max-s). Then, on a new connection, every
 * acknowledged change is checked: each file's 32 KiB (READ), each name
 * renamed away or removed gone (LOOKUP), each directory there.
 *
 * Prints one JSON object: steps, files, dirs, removed, reconnects, resent
 * (calls sent more than once), jukebox (JUKEBOX answers), rewrites
 * (COMMITs whose verifier differed), gaps (seconds between two
 * answered calls, when over 1 s), lost (what the check found missing or
 * wrong, at most 20). Exit 0 when nothing was lost, 1 otherwise, 2 on a
 * usage error or when the server could not be reached at all.
 */
#define _GNU_SOURCE
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

/* nfs_get_fh() returns this; libnfs declares it only in its private header. */
struct nfs_fh {
	int len;
	char *val;
};

enum { CHUNK = 8192, CHUNKS = 4, FILE_BYTES = CHUNK * CHUNKS, CALL_TIMEOUT_MS = 3000 };
enum { FH_MAX = 64, MAX_ENTRIES = 1 << 16, MAX_GAPS = 256, MAX_LOST = 20 };

struct fh {
	int len;
	char val[FH_MAX];
};

/* One call's outcome, filled by its callback. */
struct call {
	bool done, ok;
	int status;
	int committed;
	char verf[NFS3_WRITEVERFSIZE];
	struct fh fh;		/* CREATE, MKDIR, LOOKUP: the object's handle */
	char *read_buf;		/* READ: where the data goes, at most read_max bytes */
	uint32_t read_max, read_count;
	int eof;
};

/* What the client knows the server acknowledged: each name there (with
 * its bytes), gone (renamed away, removed), or unknown (the change was in
 * flight when the client stopped, or its data never acknowledged). */
enum kind { FILE_KIND, DIR_KIND };
enum state { THERE, GONE, UNKNOWN };
struct entry {
	char name[24];
	enum kind kind;
	enum state state;
	uint32_t step;		/* the file's bytes are fill(step, offset) */
	struct fh fh;
};

static struct entry entries[MAX_ENTRIES];
static int n_entries;
static const char *g_url, *g_dir, *g_stop, *g_progress;
static double g_max_s = 300;
static struct nfs_context *g_nfs;
static struct nfs_url *g_u;
static struct fh root_fh, dir_fh;
static int64_t last_ok_ms, deadline_ms;
static double gaps[MAX_GAPS];
static int n_gaps;
static uint64_t reconnects, rewrites, resent, jukebox;
static int last_attempts;	/* the last call(): how many times it was sent */

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static bool stop_asked(void)
{
	return access(g_stop, F_OK) == 0 || now_ms() > deadline_ms;
}

static unsigned char fill(uint32_t step, uint32_t off)
{
	uint32_t x = step * 2654435761u ^ off * 40503u;
	x ^= x >> 13;
	return (unsigned char)(x * 0x5bd1e995u >> 24);
}

static void copy_fh(struct fh *dst, const nfs_fh3 *src)
{
	dst->len = src->data.data_len <= FH_MAX ? (int)src->data.data_len : 0;
	memcpy(dst->val, src->data.data_val, (size_t)dst->len);
}

static nfs_fh3 as_fh3(struct fh *f)
{
	nfs_fh3 r = {.data = {.data_len = (u_int)f->len, .data_val = f->val}};
	return r;
}

static bool transport_ok(struct call *c, int status)
{
	c->done = true;
	c->ok = status == RPC_STATUS_SUCCESS;
	return c->ok;
}

static void status_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	/* Every NFSv3 result starts with its nfsstat3. */
	struct call *c = priv;
	if (transport_ok(c, status))
		c->status = *(nfsstat3 *)data;
}

/* CREATE and MKDIR answer alike: a status and, when OK, maybe the handle. */
static void made(struct call *c, nfsstat3 status, const post_op_fh3 *obj)
{
	c->status = status;
	if (status == NFS3_OK && obj->handle_follows)
		copy_fh(&c->fh, &obj->post_op_fh3_u.handle);
}

static void create_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	CREATE3res *r = data;
	if (transport_ok(priv, status))
		made(priv, r->status, &r->CREATE3res_u.resok.obj);
}

static void mkdir_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	MKDIR3res *r = data;
	if (transport_ok(priv, status))
		made(priv, r->status, &r->MKDIR3res_u.resok.obj);
}

static void lookup_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status))
		return;
	LOOKUP3res *r = data;
	c->status = r->status;
	if (r->status == NFS3_OK)
		copy_fh(&c->fh, &r->LOOKUP3res_u.resok.object);
}

static void write_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status))
		return;
	WRITE3res *r = data;
	c->status = r->status;
	if (r->status == NFS3_OK) {
		c->committed = r->WRITE3res_u.resok.committed;
		memcpy(c->verf, r->WRITE3res_u.resok.verf, sizeof(c->verf));
	}
}

static void commit_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status))
		return;
	COMMIT3res *r = data;
	c->status = r->status;
	if (r->status == NFS3_OK)
		memcpy(c->verf, r->COMMIT3res_u.resok.verf, sizeof(c->verf));
}

static void read_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (!transport_ok(c, status))
		return;
	READ3res *r = data;
	c->status = r->status;
	if (r->status == NFS3_OK) {
		c->eof = r->READ3res_u.resok.eof;
		c->read_count = r->READ3res_u.resok.data.data_len;
		if (c->read_count > c->read_max) {	/* more than asked for: refused */
			c->read_count = 0;
			c->status = NFS3ERR_IO;
			return;
		}
		memcpy(c->read_buf, r->READ3res_u.resok.data.data_val, c->read_count);
	}
}

static void disconnect(void)
{
	if (g_nfs) {
		nfs_destroy_url(g_u);
		nfs_destroy_context(g_nfs);
	}
	g_nfs = NULL;
	g_u = NULL;
}

/* A new connection (MOUNT) to the URL's server; false when the stop file
 * appeared first. The first one also finds the export's root handle. */
static bool connect_server(void)
{
	while (!stop_asked()) {
		g_nfs = nfs_init_context();
		g_u = g_nfs ? nfs_parse_url_dir(g_nfs, g_url) : NULL;
		if (g_u == NULL) {
			fprintf(stderr, "error: URL %s: %s\n", g_url, g_nfs ? nfs_get_error(g_nfs) : "no memory");
			exit(2);
		}
		nfs_set_timeout(g_nfs, CALL_TIMEOUT_MS);
		nfs_set_autoreconnect(g_nfs, 0);	/* this program resends, on a new connection */
		if (nfs_mount(g_nfs, g_u->server, g_u->path) == 0) {
			if (root_fh.len > 0)
				return true;
			struct nfsfh *f = NULL;
			if (nfs_open(g_nfs, "/", O_RDONLY, &f) == 0) {
				const struct nfs_fh *w = nfs_get_fh(f);
				root_fh.len = w->len <= FH_MAX ? w->len : 0;
				memcpy(root_fh.val, w->val, (size_t)root_fh.len);
				nfs_close(g_nfs, f);
				if (root_fh.len > 0)
					return true;
			}
		}
		disconnect();
		reconnects++;
		usleep(100 * 1000);
	}
	return false;
}

static bool wait_call(struct call *c)
{
	struct rpc_context *rpc = nfs_get_rpc_context(g_nfs);
	int64_t deadline = now_ms() + CALL_TIMEOUT_MS;

	while (!c->done) {
		if (now_ms() > deadline)
			return false;
		struct pollfd p = {.fd = rpc_get_fd(rpc), .events = (short)rpc_which_events(rpc)};
		int n = poll(&p, 1, 100);
		if (n < 0 && errno != EINTR)
			return false;
		if (rpc_service(rpc, n > 0 ? p.revents : 0) < 0)
			return false;
	}
	return c->ok;
}

enum op { OP_CREATE, OP_MKDIR, OP_LOOKUP, OP_WRITE, OP_COMMIT, OP_RENAME, OP_REMOVE, OP_READ };

/* Sends `op` until the server answers it (on new connections as needed):
 * true with c filled in, false when the stop file appeared first. */
static bool call(enum op op, void *args, struct call *c)
{
	char *keep = c->read_buf;
	uint32_t keep_max = c->read_max;
	for (int attempt = 0;; attempt++) {
		if (g_nfs == NULL && !connect_server())
			return false;
		memset(c, 0, sizeof(*c));
		c->read_buf = keep;
		c->read_max = keep_max;
		struct rpc_context *rpc = nfs_get_rpc_context(g_nfs);
		int rc = -1;
		switch (op) {
		case OP_CREATE: rc = rpc_nfs3_create_async(rpc, create_cb, args, c); break;
		case OP_MKDIR: rc = rpc_nfs3_mkdir_async(rpc, mkdir_cb, args, c); break;
		case OP_LOOKUP: rc = rpc_nfs3_lookup_async(rpc, lookup_cb, args, c); break;
		case OP_WRITE: rc = rpc_nfs3_write_async(rpc, write_cb, args, c); break;
		case OP_COMMIT: rc = rpc_nfs3_commit_async(rpc, commit_cb, args, c); break;
		case OP_RENAME: rc = rpc_nfs3_rename_async(rpc, status_cb, args, c); break;
		case OP_REMOVE: rc = rpc_nfs3_remove_async(rpc, status_cb, args, c); break;
		case OP_READ: rc = rpc_nfs3_read_async(rpc, read_cb, args, c); break;
		}
		if (rc == 0 && wait_call(c) && c->status == NFS3ERR_JUKEBOX) {
			/* "Try again later" (nasgw's FSAL says so while nasgwd
			 * moves, and for a call whose outcome a reconnect left
			 * unknown): sent again, as an attempt of its own. */
			jukebox++;
			usleep(200 * 1000);
			continue;
		}
		if (c->done && c->ok) {
			int64_t now = now_ms();
			if (now - last_ok_ms > 1000 && n_gaps < MAX_GAPS)
				gaps[n_gaps++] = (double)(now - last_ok_ms) / 1000.0;
			last_ok_ms = now;
			last_attempts = attempt + 1;
			if (attempt > 0)
				resent++;
			return true;
		}
		disconnect();
		reconnects++;
		if (stop_asked())
			return false;
		usleep(100 * 1000);
	}
}

static diropargs3 dirop(struct fh *dir, char *name)
{
	diropargs3 d = {.dir = as_fh3(dir), .name = name};
	return d;
}

/* CREATE or MKDIR of `name` in the directory, done once whatever the
 * resends: its handle in *out. 0; -1 when stopped; else the status it
 * failed with. `may_exist`: EXIST is fine even on the first attempt. */
static int make(enum kind kind, struct fh *dir, char *name, struct fh *out, bool may_exist)
{
	struct call c = {0};
	bool ok;
	if (kind == FILE_KIND) {
		CREATE3args a;
		memset(&a, 0, sizeof(a));
		a.where = dirop(dir, name);
		a.how.mode = GUARDED;
		a.how.createhow3_u.obj_attributes.mode.set_it = 1;
		a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
		ok = call(OP_CREATE, &a, &c);
	} else {
		MKDIR3args a;
		memset(&a, 0, sizeof(a));
		a.where = dirop(dir, name);
		a.attributes.mode.set_it = 1;
		a.attributes.mode.set_mode3_u.mode = 0755;
		ok = call(OP_MKDIR, &a, &c);
	}
	if (!ok)
		return -1;
	if (c.status == NFS3_OK && c.fh.len > 0) {
		*out = c.fh;
		return 0;
	}
	/* EXIST on a resend: the attempt before made it (a name of this client's). */
	if (c.status != NFS3_OK && !(c.status == NFS3ERR_EXIST && (last_attempts > 1 || may_exist)))
		return c.status;
	LOOKUP3args l = {.what = dirop(dir, name)};
	if (!call(OP_LOOKUP, &l, &c))
		return -1;
	if (c.status != NFS3_OK)
		return c.status;
	*out = c.fh;
	return 0;
}

/* REMOVE or RENAME: 0; -1 when stopped; else the status. NOENT on a resend:
 * the attempt before did it. */
static int name_op(enum op op, void *args)
{
	struct call c = {0};
	if (!call(op, args, &c))
		return -1;
	if (c.status == NFS3ERR_NOENT && last_attempts > 1)
		return 0;
	return c.status;
}

static int write_chunk(struct fh *f, uint32_t step, int chunk, stable_how how, struct call *c)
{
	char buf[CHUNK];
	for (uint32_t i = 0; i < CHUNK; i++)
		buf[i] = (char)fill(step, (uint32_t)chunk * CHUNK + i);
	WRITE3args a;
	memset(&a, 0, sizeof(a));
	a.file = as_fh3(f);
	a.offset = (uint64_t)chunk * CHUNK;
	a.count = CHUNK;
	a.stable = how;
	a.data.data_len = CHUNK;
	a.data.data_val = buf;
	if (!call(OP_WRITE, &a, c))
		return -1;
	return c->status;
}

static void progress(int steps)
{
	if (!g_progress)
		return;
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", g_progress);
	FILE *p = fopen(tmp, "w");
	if (p) {
		fprintf(p, "%d", steps);
		fclose(p);
		rename(tmp, g_progress);
	}
}

static struct entry *add(enum kind kind, const char *name, uint32_t step, struct fh *fh, enum state state)
{
	if (n_entries >= MAX_ENTRIES) {
		fprintf(stderr, "error: more than %d names\n", MAX_ENTRIES);
		exit(2);
	}
	struct entry *e = &entries[n_entries++];
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->kind = kind;
	e->state = state;
	e->step = step;
	e->fh = *fh;
	return e;
}

static struct entry *find_there(const char *name)
{
	for (int i = n_entries - 1; i >= 0; i--)
		if (entries[i].state == THERE && strcmp(entries[i].name, name) == 0)
			return &entries[i];
	return NULL;
}

static int failed_status(char *what, size_t len, const char *op, const char *name, int st)
{
	snprintf(what, len, "%s %s: status %d", op, name, st);
	return st;
}

/* One step; 0 when it was acknowledged whole, -1 when stopped, else a
 * status the server should never have answered (or -2). */
static int step(uint32_t k, char *what, size_t what_len)
{
	char name[24];
	struct fh f = {0};
	snprintf(name, sizeof(name), "f%u", k);
	int st = make(FILE_KIND, &dir_fh, name, &f, false);
	if (st != 0)
		return st == -1 ? -1 : failed_status(what, what_len, "CREATE", name, st);
	struct entry *e = add(FILE_KIND, name, k, &f, UNKNOWN);	/* until its bytes are acknowledged */
	for (;;) {
		struct call w[CHUNKS - 1], cm;
		for (int i = 0; i < CHUNKS - 1; i++) {
			st = write_chunk(&f, k, i, UNSTABLE, &w[i]);
			if (st != 0)
				return st == -1 ? -1 : failed_status(what, what_len, "WRITE", name, st);
		}
		COMMIT3args a = {.file = as_fh3(&f)};
		if (!call(OP_COMMIT, &a, &cm))
			return -1;
		if (cm.status != NFS3_OK)
			return failed_status(what, what_len, "COMMIT", name, cm.status);
		bool same = true;
		for (int i = 0; i < CHUNKS - 1; i++)
			same = same && memcmp(w[i].verf, cm.verf, sizeof(cm.verf)) == 0;
		if (same)
			break;
		rewrites++;	/* the server lost them: again, as the Linux client does */
	}
	struct call s;
	st = write_chunk(&f, k, CHUNKS - 1, FILE_SYNC, &s);
	if (st != 0)
		return st == -1 ? -1 : failed_status(what, what_len, "FILE_SYNC WRITE", name, st);
	if (s.committed != FILE_SYNC) {
		snprintf(what, what_len, "FILE_SYNC WRITE %s: answered as stability %d", name, s.committed);
		return -2;
	}
	e->state = THERE;
	if (k % 3 == 0 && k > 0) {
		char from[24], to[24];
		snprintf(from, sizeof(from), "f%u", k - 1);
		snprintf(to, sizeof(to), "r%u", k - 1);
		struct entry *old = find_there(from);
		if (old) {
			RENAME3args a = {.from = dirop(&dir_fh, from), .to = dirop(&dir_fh, to)};
			st = name_op(OP_RENAME, &a);
			if (st > 0)
				return failed_status(what, what_len, "RENAME", from, st);
			old->state = st == 0 ? GONE : UNKNOWN;
			add(FILE_KIND, to, old->step, &old->fh, st == 0 ? THERE : UNKNOWN);
			if (st != 0)
				return -1;
		}
	}
	if (k % 5 == 0 && k >= 4) {
		char victim[24];
		snprintf(victim, sizeof(victim), "r%u", k - 4);
		struct entry *v = find_there(victim);
		if (v) {
			REMOVE3args a = {.object = dirop(&dir_fh, victim)};
			st = name_op(OP_REMOVE, &a);
			if (st > 0)
				return failed_status(what, what_len, "REMOVE", victim, st);
			v->state = st == 0 ? GONE : UNKNOWN;
			if (st != 0)
				return -1;
		}
	}
	if (k % 7 == 0) {
		char d[24];
		struct fh dfh = {0};
		snprintf(d, sizeof(d), "d%u", k);
		st = make(DIR_KIND, &dir_fh, d, &dfh, false);
		if (st != 0)
			return st == -1 ? -1 : failed_status(what, what_len, "MKDIR", d, st);
		add(DIR_KIND, d, k, &dfh, THERE);
	}
	return 0;
}

static int n_lost;
static char lost[MAX_LOST][96];

static void lose(const char *name, const char *why)
{
	if (n_lost < MAX_LOST)
		snprintf(lost[n_lost], sizeof(lost[0]), "%s: %s", name, why);
	n_lost++;
}

/* Every acknowledged change, read back on a new connection: each name
 * there with its bytes, each name gone absent. */
static void verify(void)
{
	disconnect();
	deadline_ms = now_ms() + 120000;
	g_stop = "/nonexistent/nasgw-nfs-churn";	/* from now on, resend until answered */
	char buf[FILE_BYTES];
	for (int i = 0; i < n_entries; i++) {
		struct entry *e = &entries[i];
		struct call c = {0};
		if (e->state == UNKNOWN)
			continue;
		LOOKUP3args l = {.what = dirop(&dir_fh, e->name)};
		if (!call(OP_LOOKUP, &l, &c)) {
			lose(e->name, "no answer");
			continue;
		}
		if (e->state == GONE) {
			if (c.status != NFS3ERR_NOENT)
				lose(e->name, "renamed away or removed, and there still");
			continue;
		}
		if (c.status != NFS3_OK) {
			char why[32];
			snprintf(why, sizeof(why), "LOOKUP status %d", c.status);
			lose(e->name, why);
			continue;
		}
		if (e->kind == DIR_KIND)
			continue;
		/* READs until the 32 KiB are in or the server says EOF (a short
		 * READ without EOF is the server's right). */
		uint32_t got = 0;
		bool read_ok = true, eof = false;
		while (got < FILE_BYTES && !eof && read_ok) {
			READ3args r = {.file = as_fh3(&c.fh), .offset = got, .count = FILE_BYTES - got};
			struct call rd = {.read_buf = buf + got, .read_max = FILE_BYTES - got};
			read_ok = call(OP_READ, &r, &rd) && rd.status == NFS3_OK && (rd.read_count > 0 || rd.eof);
			got += rd.read_count;
			eof = rd.eof;
		}
		if (!read_ok) {
			lose(e->name, "READ failed");
			continue;
		}
		if (got != FILE_BYTES) {
			lose(e->name, "short");
			continue;
		}
		for (uint32_t off = 0; off < FILE_BYTES; off++) {
			if ((unsigned char)buf[off] != fill(e->step, off)) {
				char why[48];
				snprintf(why, sizeof(why), "other bytes at %u", off);
				lose(e->name, why);
				break;
			}
		}
	}
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--url") == 0)
			g_url = argv[i + 1];
		else if (strcmp(argv[i], "--dir") == 0)
			g_dir = argv[i + 1];
		else if (strcmp(argv[i], "--stop") == 0)
			g_stop = argv[i + 1];
		else if (strcmp(argv[i], "--progress") == 0)
			g_progress = argv[i + 1];
		else if (strcmp(argv[i], "--max-s") == 0)
			g_max_s = atof(argv[i + 1]);
		else
			g_url = NULL;
	}
	if (!g_url || !g_dir || !g_stop || strlen(g_dir) > 64 || g_max_s <= 0) {
		fprintf(stderr, "usage: nasgw-nfs-churn --url nfs://SERVER/EXPORT --dir NAME --stop FILE "
				"[--progress FILE] [--max-s S]\n");
		return 2;
	}
	deadline_ms = now_ms() + (int64_t)(g_max_s * 1000);
	if (!connect_server()) {
		fprintf(stderr, "error: %s: no server before the stop\n", g_url);
		return 2;
	}
	last_ok_ms = now_ms();
	char dir[72];
	snprintf(dir, sizeof(dir), "%s", g_dir);
	int st = make(DIR_KIND, &root_fh, dir, &dir_fh, true);
	if (st != 0) {
		fprintf(stderr, "error: MKDIR %s: status %d\n", g_dir, st);
		return 2;
	}
	uint32_t k = 0;
	char what[128] = "";
	int failed = 0;
	while (!stop_asked()) {
		st = step(k, what, sizeof(what));
		if (st == -1)
			break;
		if (st != 0) {	/* an answer no server should give: stop and say so */
			failed = 1;
			break;
		}
		k++;
		progress((int)k);
	}
	int files = 0, dirs = 0, removed = 0;
	for (int i = 0; i < n_entries; i++) {
		files += entries[i].state == THERE && entries[i].kind == FILE_KIND;
		dirs += entries[i].state == THERE && entries[i].kind == DIR_KIND;
		removed += entries[i].state == GONE && entries[i].name[0] == 'r';
	}
	verify();
	printf("{\"steps\": %u, \"files\": %d, \"dirs\": %d, \"removed\": %d, \"reconnects\": %" PRIu64
	       ", \"resent\": %" PRIu64 ", \"jukebox\": %" PRIu64 ", \"rewrites\": %" PRIu64
	       ", \"error\": \"%s\", \"gaps\": [",
	       k, files, dirs, removed, reconnects, resent, jukebox, rewrites, failed ? what : "");
	for (int i = 0; i < n_gaps; i++)
		printf("%s%.3f", i ? ", " : "", gaps[i]);
	printf("], \"lost_count\": %d, \"lost\": [", n_lost);
	for (int i = 0; i < n_lost && i < MAX_LOST; i++)
		printf("%s\"%s\"", i ? ", " : "", lost[i]);
	printf("]}\n");
	disconnect();
	return n_lost == 0 && !failed ? 0 : 1;
}
