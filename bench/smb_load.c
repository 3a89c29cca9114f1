/* nasgw-smb-load: SMB clients for the SMB benchmark (bench/smb_bench.py),
 * over Samba's libsmbclient: one process per client, each with its own SMB
 * connection and its own file, so the server sees N independent clients.
 *
 *   nasgw-smb-load --share //SERVER/SHARE --user USER --password PASS
 *                  --workload randrw|seqread|seqwrite --clients N
 *                  --seconds S --file-mb M [--prefix NAME] [--prepare-only]
 *
 * Each client first makes its file, PREFIX-<i>.dat, M MiB written in 1 MiB
 * pieces (not measured; skipped when the file already has that size), then
 * runs the workload for S seconds:
 *   randrw    8 KiB at random aligned offsets, 70% reads, 30% writes
 *   seqread   256 KiB reads from the start, wrapping at the end
 *   seqwrite  64 KiB writes from the start, wrapping at the end
 * one request at a time (queue depth 1 per client: a client waits for each
 * answer). Every request's latency goes into a histogram (log-spaced
 * buckets, 2% wide), merged across clients at the end.
 *
 * Prints one line of JSON: {"workload", "clients", "seconds", "ops",
 * "bytes", "iops", "mbps", "p50_us", "p99_us", "errors"} and exits 0; a
 * client that fails (connect, open, I/O) makes the run fail: a message on
 * stderr, exit 1. libsmbclient caches nothing: every read and write is a
 * request to the server.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libsmbclient.h>

#define BUCKETS 1200 /* 1.02^1200 us: far beyond any latency here */
#define CLIENTS_MAX 64

struct result {
	uint64_t ops, bytes, errors;
	uint64_t hist[BUCKETS];
};

static const char *g_user, *g_password;

static void auth(const char *srv, const char *shr, char *wg, int wglen, char *un, int unlen, char *pw,
		 int pwlen)
{
	snprintf(un, (size_t)unlen, "%s", g_user);
	snprintf(pw, (size_t)pwlen, "%s", g_password);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int bucket_of(uint64_t us)
{
	if (us < 1)
		return 0;
	int b = (int)(log((double)us) / log(1.02));
	return b >= BUCKETS ? BUCKETS - 1 : b;
}

static uint64_t bucket_us(int b)
{
	return (uint64_t)llround(pow(1.02, b + 0.5));
}

static uint64_t percentile(const struct result *r, double p)
{
	uint64_t total = 0, want, seen = 0;

	for (int b = 0; b < BUCKETS; b++)
		total += r->hist[b];
	if (total == 0)
		return 0;
	want = (uint64_t)ceil(p * (double)total);
	for (int b = 0; b < BUCKETS; b++) {
		seen += r->hist[b];
		if (seen >= want)
			return bucket_us(b);
	}
	return bucket_us(BUCKETS - 1);
}

static int fail(int client, const char *what, const char *url)
{
	fprintf(stderr, "nasgw-smb-load: client %d: %s %s: %s\n", client, what, url, strerror(errno));
	return 1;
}

/* One client; its result goes to fd. */
static int run_client(int client, const char *share, const char *prefix, const char *workload, int seconds,
		      uint64_t file_bytes, bool prepare_only, int fd)
{
	char url[1024];
	struct result *r = calloc(1, sizeof(*r));
	char *buf = malloc(1 << 20);
	SMBCCTX *ctx;
	struct stat st;
	unsigned seed = (unsigned)(client * 7919 + 17);

	if (r == NULL || buf == NULL)
		return 1;
	memset(buf, 'a' + client % 26, 1 << 20);
	snprintf(url, sizeof(url), "smb:%s/%s-%d.dat", share, prefix, client);
	ctx = smbc_new_context();
	if (ctx == NULL)
		return fail(client, "smbc_new_context", "");
	smbc_setFunctionAuthData(ctx, auth);
	smbc_setOptionUseKerberos(ctx, 0);
	smbc_setOptionFallbackAfterKerberos(ctx, 1);
	if (smbc_init_context(ctx) == NULL)
		return fail(client, "smbc_init_context", "");
	smbc_set_context(ctx);

	/* The file: made (or grown) to file_bytes, not measured. */
	if (smbc_stat(url, &st) != 0 || (uint64_t)st.st_size != file_bytes) {
		int wfd = smbc_open(url, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (wfd < 0)
			return fail(client, "create", url);
		for (uint64_t off = 0; off < file_bytes; off += 1 << 20) {
			size_t n = file_bytes - off < (1u << 20) ? (size_t)(file_bytes - off) : 1u << 20;
			if (smbc_write(wfd, buf, n) != (ssize_t)n)
				return fail(client, "write", url);
		}
		if (smbc_close(wfd) != 0)
			return fail(client, "close", url);
	}
	if (prepare_only) {
		if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
			return 1;
		return 0;
	}

	bool rand = strcmp(workload, "randrw") == 0;
	bool seqw = strcmp(workload, "seqwrite") == 0;
	size_t bs = rand ? 8192 : seqw ? 65536 : 262144;
	int rw = seqw ? O_WRONLY : rand ? O_RDWR : O_RDONLY;
	int h = smbc_open(url, rw, 0);
	uint64_t blocks = file_bytes / bs, next = 0;
	uint64_t end = now_ns() + (uint64_t)seconds * 1000000000ull;

	if (h < 0)
		return fail(client, "open", url);
	while (now_ns() < end) {
		bool is_read;
		uint64_t off;
		if (rand) {
			off = ((uint64_t)rand_r(&seed) * 65536u + (uint64_t)rand_r(&seed)) % blocks * bs;
			is_read = rand_r(&seed) % 100 < 70;
		} else {
			off = next * bs;
			next = (next + 1) % blocks;
			is_read = !seqw;
		}
		uint64_t t0 = now_ns();
		ssize_t n;
		if (smbc_lseek(h, (off_t)off, SEEK_SET) < 0)
			return fail(client, "lseek", url);
		n = is_read ? smbc_read(h, buf, bs) : smbc_write(h, buf, bs);
		uint64_t us = (now_ns() - t0) / 1000;
		if (n != (ssize_t)bs) {
			r->errors++;
			return fail(client, is_read ? "read" : "write", url);
		}
		r->ops++;
		r->bytes += bs;
		r->hist[bucket_of(us)]++;
	}
	if (smbc_close(h) != 0)
		return fail(client, "close", url);
	if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
		return 1;
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: nasgw-smb-load --share //SERVER/SHARE --user U --password P\n"
		     "                      --workload randrw|seqread|seqwrite --clients N --seconds S\n"
		     "                      --file-mb M [--prefix NAME] [--prepare-only]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"share", required_argument, NULL, 's'},   {"user", required_argument, NULL, 'u'},
		{"password", required_argument, NULL, 'p'}, {"workload", required_argument, NULL, 'w'},
		{"clients", required_argument, NULL, 'c'}, {"seconds", required_argument, NULL, 't'},
		{"file-mb", required_argument, NULL, 'm'}, {"prefix", required_argument, NULL, 'x'},
		{"prepare-only", no_argument, NULL, 'P'},  {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	const char *share = NULL, *workload = "randrw", *prefix = "load";
	int clients = 1, seconds = 5, file_mb = 64, ch;
	bool prepare_only = false;
	int fds[CLIENTS_MAX];
	pid_t pids[CLIENTS_MAX];

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 's': share = optarg; break;
		case 'u': g_user = optarg; break;
		case 'p': g_password = optarg; break;
		case 'w': workload = optarg; break;
		case 'c': clients = atoi(optarg); break;
		case 't': seconds = atoi(optarg); break;
		case 'm': file_mb = atoi(optarg); break;
		case 'x': prefix = optarg; break;
		case 'P': prepare_only = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (share == NULL || g_user == NULL || g_password == NULL || strncmp(share, "//", 2) != 0 ||
	    clients < 1 || clients > CLIENTS_MAX || seconds < 1 || seconds > 3600 || file_mb < 1 ||
	    file_mb > 65536 ||
	    (strcmp(workload, "randrw") != 0 && strcmp(workload, "seqread") != 0 &&
	     strcmp(workload, "seqwrite") != 0)) {
		usage(stderr);
		fprintf(stderr, "nasgw-smb-load: bad arguments (--share //SERVER/SHARE, --user, --password; "
				"--clients 1..%d, --seconds 1..3600, --file-mb 1..65536)\n",
			CLIENTS_MAX);
		return 2;
	}
	for (int i = 0; i < clients; i++) {
		int p[2];
		if (pipe(p) != 0) {
			perror("pipe");
			return 1;
		}
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("fork");
			return 1;
		}
		if (pids[i] == 0) {
			close(p[0]);
			_exit(run_client(i, share, prefix, workload, seconds, (uint64_t)file_mb << 20, prepare_only,
					 p[1]));
		}
		close(p[1]);
		fds[i] = p[0];
	}
	struct result *total = calloc(1, sizeof(*total)), *one = calloc(1, sizeof(*one));
	int failed = 0;
	for (int i = 0; i < clients; i++) {
		int status;
		size_t got = 0;
		while (got < sizeof(*one)) {
			ssize_t n = read(fds[i], (char *)one + got, sizeof(*one) - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		close(fds[i]);
		waitpid(pids[i], &status, 0);
		if (got != sizeof(*one) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			failed++;
			continue;
		}
		total->ops += one->ops;
		total->bytes += one->bytes;
		total->errors += one->errors;
		for (int b = 0; b < BUCKETS; b++)
			total->hist[b] += one->hist[b];
	}
	free(one);
	if (failed != 0) {
		fprintf(stderr, "nasgw-smb-load: %d of %d clients failed\n", failed, clients);
		free(total);
		return 1;
	}
	double secs = prepare_only ? 1 : seconds;
	printf("{\"workload\": \"%s\", \"clients\": %d, \"seconds\": %d, \"ops\": %" PRIu64 ", \"bytes\": %" PRIu64
	       ", \"iops\": %.1f, \"mbps\": %.2f, \"p50_us\": %" PRIu64 ", \"p99_us\": %" PRIu64
	       ", \"errors\": %" PRIu64 "}\n",
	       workload, clients, seconds, total->ops, total->bytes, (double)total->ops / secs,
	       (double)total->bytes / secs / 1e6, percentile(total, 0.50), percentile(total, 0.99), total->errors);
	free(total);
	return 0;
}
