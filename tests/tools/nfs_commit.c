/* nasgw-nfs-commit: small writes each made durable with a COMMIT, over NFSv3
 * (libnfs), for the controller pair's benchmark (bench/pair_bench.py
 * --writes commit): what a database or a mail server asks of NFS.
 *
 *   nasgw-nfs-commit --url nfs://SERVER/EXPORT --prefix NAME [--clients N]
 *                    [--seconds S] [--bytes N] [--file-kib N]
 *
 * Every client (a thread with its own NFS connection) creates its own file
 * EXPORT/NAME-<i> of --file-kib KiB (written once, untimed, and committed),
 * then, for --seconds, writes --bytes at a random aligned offset (an
 * UNSTABLE WRITE: the file is opened without O_SYNC) and sends a COMMIT
 * (fsync), one after the other. Afterwards it reads every file back and
 * checks the bytes each offset got last, then removes it.
 *
 * Prints one JSON object on stdout: rounds (write + COMMIT), the span in
 * seconds, rounds per second, and latency p50/p99/max in microseconds of
 * the WRITE, of the COMMIT and of the two together. Exit 0 when every
 * request succeeded and every byte read back as written; otherwise 1, with
 * "error: ..." lines on stderr. Exit 2 on a usage error.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nfsc/libnfs.h>

#define MAX_CLIENTS 64
#define MAX_SAMPLES (1 << 20)

struct client {
	int idx;
	pthread_t thread;
	uint64_t rounds;
	int64_t *write_us, *commit_us, *both_us;
	int64_t t_start, t_end;
	int failed;
};

static const char *g_url, *g_prefix;
static int g_clients = 1;
static double g_seconds = 5;
static size_t g_bytes = 8192;
static size_t g_file_kib = 1024;
static pthread_barrier_t g_barrier;

static int64_t now_us(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The byte a round writes: its client, its round and its offset in it. */
static unsigned char fill(int client, uint64_t round, size_t i) {
	return (unsigned char)(client * 131 + round * 7 + i);
}

static void *run(void *arg) {
	struct client *c = arg;
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *u = NULL;
	struct nfsfh *fh = NULL;
	char path[512];
	size_t slots = g_file_kib * 1024 / g_bytes;
	uint64_t *last = calloc(slots, sizeof *last); /* round+1 of the last write at each slot */
	unsigned char *buf = malloc(g_bytes > 65536 ? g_bytes : 65536);
	unsigned int seed = 0x5eed + c->idx;
	bool waited = false;
	if (nfs == NULL || last == NULL || buf == NULL) {
		fprintf(stderr, "error: client %d: out of memory\n", c->idx);
		goto fail;
	}
	u = nfs_parse_url_dir(nfs, g_url);
	if (u == NULL || nfs_mount(nfs, u->server, u->path) != 0) {
		fprintf(stderr, "error: client %d: mount %s: %s\n", c->idx, g_url, nfs_get_error(nfs));
		goto fail;
	}
	snprintf(path, sizeof path, "/%s-%d", g_prefix, c->idx);
	if (nfs_creat(nfs, path, 0644, &fh) != 0) {
		fprintf(stderr, "error: client %d: create %s: %s\n", c->idx, path, nfs_get_error(nfs));
		goto fail;
	}
	memset(buf, 0, 65536);
	for (size_t off = 0; off < g_file_kib * 1024; off += 65536) {
		if (nfs_pwrite(nfs, fh, off, 65536, (char *)buf) != 65536) {
			fprintf(stderr, "error: client %d: lay out: %s\n", c->idx, nfs_get_error(nfs));
			goto fail;
		}
	}
	if (nfs_fsync(nfs, fh) != 0) {
		fprintf(stderr, "error: client %d: commit the layout: %s\n", c->idx, nfs_get_error(nfs));
		goto fail;
	}
	pthread_barrier_wait(&g_barrier);
	waited = true;
	c->t_start = now_us();
	const int64_t end = c->t_start + (int64_t)(g_seconds * 1e6);
	while (now_us() < end && c->rounds < MAX_SAMPLES) {
		const size_t slot = (size_t)rand_r(&seed) % slots;
		for (size_t i = 0; i < g_bytes; i++) buf[i] = fill(c->idx, c->rounds, i);
		const int64_t t0 = now_us();
		if (nfs_pwrite(nfs, fh, slot * g_bytes, g_bytes, (char *)buf) != (int)g_bytes) {
			fprintf(stderr, "error: client %d: write: %s\n", c->idx, nfs_get_error(nfs));
			goto fail;
		}
		const int64_t t1 = now_us();
		if (nfs_fsync(nfs, fh) != 0) {
			fprintf(stderr, "error: client %d: commit: %s\n", c->idx, nfs_get_error(nfs));
			goto fail;
		}
		const int64_t t2 = now_us();
		c->write_us[c->rounds] = t1 - t0;
		c->commit_us[c->rounds] = t2 - t1;
		c->both_us[c->rounds] = t2 - t0;
		last[slot] = ++c->rounds;
	}
	c->t_end = now_us();
	/* Every slot holds what its last round wrote (zeros if none did). */
	for (size_t slot = 0; slot < slots; slot++) {
		if (nfs_pread(nfs, fh, slot * g_bytes, g_bytes, (char *)buf) != (int)g_bytes) {
			fprintf(stderr, "error: client %d: read back: %s\n", c->idx, nfs_get_error(nfs));
			goto fail;
		}
		for (size_t i = 0; i < g_bytes; i++) {
			const unsigned char want = last[slot] ? fill(c->idx, last[slot] - 1, i) : 0;
			if (buf[i] != want) {
				fprintf(stderr, "error: client %d: offset %zu reads %u, its last write put %u\n", c->idx,
				        slot * g_bytes + i, buf[i], want);
				goto fail;
			}
		}
	}
	nfs_close(nfs, fh);
	fh = NULL;
	if (nfs_unlink(nfs, path) != 0) fprintf(stderr, "error: client %d: remove %s: %s\n", c->idx, path, nfs_get_error(nfs));
	goto done;
fail:
	c->failed = 1;
	if (!waited) pthread_barrier_wait(&g_barrier);
done:
	if (fh != NULL) nfs_close(nfs, fh);
	if (u != NULL) nfs_destroy_url(u);
	if (nfs != NULL) nfs_destroy_context(nfs);
	free(last);
	free(buf);
	return NULL;
}

static int cmp64(const void *a, const void *b) {
	const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* Percentiles of every client's samples of one kind. */
static void print_lat(const char *name, struct client *cs, size_t which, uint64_t total, bool comma) {
	int64_t *all = malloc((total ? total : 1) * sizeof *all);
	uint64_t n = 0;
	for (int i = 0; i < g_clients; i++) {
		int64_t *v = which == 0 ? cs[i].write_us : which == 1 ? cs[i].commit_us : cs[i].both_us;
		memcpy(all + n, v, cs[i].rounds * sizeof *all);
		n += cs[i].rounds;
	}
	qsort(all, n, sizeof *all, cmp64);
	const int64_t p50 = n ? all[n / 2] : 0, p99 = n ? all[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : 0;
	printf("  \"%s_us\": {\"p50\": %" PRId64 ", \"p99\": %" PRId64 ", \"max\": %" PRId64 "}%s\n", name, p50, p99,
	       n ? all[n - 1] : 0, comma ? "," : "");
	free(all);
}

static int usage(void) {
	fprintf(stderr,
	        "usage: nasgw-nfs-commit --url nfs://SERVER/EXPORT --prefix NAME [--clients N] [--seconds S] "
	        "[--bytes N] [--file-kib N]\n");
	return 2;
}

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL) return usage();
		if (!strcmp(a, "--url")) g_url = v;
		else if (!strcmp(a, "--prefix")) g_prefix = v;
		else if (!strcmp(a, "--clients")) g_clients = atoi(v);
		else if (!strcmp(a, "--seconds")) g_seconds = atof(v);
		else if (!strcmp(a, "--bytes")) g_bytes = strtoul(v, NULL, 10);
		else if (!strcmp(a, "--file-kib")) g_file_kib = strtoul(v, NULL, 10);
		else return usage();
	}
	if (g_url == NULL || g_prefix == NULL || strchr(g_prefix, '/') || g_clients < 1 || g_clients > MAX_CLIENTS ||
	    g_seconds <= 0 || g_bytes == 0 || g_bytes > 65536 || g_file_kib * 1024 < g_bytes || 65536 % g_bytes != 0 ||
	    g_file_kib % 64 != 0)
		return usage();
	struct client cs[MAX_CLIENTS];
	memset(cs, 0, sizeof cs);
	pthread_barrier_init(&g_barrier, NULL, (unsigned)g_clients);
	for (int i = 0; i < g_clients; i++) {
		cs[i].idx = i;
		cs[i].write_us = malloc(MAX_SAMPLES * sizeof(int64_t));
		cs[i].commit_us = malloc(MAX_SAMPLES * sizeof(int64_t));
		cs[i].both_us = malloc(MAX_SAMPLES * sizeof(int64_t));
		if (!cs[i].write_us || !cs[i].commit_us || !cs[i].both_us) {
			fprintf(stderr, "error: out of memory\n");
			return 1;
		}
	}
	for (int i = 0; i < g_clients; i++) pthread_create(&cs[i].thread, NULL, run, &cs[i]);
	uint64_t rounds = 0;
	int failed = 0;
	int64_t t0 = INT64_MAX, t1 = 0;
	for (int i = 0; i < g_clients; i++) {
		pthread_join(cs[i].thread, NULL);
		rounds += cs[i].rounds;
		failed |= cs[i].failed;
		if (cs[i].t_start && cs[i].t_start < t0) t0 = cs[i].t_start;
		if (cs[i].t_end > t1) t1 = cs[i].t_end;
	}
	const double span = t1 > t0 ? (double)(t1 - t0) / 1e6 : 0;
	printf("{\n  \"clients\": %d,\n  \"bytes\": %zu,\n  \"rounds\": %" PRIu64 ",\n  \"span_s\": %.3f,\n", g_clients,
	       g_bytes, rounds, span);
	printf("  \"rounds_per_s\": %.1f,\n", span > 0 ? rounds / span : 0.0);
	print_lat("write", cs, 0, rounds, true);
	print_lat("commit", cs, 1, rounds, true);
	print_lat("round", cs, 2, rounds, true);
	printf("  \"ok\": %s\n}\n", failed ? "false" : "true");
	for (int i = 0; i < g_clients; i++) {
		free(cs[i].write_us);
		free(cs[i].commit_us);
		free(cs[i].both_us);
	}
	return failed ? 1 : 0;
}
