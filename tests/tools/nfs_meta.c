/* nasgw-nfs-meta: a metadata workload over NFSv3 (libnfs's async raw RPC),
 * for the NFS benchmark (bench/nfs_bench.py, workload "meta").
 *
 *   nasgw-nfs-meta --url nfs://SERVER/EXPORT --dir NAME [--clients N]
 *                  [--files N] [--depth N] [--timeout-s S]
 *
 * Every client (a thread with its own NFS connection) makes its own tree
 * under EXPORT/NAME: c<i>/d<a>/d<b>, three wide and two deep (9 leaves, the
 * shape of the benchmark's file set), then runs three timed phases over
 * --files empty files spread over its leaves, with --depth requests in
 * flight:
 *
 *   create   CREATE (GUARDED, mode 0644) of each file
 *   stat     LOOKUP of each file by name in its directory (what a client
 *            without cached entries sends for stat(); the reply carries the
 *            attributes)
 *   remove   REMOVE of each file
 *
 * All clients start a phase together (a barrier) and the next phase starts
 * when every client has finished the previous one. Directories are looked
 * up by handle, never by path: one request is one operation. Afterwards the
 * tree is removed (RMDIR, untimed).
 *
 * Prints one JSON object on stdout: per phase the operations, the span from
 * the first client's start to the last one's end (seconds, and as Unix
 * times), operations per second over that span, and latency p50/p99/max in
 * microseconds over every operation. Exit 0 when every request succeeded;
 * otherwise 1, with "error: ..." lines on stderr (and still the JSON, with
 * the errors counted). Exit 2 on a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
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

#define WIDTH 3
#define LEVELS 2
#define LEAVES (WIDTH * WIDTH)
#define MAX_DEPTH 64
#define MAX_CLIENTS 256

enum { PH_CREATE, PH_STAT, PH_REMOVE, NPHASES };
static const char *phase_names[NPHASES] = {"create", "stat", "remove"};

struct fh {
	u_int len;
	char val[NFS3_FHSIZE];
};

struct client;

struct slot {
	struct client *c;
	int64_t t0;
	bool busy;
};

struct client {
	int idx;
	struct nfs_context *nfs;
	struct rpc_context *rpc;
	struct fh root;   /* EXPORT/NAME */
	struct fh leaf[LEAVES];
	struct fh mid[WIDTH];
	struct fh top;
	/* the running phase */
	int phase;
	long next, done, inflight;
	struct slot slots[MAX_DEPTH];
	uint32_t *lat[NPHASES];  /* µs, one per operation */
	long nlat[NPHASES];
	long errors[NPHASES];
	int64_t start_ns[NPHASES], end_ns[NPHASES];
	int64_t start_rt[NPHASES], end_rt[NPHASES];  /* CLOCK_REALTIME, µs */
	char err[512];
	bool failed;  /* could not set up or lost its connection */
	/* a synchronous call's result (setup, teardown) */
	bool sync_done;
	int sync_status;
	struct fh sync_fh;
	bool sync_has_fh;
};

static const char *g_server, *g_export, *g_dir;
static long g_files = 2000;
static int g_depth = 4, g_clients = 1, g_timeout_s = 120;
static pthread_barrier_t g_barrier;
static struct fh g_base;

static int64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t real_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void set_err(struct client *c, const char *fmt, const char *a, long n)
{
	if (c->err[0] == 0)
		snprintf(c->err, sizeof(c->err), fmt, a, n);
}

/* Services the connection until *flag or the deadline; false on a lost
 * connection or timeout (c->err says which). */
static bool pump(struct client *c, bool (*finished)(struct client *), int64_t deadline_ns)
{
	while (!finished(c)) {
		if (mono_ns() > deadline_ns) {
			set_err(c, "client %s%ld: no answer within the timeout", "", c->idx);
			return false;
		}
		struct pollfd p = {.fd = rpc_get_fd(c->rpc), .events = (short)rpc_which_events(c->rpc)};
		int n = poll(&p, 1, 100);
		if (n < 0 && errno != EINTR) {
			set_err(c, "poll: %s%ld", strerror(errno), 0);
			return false;
		}
		if (rpc_service(c->rpc, n > 0 ? p.revents : 0) < 0) {
			set_err(c, "connection: %s (client %ld)", rpc_get_error(c->rpc), c->idx);
			return false;
		}
	}
	return true;
}

static bool sync_finished(struct client *c)
{
	return c->sync_done;
}

static void copy_fh(struct fh *dst, const nfs_fh3 *src)
{
	dst->len = src->data.data_len <= NFS3_FHSIZE ? src->data.data_len : NFS3_FHSIZE;
	memcpy(dst->val, src->data.data_val, dst->len);
}

static nfs_fh3 wire_fh(const struct fh *f)
{
	nfs_fh3 w = {.data = {.data_len = f->len, .data_val = (char *)f->val}};
	return w;
}

/* ---- setup and teardown: one request at a time ---- */

static void lookup_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct client *c = priv;
	c->sync_done = true;
	if (status != RPC_STATUS_SUCCESS) {
		c->sync_status = -1;
		return;
	}
	LOOKUP3res *r = data;
	c->sync_status = r->status;
	if (r->status == NFS3_OK) {
		copy_fh(&c->sync_fh, &r->LOOKUP3res_u.resok.object);
		c->sync_has_fh = true;
	}
}

static void mkdir_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct client *c = priv;
	c->sync_done = true;
	if (status != RPC_STATUS_SUCCESS) {
		c->sync_status = -1;
		return;
	}
	MKDIR3res *r = data;
	c->sync_status = r->status;
	if (r->status == NFS3_OK && r->MKDIR3res_u.resok.obj.handle_follows) {
		copy_fh(&c->sync_fh, &r->MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
		c->sync_has_fh = true;
	}
}

static void status_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct client *c = priv;
	c->sync_done = true;
	/* RMDIR3res and friends start with their nfsstat3 */
	c->sync_status = status == RPC_STATUS_SUCCESS ? (int)*(nfsstat3 *)data : -1;
}

static int64_t deadline(void)
{
	return mono_ns() + (int64_t)g_timeout_s * 1000000000;
}

/* LOOKUP name in dir; 0 = found (*out), else the NFS status (or -1). */
static int do_lookup(struct client *c, const struct fh *dir, const char *name, struct fh *out)
{
	LOOKUP3args a = {.what = {.dir = wire_fh(dir), .name = (char *)name}};
	c->sync_done = false;
	c->sync_has_fh = false;
	if (rpc_nfs3_lookup_async(c->rpc, lookup_cb, &a, c) != 0 || !pump(c, sync_finished, deadline()))
		return -1;
	if (c->sync_status == NFS3_OK)
		*out = c->sync_fh;
	return c->sync_status;
}

/* MKDIR name in dir (an existing one is fine); its handle in *out. */
static bool do_mkdir(struct client *c, const struct fh *dir, const char *name, struct fh *out)
{
	MKDIR3args a;
	memset(&a, 0, sizeof(a));
	a.where.dir = wire_fh(dir);
	a.where.name = (char *)name;
	a.attributes.mode.set_it = 1;
	a.attributes.mode.set_mode3_u.mode = 0755;
	c->sync_done = false;
	c->sync_has_fh = false;
	if (rpc_nfs3_mkdir_async(c->rpc, mkdir_cb, &a, c) != 0 || !pump(c, sync_finished, deadline())) {
		set_err(c, "MKDIR %s: %s", name, c->idx);
		return false;
	}
	if (c->sync_status == NFS3_OK && c->sync_has_fh) {
		*out = c->sync_fh;
		return true;
	}
	if (c->sync_status != NFS3_OK && c->sync_status != NFS3ERR_EXIST) {
		set_err(c, "MKDIR %s: status %ld", name, c->sync_status);
		return false;
	}
	/* made but no handle in the reply, or already there */
	int st = do_lookup(c, dir, name, out);
	if (st != 0) {
		set_err(c, "LOOKUP %s after MKDIR: status %ld", name, st);
		return false;
	}
	return true;
}

static void do_rmdir(struct client *c, const struct fh *dir, const char *name)
{
	RMDIR3args a = {.object = {.dir = wire_fh(dir), .name = (char *)name}};
	c->sync_done = false;
	if (rpc_nfs3_rmdir_async(c->rpc, status_cb, &a, c) != 0 || !pump(c, sync_finished, deadline()))
		return;
	if (c->sync_status != NFS3_OK && c->sync_status != NFS3ERR_NOENT)
		set_err(c, "RMDIR %s: status %ld", name, c->sync_status);
}

static bool connect_client(struct client *c)
{
	c->nfs = nfs_init_context();
	if (c->nfs == NULL) {
		set_err(c, "nfs_init_context failed%s (client %ld)", "", c->idx);
		return false;
	}
	nfs_set_timeout(c->nfs, g_timeout_s * 1000);
	if (nfs_mount(c->nfs, g_server, g_export) != 0) {
		set_err(c, "mount: %s (client %ld)", nfs_get_error(c->nfs), c->idx);
		return false;
	}
	c->rpc = nfs_get_rpc_context(c->nfs);
	return true;
}

/* ---- the timed phases ---- */

static void leaf_name(long i, char *buf, size_t n)
{
	snprintf(buf, n, "f%07ld", i);
}

static void op_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	struct client *c = s->c;
	int64_t t1 = mono_ns();
	int st;
	s->busy = false;
	c->inflight--;
	c->done++;
	if (status != RPC_STATUS_SUCCESS) {
		c->errors[c->phase]++;
		set_err(c, "%s: RPC failed (client %ld)", phase_names[c->phase], c->idx);
		return;
	}
	st = (int)*(nfsstat3 *)data;  /* every *3res starts with its status */
	if (st != NFS3_OK) {
		c->errors[c->phase]++;
		char what[64];
		snprintf(what, sizeof(what), "%s (client %d)", phase_names[c->phase], c->idx);
		set_err(c, "%s: NFS status %ld", what, st);
		return;
	}
	uint64_t us = (uint64_t)(t1 - s->t0) / 1000;
	c->lat[c->phase][c->nlat[c->phase]++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	c->end_ns[c->phase] = t1;
	c->end_rt[c->phase] = real_us();
}

static bool issue(struct client *c, long i)
{
	struct slot *s = NULL;
	for (int k = 0; k < g_depth; k++) {
		if (!c->slots[k].busy) {
			s = &c->slots[k];
			break;
		}
	}
	if (s == NULL)
		return false;
	char name[32];
	leaf_name(i, name, sizeof(name));
	diropargs3 where = {.dir = wire_fh(&c->leaf[i % LEAVES]), .name = name};
	int rc;
	s->c = c;
	s->busy = true;
	s->t0 = mono_ns();
	switch (c->phase) {
	case PH_CREATE: {
		CREATE3args a;
		memset(&a, 0, sizeof(a));
		a.where = where;
		a.how.mode = GUARDED;
		a.how.createhow3_u.obj_attributes.mode.set_it = 1;
		a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
		rc = rpc_nfs3_create_async(c->rpc, op_cb, &a, s);
		break;
	}
	case PH_STAT: {
		LOOKUP3args a = {.what = where};
		rc = rpc_nfs3_lookup_async(c->rpc, op_cb, &a, s);
		break;
	}
	default: {
		REMOVE3args a = {.object = where};
		rc = rpc_nfs3_remove_async(c->rpc, op_cb, &a, s);
		break;
	}
	}
	if (rc != 0) {
		s->busy = false;
		set_err(c, "%s: cannot send (client %ld)", phase_names[c->phase], c->idx);
		return false;
	}
	c->inflight++;
	c->next++;
	return true;
}

static bool phase_finished(struct client *c)
{
	/* Keep the pipe full; done when every operation has answered, or at
	 * the first error once what is in flight has drained. */
	bool stop = c->err[0] != 0;
	while (!stop && c->next < g_files && c->inflight < g_depth) {
		if (!issue(c, c->next)) {
			stop = true;
			c->failed = true;
		}
	}
	return c->inflight == 0 && (stop || c->done >= g_files);
}

static void run_phase(struct client *c, int ph)
{
	c->phase = ph;
	c->next = c->done = c->inflight = 0;
	c->lat[ph] = calloc((size_t)g_files, sizeof(uint32_t));
	c->nlat[ph] = 0;
	pthread_barrier_wait(&g_barrier);
	c->start_ns[ph] = c->end_ns[ph] = mono_ns();
	c->start_rt[ph] = c->end_rt[ph] = real_us();
	if (c->failed || c->lat[ph] == NULL)
		return;
	if (!pump(c, phase_finished, deadline()))
		c->failed = true;
	if (c->err[0])
		c->failed = true;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	char name[32];
	bool ok = connect_client(c);
	if (ok) {
		c->root = g_base;
		snprintf(name, sizeof(name), "c%d", c->idx);
		ok = do_mkdir(c, &c->root, name, &c->top);
		for (int a = 0; ok && a < WIDTH; a++) {
			snprintf(name, sizeof(name), "d%d", a + 1);
			ok = do_mkdir(c, &c->top, name, &c->mid[a]);
			for (int b = 0; ok && b < WIDTH; b++) {
				snprintf(name, sizeof(name), "d%d", b + 1);
				ok = do_mkdir(c, &c->mid[a], name, &c->leaf[a * WIDTH + b]);
			}
		}
	}
	if (!ok)
		c->failed = true;
	for (int ph = 0; ph < NPHASES; ph++)
		run_phase(c, ph);
	/* The tree goes (after a failed phase, files may be left in it: then so is it). */
	if (!c->failed) {
		for (int a = 0; a < WIDTH; a++) {
			for (int b = 0; b < WIDTH; b++) {
				snprintf(name, sizeof(name), "d%d", b + 1);
				do_rmdir(c, &c->mid[a], name);
			}
			snprintf(name, sizeof(name), "d%d", a + 1);
			do_rmdir(c, &c->top, name);
		}
		snprintf(name, sizeof(name), "c%d", c->idx);
		do_rmdir(c, &c->root, name);
		if (c->err[0])
			c->failed = true;
	}
	if (c->nfs)
		nfs_destroy_context(c->nfs);
	c->nfs = NULL;
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(const uint32_t *v, long n, double p)
{
	if (n == 0)
		return 0;
	long k = (long)(p * (double)(n - 1) + 0.5);
	return v[k];
}

static int usage(void)
{
	fprintf(stderr, "usage: nasgw-nfs-meta --url nfs://SERVER/EXPORT --dir NAME [--clients N] [--files N] "
			"[--depth N] [--timeout-s S]\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *url = NULL;
	for (int i = 1; i < argc; i += 2) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL)
			return usage();
		if (strcmp(argv[i], "--url") == 0)
			url = v;
		else if (strcmp(argv[i], "--dir") == 0)
			g_dir = v;
		else if (strcmp(argv[i], "--clients") == 0)
			g_clients = atoi(v);
		else if (strcmp(argv[i], "--files") == 0)
			g_files = atol(v);
		else if (strcmp(argv[i], "--depth") == 0)
			g_depth = atoi(v);
		else if (strcmp(argv[i], "--timeout-s") == 0)
			g_timeout_s = atoi(v);
		else
			return usage();
	}
	if (url == NULL || g_dir == NULL || strchr(g_dir, '/') || g_clients < 1 || g_clients > MAX_CLIENTS ||
	    g_files < 1 || g_depth < 1 || g_depth > MAX_DEPTH || g_timeout_s < 1)
		return usage();

	/* The export, and NAME in it, once. */
	struct client setup;
	memset(&setup, 0, sizeof(setup));
	struct nfs_context *probe = nfs_init_context();
	struct nfs_url *u = probe ? nfs_parse_url_dir(probe, url) : NULL;
	if (u == NULL) {
		fprintf(stderr, "error: URL %s: %s\n", url, probe ? nfs_get_error(probe) : "no memory");
		return 2;
	}
	g_server = u->server;
	g_export = u->path;
	bool ok = connect_client(&setup);
	struct nfsfh *rootf = NULL;
	if (ok && nfs_open(setup.nfs, "/", O_RDONLY, &rootf) != 0) {
		set_err(&setup, "open of the export's root: %s%ld", nfs_get_error(setup.nfs), 0);
		ok = false;
	}
	struct fh export_root;
	if (ok) {
		const struct nfs_fh *w = nfs_get_fh(rootf);
		export_root.len = (u_int)w->len;
		memcpy(export_root.val, w->val, export_root.len);
		ok = do_mkdir(&setup, &export_root, g_dir, &g_base);
	}
	if (!ok) {
		fprintf(stderr, "error: %s\n", setup.err);
		return 1;
	}

	struct client *cs = calloc((size_t)g_clients, sizeof(*cs));
	pthread_t *th = calloc((size_t)g_clients, sizeof(*th));
	pthread_barrier_init(&g_barrier, NULL, (unsigned)g_clients);
	for (int i = 0; i < g_clients; i++) {
		cs[i].idx = i + 1;
		if (pthread_create(&th[i], NULL, client_main, &cs[i]) != 0) {
			fprintf(stderr, "error: pthread_create failed\n");
			return 1;  /* the barrier would never open: nothing to clean up safely */
		}
	}
	for (int i = 0; i < g_clients; i++)
		pthread_join(th[i], NULL);

	int rc = 0;
	for (int i = 0; i < g_clients; i++) {
		if (cs[i].err[0]) {
			fprintf(stderr, "error: %s\n", cs[i].err);
			rc = 1;
		}
	}
	if (rc == 0) {
		nfsstat3 st;
		RMDIR3args a = {.object = {.dir = wire_fh(&export_root), .name = (char *)g_dir}};
		setup.sync_done = false;
		if (rpc_nfs3_rmdir_async(setup.rpc, status_cb, &a, &setup) == 0 && pump(&setup, sync_finished, deadline())) {
			st = (nfsstat3)setup.sync_status;
			if (st != NFS3_OK)
				fprintf(stderr, "note: RMDIR %s: status %d\n", g_dir, (int)st);
		}
	}
	nfs_close(setup.nfs, rootf);
	nfs_destroy_context(setup.nfs);

	printf("{\"clients\": %d, \"files\": %ld, \"depth\": %d, \"phases\": {", g_clients, g_files, g_depth);
	for (int ph = 0; ph < NPHASES; ph++) {
		long n = 0, errs = 0;
		int64_t s0 = INT64_MAX, s1 = 0, r0 = INT64_MAX, r1 = 0;
		for (int i = 0; i < g_clients; i++) {
			n += cs[i].nlat[ph];
			errs += cs[i].errors[ph];
			if (cs[i].start_ns[ph] && cs[i].start_ns[ph] < s0)
				s0 = cs[i].start_ns[ph];
			if (cs[i].end_ns[ph] > s1)
				s1 = cs[i].end_ns[ph];
			if (cs[i].start_rt[ph] && cs[i].start_rt[ph] < r0)
				r0 = cs[i].start_rt[ph];
			if (cs[i].end_rt[ph] > r1)
				r1 = cs[i].end_rt[ph];
		}
		uint32_t *all = calloc((size_t)(n ? n : 1), sizeof(uint32_t));
		long k = 0;
		for (int i = 0; i < g_clients; i++) {
			if (cs[i].nlat[ph])
				memcpy(all + k, cs[i].lat[ph], (size_t)cs[i].nlat[ph] * sizeof(uint32_t));
			k += cs[i].nlat[ph];
			free(cs[i].lat[ph]);
		}
		qsort(all, (size_t)n, sizeof(uint32_t), cmp_u32);
		double secs = s1 > s0 ? (double)(s1 - s0) / 1e9 : 0;
		printf("%s\"%s\": {\"ops\": %ld, \"errors\": %ld, \"seconds\": %.6f, \"ops_per_s\": %.1f, "
		       "\"p50_us\": %.0f, \"p99_us\": %.0f, \"max_us\": %.0f, \"start_unix\": %.6f, \"end_unix\": %.6f}",
		       ph ? ", " : "", phase_names[ph], n, errs, secs, secs > 0 ? (double)n / secs : 0.0,
		       pct(all, n, 0.50), pct(all, n, 0.99), n ? (double)all[n - 1] : 0.0,
		       r0 == INT64_MAX ? 0.0 : (double)r0 / 1e6, (double)r1 / 1e6);
		free(all);
	}
	printf("}}\n");
	nfs_destroy_url(u);
	nfs_destroy_context(probe);
	free(cs);
	free(th);
	return rc;
}
