/* nasgw-nfs-lock: takes or tests one byte-range lock on a file as a real NFS
 * client would (libnfs, userspace), so a test can drive NFS locking from
 * several client namespaces without a kernel NFS client.
 *
 *   nasgw-nfs-lock --url nfs://SERVER/EXPORT/FILE?version=4|3
 *                  --op lock|test --type read|write --start N --len N
 *                  [--hold] [--caller NAME] [--renew-ms N] [--timeout-ms N]
 *
 *   nasgw-nfs-lock --url nfs://SERVER/EXPORT/FILE?version=4
 *                  --op open --access read|write|both --deny none|read|write|both
 *                  [--hold] [--renew-ms N] [--timeout-ms N]
 *
 *   nasgw-nfs-lock --url nfs://SERVER/EXPORT/FILE?version=3
 *                  --op write --start N --data TEXT [--timeout-ms N]
 *   nasgw-nfs-lock --url nfs://SERVER/EXPORT/FILE?version=4
 *                  --op deleg --access read|both [--timeout-ms N]
 *
 * --len 0 means "to the end of the file" (as in fcntl).
 *
 * --op deleg (NFSv4.0) holds a delegation as a kernel client would: a client
 *   identity with a callback address (a listener of its own on the local
 *   address of the NFS connection, served by a thread: CB_NULL and
 *   CB_COMPOUND with CB_RECALL, whose other ops are answered
 *   NFS4ERR_NOTSUPP), an OPEN (and OPEN_CONFIRM), then a second OPEN of the
 *   confirmed owner, which is where a server grants a delegation. Prints
 *   "granted deleg=read|write|none"; then, until stdin reaches EOF, renews
 *   its lease, prints "recalled" when a CB_RECALL comes, and on a line
 *   "return" on stdin sends DELEGRETURN and prints "returned". At EOF it
 *   CLOSEs.
 *
 * --op reclaim (NFSv4.0) holds an OPEN and a LOCK of the range under a
 *   client identity of its own (prints "granted", or "denied"), renewing its
 *   lease every --renew-ms (default 1 s; a renewal that fails is reported on
 *   stderr, not fatal: the server may be restarting). A line "reclaim" on
 *   stdin says the server restarted: it connects again (port 2049), sends
 *   SETCLIENTID with the same id and verifier, an OPEN with CLAIM_PREVIOUS
 *   (NFS4ERR_GRACE and NFS4ERR_DELAY waited out) and a LOCK with reclaim
 *   set, as a client does in the server's grace period, and prints
 *   "reclaimed", or "reclaim refused: OPEN|LOCK NFS4ERR_..." (exit 1). At EOF
 *   it sends LOCKU and CLOSE.
 *   With version=3 (NLM): an NLM4_LOCK of the range, held until stdin
 *   reaches EOF, while the tool answers on UDP port 111 as the client
 *   machine's portmapper and statd. An SM_NOTIFY (the server came back, or
 *   its address moved to another node) prints "notified mon_name=NAME
 *   state=N", then, as a client's lockd does, NLM4_LOCK with reclaim set on
 *   a new connection: "reclaimed", or "reclaim refused: NLM4_..." (exit 1).
 *
 * --op write (NFSv3) writes TEXT at offset --start with one WRITE (FILE_SYNC)
 *   on the file handle libnfs's open found, as a kernel client does it: an
 *   NFS3ERR_JUKEBOX answer (the server is recalling a delegation or, with
 *   nasgw, another head's lease) is retried every 20 ms until
 *   --timeout-ms. (libnfs's own pwrite reports every error as EFAULT.)
 *   Prints "written retries=N" (N: the answers that said wait).
 *
 * --op open (NFSv4.0 only) sends an OPEN with the share_access and
 *   share_deny given (libnfs's own opens always deny nothing) from a client
 *   identity of its own, walking the path from PUTROOTFH with LOOKUPs:
 *   "granted" (then OPEN_CONFIRM; with --hold the open is kept, its lease
 *   renewed with RENEW, until stdin reaches EOF, then CLOSE), or "denied"
 *   for NFS4ERR_SHARE_DENIED.
 *
 * NFSv4.0: libnfs's nfs_open() (OPEN), nfs_fcntl(NFS4_F_SETLK) (LOCK, LOCKU).
 *   libnfs has no LOCKT for a given lock type (nfs_lockf's F_TEST always
 *   tests a write lock) and drops the LOCK4denied it gets back, so --op test,
 *   and the conflicting range printed after a denied lock, come from a LOCKT
 *   sent by a second client identity (its own SETCLIENTID/CONFIRM) on the same
 *   connection.
 * NFSv3: NLM version 4 over TCP, found through the server's portmapper:
 *   NLM4_TEST, NLM4_LOCK (non-blocking), NLM4_UNLOCK with the NFSv3 file
 *   handle of nfs_open(). caller_name is --caller or the local address of the
 *   NLM connection (the client namespaces of a lab share one host name); the
 *   owner handle is "nasgw-nfs-lock:<pid>@<caller>", svid the pid.
 *
 * Prints exactly one line on stdout and exits with its code:
 *   granted                                     0
 *   denied [start=S len=L|eof type=read|write]  1  (the conflicting lock, when
 *                                                   the protocol reports it)
 *   error: <message>                            2
 *
 * --hold (with --op lock): after "granted" the lock is kept until stdin
 * reaches EOF, then released (LOCKU + CLOSE, or NLM4_UNLOCK) and the exit
 * code is 0 (2 and a message on stderr if the release failed). libnfs has no
 * timer of its own: it only talks to the server inside a call, so for v4 the
 * hold loop renews the client's lease itself, with a READ on the open
 * stateid every --renew-ms (default a third of the server's lease_time
 * attribute). NLM locks have no lease. Killed with SIGKILL the tool just
 * dies: a v4 server frees the lock when the lease expires, an NLM server
 * only when the client's statd reports a reboot (SM_NOTIFY).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs4.h>
#include <nfsc/libnfs-raw-nlm.h>
#include <nfsc/libnfs-raw-nfs.h>

/* nfs_get_fh() returns this; libnfs declares it only in its private
 * header (libnfs-private.h, the same in every release). */
struct nfs_fh {
	int len;
	char *val;
};

enum { EXIT_GRANTED = 0, EXIT_DENIED = 1, EXIT_ERROR = 2 };

/* --op deleg: our callback program, and the one callback op we serve. */
#define CB_PROGRAM_ID 0x40000077u
#define CB_RECALL_OP 4

struct options {
	const char *url;
	int version; /* 3 or 4, from the URL's ?version= (libnfs default: 3) */
	bool lock;   /* --op lock (else test) */
	bool write;  /* --type write (else read) */
	uint64_t start;
	uint64_t len; /* 0: to EOF */
	bool hold;
	const char *caller;
	int renew_ms; /* 0: from the server's lease_time */
	int timeout_ms;
	bool open;             /* --op open */
	bool write_data;       /* --op write */
	bool deleg;            /* --op deleg */
	bool reclaim;          /* --op reclaim */
	const char *data;      /* --data */
	uint32_t share_access; /* --access */
	uint32_t share_deny;   /* --deny */
};

struct conflict {
	bool known;
	bool write;
	uint64_t start;
	uint64_t len;
	bool to_eof;
};

/* ---- output ------------------------------------------------------------- */

static void one_line(char *s)
{
	for (char *p = s; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	size_t n = strlen(s);
	while (n > 0 && s[n - 1] == ' ')
		s[--n] = '\0';
}

static int say_error(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	one_line(buf);
	printf("error: %s\n", buf);
	fflush(stdout);
	return EXIT_ERROR;
}

static int say_granted(void)
{
	printf("granted\n");
	fflush(stdout);
	return EXIT_GRANTED;
}

static int say_denied(const struct conflict *c)
{
	if (c != NULL && c->known) {
		if (c->to_eof)
			printf("denied start=%" PRIu64 " len=eof type=%s\n", c->start,
			       c->write ? "write" : "read");
		else
			printf("denied start=%" PRIu64 " len=%" PRIu64 " type=%s\n", c->start,
			       c->len, c->write ? "write" : "read");
	} else {
		printf("denied\n");
	}
	fflush(stdout);
	return EXIT_DENIED;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- raw RPCs: our own event loop on an rpc_context ----------------------- */

struct call {
	bool done;
	bool ok;         /* an RPC reply arrived (status below is meaningful) */
	int status;      /* nfsstat4 or nlmstat4 */
	char err[512];   /* transport error */
	/* results, per call */
	clientid4 clientid;
	verifier4 confirm;
	struct conflict conflict;
	uint32_t lease_time;
	stateid4 stateid; /* OPEN, OPEN_CONFIRM */
	uint32_t rflags;  /* OPEN */
	int deleg;        /* OPEN: the delegation type */
	stateid4 deleg_stateid;
};

static void call_failed(struct call *c, int rpc_status, void *data)
{
	c->done = true;
	c->ok = false;
	if (rpc_status == RPC_STATUS_ERROR && data != NULL)
		snprintf(c->err, sizeof(c->err), "%s", (const char *)data);
	else if (rpc_status == RPC_STATUS_TIMEOUT)
		snprintf(c->err, sizeof(c->err), "RPC timed out");
	else
		snprintf(c->err, sizeof(c->err), "RPC failed (status %d)", rpc_status);
}

/* Services `rpc` until c->done or the deadline; false (c->err set) if the
 * connection broke or the server did not answer in time. */
static bool rpc_wait(struct rpc_context *rpc, struct call *c, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	while (!c->done) {
		int64_t left = deadline - now_ms();
		if (left <= 0) {
			snprintf(c->err, sizeof(c->err), "no answer within %d ms", timeout_ms);
			return false;
		}
		struct pollfd p = {.fd = rpc_get_fd(rpc), .events = (short)rpc_which_events(rpc)};
		int n = poll(&p, 1, left < 100 ? (int)left : 100);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(c->err, sizeof(c->err), "poll: %s", strerror(errno));
			return false;
		}
		if (rpc_service(rpc, n > 0 ? p.revents : 0) < 0) {
			snprintf(c->err, sizeof(c->err), "connection: %s", rpc_get_error(rpc));
			return false;
		}
	}
	return c->ok;
}

static const char *nfsstat4_name(int s)
{
	switch (s) {
	case NFS4_OK: return "NFS4_OK";
	case NFS4ERR_DENIED: return "NFS4ERR_DENIED";
	case NFS4ERR_EXPIRED: return "NFS4ERR_EXPIRED";
	case NFS4ERR_GRACE: return "NFS4ERR_GRACE";
	case NFS4ERR_STALE_CLIENTID: return "NFS4ERR_STALE_CLIENTID";
	case NFS4ERR_STALE: return "NFS4ERR_STALE";
	case NFS4ERR_INVAL: return "NFS4ERR_INVAL";
	case NFS4ERR_ACCESS: return "NFS4ERR_ACCESS";
	case NFS4ERR_CLID_INUSE: return "NFS4ERR_CLID_INUSE";
	case NFS4ERR_NOTSUPP: return "NFS4ERR_NOTSUPP";
	case NFS4ERR_LOCK_RANGE: return "NFS4ERR_LOCK_RANGE";
	case NFS4ERR_SERVERFAULT: return "NFS4ERR_SERVERFAULT";
	case NFS4ERR_SHARE_DENIED: return "NFS4ERR_SHARE_DENIED";
	case NFS4ERR_NO_GRACE: return "NFS4ERR_NO_GRACE";
	case NFS4ERR_RECLAIM_BAD: return "NFS4ERR_RECLAIM_BAD";
	case NFS4ERR_RECLAIM_CONFLICT: return "NFS4ERR_RECLAIM_CONFLICT";
	case NFS4ERR_BAD_SEQID: return "NFS4ERR_BAD_SEQID";
	case NFS4ERR_BAD_STATEID: return "NFS4ERR_BAD_STATEID";
	case NFS4ERR_NOENT: return "NFS4ERR_NOENT";
	case NFS4ERR_DELAY: return "NFS4ERR_DELAY";
	default: return "NFS4ERR_?";
	}
}

/* ---- NFSv4: a second client identity for LOCKT ----------------------------- */

/* A COMPOUND's reply into *c (done, ok, its status); NULL when the call
 * failed (c->err says why). */
static const COMPOUND4res *compound_reply(struct call *c, int status, void *data)
{
	if (status != RPC_STATUS_SUCCESS) {
		call_failed(c, status, data);
		return NULL;
	}
	const COMPOUND4res *res = data;
	c->done = c->ok = true;
	c->status = res->status;
	return res;
}

static const nfs_resop4 *find_op(const COMPOUND4res *res, int op)
{
	for (u_int i = 0; i < res->resarray.resarray_len; i++)
		if ((int)res->resarray.resarray_val[i].resop == op)
			return &res->resarray.resarray_val[i];
	return NULL;
}

static void setclientid_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	const COMPOUND4res *res = compound_reply(c, status, data);
	if (res == NULL)
		return;
	const nfs_resop4 *r = find_op(res, OP_SETCLIENTID);
	if (res->status == NFS4_OK && r != NULL) {
		const SETCLIENTID4resok *ok = &r->nfs_resop4_u.opsetclientid.SETCLIENTID4res_u.resok4;
		c->clientid = ok->clientid;
		memcpy(c->confirm, ok->setclientid_confirm, sizeof(verifier4));
	}
}

static void status_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	compound_reply(priv, status, data);
}

static void lockt_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	const COMPOUND4res *res = compound_reply(c, status, data);
	if (res == NULL)
		return;
	const nfs_resop4 *r = find_op(res, OP_LOCKT);
	if (res->status == NFS4ERR_DENIED && r != NULL) {
		const LOCK4denied *d = &r->nfs_resop4_u.oplockt.LOCKT4res_u.denied;
		c->conflict.known = true;
		c->conflict.start = d->offset;
		c->conflict.len = d->length;
		c->conflict.to_eof = d->length == UINT64_MAX;
		c->conflict.write = d->locktype == WRITE_LT || d->locktype == WRITEW_LT;
	}
}

static void getattr_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	const COMPOUND4res *res = compound_reply(c, status, data);
	if (res == NULL)
		return;
	const nfs_resop4 *r = find_op(res, OP_GETATTR);
	if (res->status == NFS4_OK && r != NULL) {
		const fattr4 *a = &r->nfs_resop4_u.opgetattr.GETATTR4res_u.resok4.obj_attributes;
		if (a->attr_vals.attrlist4_len >= 4) {
			uint32_t v;
			memcpy(&v, a->attr_vals.attrlist4_val, 4);
			c->lease_time = ntohl(v);
		}
	}
}

static bool compound(struct rpc_context *rpc, rpc_cb cb, nfs_argop4 *ops, u_int n, struct call *c,
		     int timeout_ms)
{
	COMPOUND4args args;

	memset(&args, 0, sizeof(args));
	args.argarray.argarray_len = n;
	args.argarray.argarray_val = ops;
	if (rpc_nfs4_compound_async(rpc, cb, &args, c) != 0) {
		snprintf(c->err, sizeof(c->err), "could not send COMPOUND: %s", rpc_get_error(rpc));
		return false;
	}
	return rpc_wait(rpc, c, timeout_ms);
}

static void put_fh(nfs_argop4 *op, const struct nfs_fh *fh)
{
	op->argop = OP_PUTFH;
	op->nfs_argop4_u.opputfh.object.nfs_fh4_len = (u_int)fh->len;
	op->nfs_argop4_u.opputfh.object.nfs_fh4_val = fh->val;
}

/* A client identity of our own (SETCLIENTID, SETCLIENTID_CONFIRM) on the
 * connection; false (message in err) if the server refused it. */
static bool v4_client(struct rpc_context *rpc, const struct options *o, const char *id, const verifier4 verf,
		      const char *cb_addr, clientid4 *clientid, char *err, size_t errlen);

static bool v4_new_client(struct rpc_context *rpc, const struct options *o, const char *tag,
			  const char *cb_addr, clientid4 *clientid, char *err, size_t errlen)
{
	char id[128];
	verifier4 verf;
	uint64_t r = ((uint64_t)getpid() << 32) ^ (uint64_t)now_ms();

	snprintf(id, sizeof(id), "nasgw-nfs-lock %s pid:%d t:%" PRId64, tag, (int)getpid(), now_ms());
	memcpy(verf, &r, sizeof(verf));
	return v4_client(rpc, o, id, verf, cb_addr, clientid, err, errlen);
}

/* The client identity `id` with verifier `verf` (the same pair after a
 * server restart is the same client, which may then reclaim). */
static bool v4_client(struct rpc_context *rpc, const struct options *o, const char *id, const verifier4 verf,
		      const char *cb_addr, clientid4 *clientid, char *err, size_t errlen)
{
	nfs_argop4 op[1];
	struct call c;

	memset(op, 0, sizeof(op));
	memset(&c, 0, sizeof(c));
	op[0].argop = OP_SETCLIENTID;
	SETCLIENTID4args *sc = &op[0].nfs_argop4_u.opsetclientid;
	memcpy(sc->client.verifier, verf, sizeof(verifier4));
	sc->client.id.id_len = strlen(id);
	sc->client.id.id_val = (char *)id;
	sc->callback.cb_program = cb_addr != NULL ? CB_PROGRAM_ID : 0; /* 0: no callbacks */
	sc->callback.cb_location.r_netid = "tcp";
	sc->callback.cb_location.r_addr = cb_addr != NULL ? (char *)cb_addr : "0.0.0.0.0.0";
	sc->callback_ident = 1;
	if (!compound(rpc, setclientid_cb, op, 1, &c, o->timeout_ms) || c.status != NFS4_OK) {
		snprintf(err, errlen, "SETCLIENTID: %s", c.ok ? nfsstat4_name(c.status) : c.err);
		return false;
	}
	*clientid = c.clientid;

	memset(op, 0, sizeof(op));
	op[0].argop = OP_SETCLIENTID_CONFIRM;
	op[0].nfs_argop4_u.opsetclientid_confirm.clientid = *clientid;
	memcpy(op[0].nfs_argop4_u.opsetclientid_confirm.setclientid_confirm, c.confirm, sizeof(verifier4));
	memset(&c, 0, sizeof(c));
	if (!compound(rpc, status_cb, op, 1, &c, o->timeout_ms) || c.status != NFS4_OK) {
		snprintf(err, errlen, "SETCLIENTID_CONFIRM: %s", c.ok ? nfsstat4_name(c.status) : c.err);
		return false;
	}
	return true;
}

/* LOCKT from a client of our own; 0 granted, 1 denied (c->conflict), 2 error
 * (message in err). */
static int v4_lockt(struct rpc_context *rpc, const struct nfs_fh *fh, const struct options *o,
		    const char *tag, struct conflict *conflict, char *err, size_t errlen)
{
	nfs_argop4 op[2];
	struct call c;
	clientid4 clientid;

	if (!v4_new_client(rpc, o, tag, NULL, &clientid, err, errlen))
		return EXIT_ERROR;

	static char owner[] = "nasgw-nfs-lock-lockt";
	memset(op, 0, sizeof(op));
	put_fh(&op[0], fh);
	op[1].argop = OP_LOCKT;
	LOCKT4args *lt = &op[1].nfs_argop4_u.oplockt;
	lt->locktype = o->write ? WRITE_LT : READ_LT;
	lt->offset = o->start;
	lt->length = o->len == 0 ? UINT64_MAX : o->len;
	lt->owner.clientid = clientid;
	lt->owner.owner.owner_len = sizeof(owner) - 1;
	lt->owner.owner.owner_val = owner;
	memset(&c, 0, sizeof(c));
	if (!compound(rpc, lockt_cb, op, 2, &c, o->timeout_ms)) {
		snprintf(err, errlen, "LOCKT: %s", c.err);
		return EXIT_ERROR;
	}
	if (c.status == NFS4_OK)
		return EXIT_GRANTED;
	if (c.status == NFS4ERR_DENIED) {
		*conflict = c.conflict;
		return EXIT_DENIED;
	}
	snprintf(err, errlen, "LOCKT: %s (%d)", nfsstat4_name(c.status), c.status);
	return EXIT_ERROR;
}

/* ---- NFSv4: an OPEN with share_access and share_deny ------------------------ */

static void open_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	const COMPOUND4res *res = compound_reply(c, status, data);
	if (res == NULL)
		return;
	const nfs_resop4 *r = find_op(res, OP_OPEN);
	if (res->status == NFS4_OK && r != NULL) {
		const OPEN4resok *ok = &r->nfs_resop4_u.opopen.OPEN4res_u.resok4;
		c->stateid = ok->stateid;
		c->rflags = ok->rflags;
		c->deleg = ok->delegation.delegation_type;
		if (c->deleg == OPEN_DELEGATE_READ)
			c->deleg_stateid = ok->delegation.open_delegation4_u.read.stateid;
		else if (c->deleg == OPEN_DELEGATE_WRITE)
			c->deleg_stateid = ok->delegation.open_delegation4_u.write.stateid;
	}
	r = find_op(res, OP_OPEN_CONFIRM);
	if (res->status == NFS4_OK && r != NULL)
		c->stateid = r->nfs_resop4_u.opopen_confirm.OPEN_CONFIRM4res_u.resok4.open_stateid;
}

struct v4_open {
	struct rpc_context *rpc;
	clientid4 clientid;
	char owner[64];
	char path[4096]; /* the export's path and the file's, '/'-separated */
	nfs_argop4 lookups[64];
	u_int nlookups; /* PUTROOTFH, LOOKUP... of the file's directory */
	component4 name;
	stateid4 stateid;
	seqid4 seqid; /* the open owner's next seqid */
	char cb_addr[64]; /* --op deleg: our callback listener (universal address) */
	int deleg;        /* the delegation the second OPEN got: OPEN_DELEGATE_* */
	stateid4 deleg_stateid;
};

/* PUTROOTFH and one LOOKUP per component of the directory in `o->path`;
 * o->name is the last component. */
static bool v4_walk(struct v4_open *v, char *err, size_t errlen)
{
	char *save = NULL, *last = NULL;

	v->nlookups = 0;
	v->lookups[v->nlookups++].argop = OP_PUTROOTFH;
	for (char *t = strtok_r(v->path, "/", &save); t != NULL; t = strtok_r(NULL, "/", &save)) {
		if (last != NULL) {
			if (v->nlookups + 4 > sizeof(v->lookups) / sizeof(v->lookups[0])) {
				snprintf(err, errlen, "path too deep");
				return false;
			}
			nfs_argop4 *l = &v->lookups[v->nlookups++];
			l->argop = OP_LOOKUP;
			l->nfs_argop4_u.oplookup.objname.utf8string_len = strlen(last);
			l->nfs_argop4_u.oplookup.objname.utf8string_val = last;
		}
		last = t;
	}
	if (last == NULL) {
		snprintf(err, errlen, "no file name in the URL");
		return false;
	}
	v->name.utf8string_len = strlen(last);
	v->name.utf8string_val = last;
	return true;
}

/* Sends PUTROOTFH, the directory's LOOKUPs, (with `on_file`) a LOOKUP of the
 * file, then `last`; the reply through `cb` into *c. False (err: "WHAT: ...")
 * when it could not be sent or answered; c->status is the caller's. */
static bool v4_path_compound(struct v4_open *v, const struct options *o, bool on_file, const nfs_argop4 *last,
			     rpc_cb cb, struct call *c, const char *what, char *err, size_t errlen)
{
	nfs_argop4 op[70];
	u_int n = v->nlookups;

	memset(op, 0, sizeof(op));
	memcpy(op, v->lookups, n * sizeof(op[0]));
	if (on_file) {
		op[n].argop = OP_LOOKUP;
		op[n].nfs_argop4_u.oplookup.objname = v->name;
		n++;
	}
	op[n++] = *last;
	if (!on_file)
		op[n++].argop = OP_GETFH;
	memset(c, 0, sizeof(*c));
	if (!compound(v->rpc, cb, op, n, c, o->timeout_ms)) {
		snprintf(err, errlen, "%s: %s", what, c->err);
		return false;
	}
	return true;
}

/* The same, for an op that must succeed. */
static bool v4_path_op(struct v4_open *v, const struct options *o, const nfs_argop4 *last, rpc_cb cb,
		       struct call *c, const char *what, char *err, size_t errlen)
{
	if (!v4_path_compound(v, o, true, last, cb, c, what, err, errlen))
		return false;
	if (c->status != NFS4_OK) {
		snprintf(err, errlen, "%s: %s (%d)", what, nfsstat4_name(c->status), c->status);
		return false;
	}
	return true;
}

/* OPEN of the file by our open owner, with the options' access and deny. */
static bool v4_send_open(struct v4_open *v, const struct options *o, struct call *c, const char *what, char *err,
			 size_t errlen)
{
	nfs_argop4 op;
	OPEN4args *a = &op.nfs_argop4_u.opopen;

	memset(&op, 0, sizeof(op));
	op.argop = OP_OPEN;
	a->seqid = v->seqid;
	a->share_access = o->share_access;
	a->share_deny = o->share_deny;
	a->owner.clientid = v->clientid;
	a->owner.owner.owner_len = strlen(v->owner);
	a->owner.owner.owner_val = v->owner;
	a->openhow.opentype = OPEN4_NOCREATE;
	a->claim.claim = CLAIM_NULL;
	a->claim.open_claim4_u.file = v->name;
	return v4_path_compound(v, o, false, &op, open_cb, c, what, err, errlen);
}

/* 0 granted (v->stateid confirmed), 1 denied (NFS4ERR_SHARE_DENIED), 2 error. */
static int v4_open_share(struct v4_open *v, const struct options *o, char *err, size_t errlen)
{
	nfs_argop4 op;
	struct call c;

	if (!v4_new_client(v->rpc, o, "open", v->cb_addr[0] ? v->cb_addr : NULL, &v->clientid, err, errlen))
		return EXIT_ERROR;
	/* NFS4ERR_DELAY (the server recalls a delegation, or with nasgw
	 * another head's lease): again, as a kernel client does, with a new
	 * open owner (a DELAY consumed the owner's seqid). */
	for (int attempt = 0;; attempt++) {
		snprintf(v->owner, sizeof(v->owner), "nasgw-nfs-lock-open:%d:%d", (int)getpid(), attempt);
		v->seqid = 0;
		if (!v4_send_open(v, o, &c, "OPEN", err, errlen))
			return EXIT_ERROR;
		if (c.status != NFS4ERR_DELAY || (int64_t)attempt * 20 > o->timeout_ms)
			break;
		usleep(20000);
	}
	if (c.status == NFS4ERR_SHARE_DENIED)
		return EXIT_DENIED;
	if (c.status != NFS4_OK) {
		snprintf(err, errlen, "OPEN: %s (%d)", nfsstat4_name(c.status), c.status);
		return EXIT_ERROR;
	}
	v->seqid++;
	v->stateid = c.stateid;
	if (c.rflags & OPEN4_RESULT_CONFIRM) {
		memset(&op, 0, sizeof(op));
		op.argop = OP_OPEN_CONFIRM;
		op.nfs_argop4_u.opopen_confirm.open_stateid = v->stateid;
		op.nfs_argop4_u.opopen_confirm.seqid = v->seqid;
		if (!v4_path_op(v, o, &op, open_cb, &c, "OPEN_CONFIRM", err, errlen))
			return EXIT_ERROR;
		v->seqid++;
		v->stateid = c.stateid;
	}
	if (v->cb_addr[0]) {
		/* A server grants a delegation to a confirmed owner's OPEN. */
		if (!v4_send_open(v, o, &c, "second OPEN", err, errlen))
			return EXIT_ERROR;
		if (c.status != NFS4_OK) {
			snprintf(err, errlen, "second OPEN: %s (%d)", nfsstat4_name(c.status), c.status);
			return EXIT_ERROR;
		}
		v->seqid++;
		v->stateid = c.stateid;
		v->deleg = c.deleg;
		v->deleg_stateid = c.deleg_stateid;
	}
	return EXIT_GRANTED;
}

static bool v4_close(struct v4_open *v, const struct options *o, char *err, size_t errlen)
{
	nfs_argop4 op;
	struct call c;

	memset(&op, 0, sizeof(op));
	op.argop = OP_CLOSE;
	op.nfs_argop4_u.opclose.seqid = v->seqid;
	op.nfs_argop4_u.opclose.open_stateid = v->stateid;
	return v4_path_op(v, o, &op, status_cb, &c, "CLOSE", err, errlen);
}

/* ---- NFSv4.0 callbacks: a listener for the server's CB_NULL and CB_RECALL -- */

struct cb_server {
	int listen_fd;
	int notify[2]; /* the thread writes one byte per CB_RECALL */
};

static bool read_full(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return false;
		}
		got += (size_t)r;
	}
	return true;
}

struct xdr_in {
	const uint8_t *p, *end;
	bool ok;
};

static uint32_t xin_u32(struct xdr_in *x)
{
	uint32_t v;
	if (x->end - x->p < 4) {
		x->ok = false;
		return 0;
	}
	memcpy(&v, x->p, 4);
	x->p += 4;
	return ntohl(v);
}

static const uint8_t *xin_opaque(struct xdr_in *x, uint32_t *len)
{
	*len = xin_u32(x);
	uint32_t padded = (*len + 3) & ~3u;
	if (!x->ok || (uint32_t)(x->end - x->p) < padded) {
		x->ok = false;
		return NULL;
	}
	const uint8_t *at = x->p;
	x->p += padded;
	return at;
}

static void xout_u32(uint8_t *buf, size_t *at, uint32_t v)
{
	v = htonl(v);
	memcpy(buf + *at, &v, 4);
	*at += 4;
}

struct rpc_call_hdr {
	uint32_t xid, prog, vers, proc;
};

/* A CALL's header, its credentials and verifier skipped: false if the
 * message is not an ONC RPC version 2 call. */
static bool xin_call(struct xdr_in *x, struct rpc_call_hdr *h)
{
	uint32_t l;
	h->xid = xin_u32(x);
	uint32_t mtype = xin_u32(x), rpcvers = xin_u32(x);
	h->prog = xin_u32(x);
	h->vers = xin_u32(x);
	h->proc = xin_u32(x);
	(void)xin_u32(x); /* cred flavor */
	(void)xin_opaque(x, &l);
	(void)xin_u32(x); /* verf flavor */
	(void)xin_opaque(x, &l);
	return x->ok && mtype == 0 && rpcvers == 2;
}

/* A REPLY's header up to its accept_stat: MSG_ACCEPTED, an AUTH_NONE
 * verifier. */
static void xout_accepted(uint8_t *out, size_t *at, uint32_t xid)
{
	xout_u32(out, at, xid);
	xout_u32(out, at, 1); /* REPLY */
	xout_u32(out, at, 0); /* MSG_ACCEPTED */
	xout_u32(out, at, 0); /* verf: AUTH_NONE */
	xout_u32(out, at, 0);
}

/* One RPC call on `fd`: answered; false when the connection ended. */
static bool cb_serve_one(struct cb_server *s, int fd)
{
	uint32_t mark;
	if (!read_full(fd, &mark, 4))
		return false;
	mark = ntohl(mark);
	uint32_t len = mark & 0x7fffffffu;
	if (!(mark & 0x80000000u) || len > 65536)
		return false; /* one fragment, small: all a server sends here */
	uint8_t in[65536], out[1024];
	if (!read_full(fd, in, len))
		return false;
	struct xdr_in x = {in, in + len, true};
	struct rpc_call_hdr h;
	uint32_t l;
	if (!xin_call(&x, &h))
		return false;
	const uint32_t prog = h.prog, vers = h.vers, proc = h.proc;
	size_t at = 4;
	xout_accepted(out, &at, h.xid);
	if (prog != CB_PROGRAM_ID || vers != 1 || proc > 1) {
		xout_u32(out, &at, prog != CB_PROGRAM_ID ? 1 : proc > 1 ? 3 : 2); /* PROG_UNAVAIL, PROC_UNAVAIL, PROG_MISMATCH */
		if (prog == CB_PROGRAM_ID && vers != 1) {
			xout_u32(out, &at, 1);
			xout_u32(out, &at, 1);
		}
	} else {
		xout_u32(out, &at, 0); /* SUCCESS */
		if (proc == 1) {
			/* CB_COMPOUND4args: tag, minorversion, callback_ident, ops */
			uint32_t taglen;
			const uint8_t *tag = xin_opaque(&x, &taglen);
			(void)xin_u32(&x);
			(void)xin_u32(&x);
			uint32_t nops = xin_u32(&x);
			if (!x.ok || taglen > 64 || nops > 8)
				return false;
			size_t status_at = at;
			xout_u32(out, &at, 0); /* status, set below */
			xout_u32(out, &at, taglen);
			memcpy(out + at, tag, taglen);
			memset(out + at + taglen, 0, ((taglen + 3) & ~3u) - taglen);
			at += (taglen + 3) & ~3u;
			xout_u32(out, &at, nops);
			uint32_t status = 0;
			for (uint32_t i = 0; i < nops && status == 0; i++) {
				uint32_t op = xin_u32(&x);
				if (op == CB_RECALL_OP) {
					x.p += 16; /* stateid */
					(void)xin_u32(&x); /* truncate */
					(void)xin_opaque(&x, &l); /* fh */
					if (!x.ok)
						return false;
					char one = 'r';
					if (write(s->notify[1], &one, 1) != 1) {
						/* the main thread reads them: never full */
					}
				} else {
					status = NFS4ERR_NOTSUPP;
				}
				xout_u32(out, &at, op);
				xout_u32(out, &at, status);
				if (status != 0) {
					/* the results end at the first failure */
					size_t n_at = status_at + 8 + ((taglen + 3) & ~3u);
					size_t tmp = n_at;
					xout_u32(out, &tmp, i + 1);
				}
			}
			size_t tmp = status_at;
			xout_u32(out, &tmp, status);
		}
	}
	size_t tmp = 0;
	xout_u32(out, &tmp, 0x80000000u | (uint32_t)(at - 4));
	for (size_t sent = 0; sent < at;) {
		ssize_t w = write(fd, out + sent, at - sent);
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return false;
		}
		sent += (size_t)w;
	}
	return true;
}

static void *cb_thread(void *arg)
{
	struct cb_server *s = arg;
	for (;;) {
		int fd = accept(s->listen_fd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		while (cb_serve_one(s, fd)) {
		}
		close(fd);
	}
}

/* Listens on the NFS connection's local address; *addr gets the
 * universal address ("a.b.c.d.p1.p2") for SETCLIENTID. */
static bool cb_start(struct cb_server *s, int nfs_fd, char *addr, size_t addrlen, char *err, size_t errlen)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	pthread_t t;

	if (getsockname(nfs_fd, (struct sockaddr *)&sin, &sl) != 0 || sin.sin_family != AF_INET) {
		snprintf(err, errlen, "callbacks need an IPv4 connection");
		return false;
	}
	sin.sin_port = 0;
	s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
	    listen(s->listen_fd, 4) != 0 || getsockname(s->listen_fd, (struct sockaddr *)&sin, &sl) != 0 ||
	    pipe2(s->notify, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "callback listener: %s", strerror(errno));
		return false;
	}
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
	unsigned port = ntohs(sin.sin_port);
	snprintf(addr, addrlen, "%s.%u.%u", ip, port >> 8, port & 0xff);
	if (pthread_create(&t, NULL, cb_thread, s) != 0) {
		snprintf(err, errlen, "pthread_create failed");
		return false;
	}
	pthread_detach(t);
	return true;
}

static bool v4_delegreturn(struct v4_open *v, const struct options *o, char *err, size_t errlen)
{
	nfs_argop4 op;
	struct call c;

	memset(&op, 0, sizeof(op));
	op.argop = OP_DELEGRETURN;
	op.nfs_argop4_u.opdelegreturn.deleg_stateid = v->deleg_stateid;
	return v4_path_op(v, o, &op, status_cb, &c, "DELEGRETURN", err, errlen);
}

/* Keeps the open until EOF on stdin, renewing the client's lease. */
static bool v4_hold_open(struct v4_open *v, const struct options *o, int renew_ms, int recall_fd, char *err,
			 size_t errlen)
{
	for (;;) {
		struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN}, {.fd = recall_fd, .events = POLLIN}};
		int r = poll(p, recall_fd >= 0 ? 2 : 1, renew_ms);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "poll: %s", strerror(errno));
			return false;
		}
		if (r > 0 && recall_fd >= 0 && (p[1].revents & POLLIN)) {
			char b;
			if (read(recall_fd, &b, 1) == 1) {
				printf("recalled\n");
				fflush(stdout);
			}
			continue;
		}
		if (r > 0) {
			char buf[256];
			ssize_t got = read(STDIN_FILENO, buf, sizeof(buf) - 1);
			if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
				return true;
			if (got > 0 && recall_fd >= 0 && strncmp(buf, "return", 6) == 0) {
				if (!v4_delegreturn(v, o, err, errlen))
					return false;
				printf("returned\n");
				fflush(stdout);
			}
			continue;
		}
		nfs_argop4 op[1];
		struct call c;
		memset(op, 0, sizeof(op));
		memset(&c, 0, sizeof(c));
		op[0].argop = OP_RENEW;
		op[0].nfs_argop4_u.oprenew.clientid = v->clientid;
		if (!compound(v->rpc, status_cb, op, 1, &c, o->timeout_ms) || c.status != NFS4_OK) {
			snprintf(err, errlen, "RENEW: %s", c.ok ? nfsstat4_name(c.status) : c.err);
			return false;
		}
	}
}

/* The server's lease in seconds (0 if it would not say). */
static uint32_t v4_lease_time(struct rpc_context *rpc, const struct nfs_fh *fh, int timeout_ms)
{
	static uint32_t mask[1] = {1u << FATTR4_LEASE_TIME};
	nfs_argop4 op[2];
	struct call c;

	memset(op, 0, sizeof(op));
	memset(&c, 0, sizeof(c));
	put_fh(&op[0], fh);
	op[1].argop = OP_GETATTR;
	op[1].nfs_argop4_u.opgetattr.attr_request.bitmap4_len = 1;
	op[1].nfs_argop4_u.opgetattr.attr_request.bitmap4_val = mask;
	if (!compound(rpc, getattr_cb, op, 2, &c, timeout_ms) || c.status != NFS4_OK)
		return 0;
	return c.lease_time;
}

/* ---- NFSv4.0: a lock held across a server restart, and reclaimed ----------- */

static void connect_cb(struct rpc_context *rpc, int status, void *data, void *priv);

static void lock_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	const COMPOUND4res *res = compound_reply(c, status, data);
	if (res == NULL)
		return;
	const nfs_resop4 *r = find_op(res, OP_LOCK);
	if (res->status == NFS4_OK && r != NULL)
		c->stateid = r->nfs_resop4_u.oplock.LOCK4res_u.resok4.lock_stateid;
	r = find_op(res, OP_LOCKU);
	if (res->status == NFS4_OK && r != NULL)
		c->stateid = r->nfs_resop4_u.oplocku.LOCKU4res_u.lock_stateid;
}

struct v4_lock {
	char owner[64];
	stateid4 stateid;
	seqid4 seqid; /* the lock owner's next seqid */
};

/* An OPEN by a new open owner (`tag` in its name) of the file, CLAIM_NULL or
 * (`previous`) CLAIM_PREVIOUS, confirmed; NFS4ERR_DELAY and NFS4ERR_GRACE
 * are waited out until the timeout. NFS4_OK, another nfsstat4 (the open
 * refused), or -1 (err says why: the server did not answer). */
static int v4_open_claim(struct v4_open *v, const struct options *o, const char *tag, bool previous, char *err,
			 size_t errlen)
{
	nfs_argop4 op;
	struct call c;
	int64_t deadline = now_ms() + o->timeout_ms;

	for (int attempt = 0;; attempt++) {
		OPEN4args *a = &op.nfs_argop4_u.opopen;

		snprintf(v->owner, sizeof(v->owner), "nasgw-nfs-lock-%s:%d:%d", tag, (int)getpid(), attempt);
		v->seqid = 0;
		memset(&op, 0, sizeof(op));
		op.argop = OP_OPEN;
		a->seqid = v->seqid;
		a->share_access = OPEN4_SHARE_ACCESS_BOTH;
		a->share_deny = OPEN4_SHARE_DENY_NONE;
		a->owner.clientid = v->clientid;
		a->owner.owner.owner_len = strlen(v->owner);
		a->owner.owner.owner_val = v->owner;
		a->openhow.opentype = OPEN4_NOCREATE;
		if (previous) {
			a->claim.claim = CLAIM_PREVIOUS;
			a->claim.open_claim4_u.delegate_type = OPEN_DELEGATE_NONE;
		} else {
			a->claim.claim = CLAIM_NULL;
			a->claim.open_claim4_u.file = v->name;
		}
		/* CLAIM_PREVIOUS names the file by the current filehandle. */
		if (!v4_path_compound(v, o, previous, &op, open_cb, &c, "OPEN", err, errlen))
			return -1;
		if ((c.status != NFS4ERR_DELAY && c.status != NFS4ERR_GRACE) || now_ms() > deadline)
			break;
		usleep(100000);
	}
	if (c.status != NFS4_OK)
		return c.status;
	v->seqid++;
	v->stateid = c.stateid;
	if (c.rflags & OPEN4_RESULT_CONFIRM) {
		memset(&op, 0, sizeof(op));
		op.argop = OP_OPEN_CONFIRM;
		op.nfs_argop4_u.opopen_confirm.open_stateid = v->stateid;
		op.nfs_argop4_u.opopen_confirm.seqid = v->seqid;
		if (!v4_path_compound(v, o, true, &op, open_cb, &c, "OPEN_CONFIRM", err, errlen))
			return -1;
		if (c.status != NFS4_OK)
			return c.status;
		v->seqid++;
		v->stateid = c.stateid;
	}
	return NFS4_OK;
}

/* LOCK of the options' range by a new lock owner of the open (`reclaim`:
 * the reclaim flag). NFS4_OK, another nfsstat4, or -1 (err says why). */
static int v4_lock_new_owner(struct v4_open *v, struct v4_lock *l, const struct options *o, const char *tag,
			     bool reclaim, char *err, size_t errlen)
{
	nfs_argop4 op;
	struct call c;
	LOCK4args *a = &op.nfs_argop4_u.oplock;

	snprintf(l->owner, sizeof(l->owner), "nasgw-nfs-lock-%s:%d", tag, (int)getpid());
	memset(&op, 0, sizeof(op));
	op.argop = OP_LOCK;
	a->locktype = o->write ? WRITE_LT : READ_LT;
	a->reclaim = reclaim;
	a->offset = o->start;
	a->length = o->len == 0 ? UINT64_MAX : o->len;
	a->locker.new_lock_owner = 1;
	open_to_lock_owner4 *ol = &a->locker.locker4_u.open_owner;
	ol->open_seqid = v->seqid;
	ol->open_stateid = v->stateid;
	ol->lock_seqid = 0;
	ol->lock_owner.clientid = v->clientid;
	ol->lock_owner.owner.owner_len = strlen(l->owner);
	ol->lock_owner.owner.owner_val = l->owner;
	if (!v4_path_compound(v, o, true, &op, lock_cb, &c, "LOCK", err, errlen))
		return -1;
	v->seqid++; /* the open owner's seqid moves on whatever the answer */
	if (c.status != NFS4_OK)
		return c.status;
	l->stateid = c.stateid;
	l->seqid = 1;
	return NFS4_OK;
}

/* LOCKU of the range, then CLOSE. */
static bool v4_unlock_close(struct v4_open *v, struct v4_lock *l, const struct options *o, char *err,
			    size_t errlen)
{
	nfs_argop4 op;
	struct call c;

	memset(&op, 0, sizeof(op));
	op.argop = OP_LOCKU;
	op.nfs_argop4_u.oplocku.locktype = o->write ? WRITE_LT : READ_LT;
	op.nfs_argop4_u.oplocku.seqid = l->seqid;
	op.nfs_argop4_u.oplocku.lock_stateid = l->stateid;
	op.nfs_argop4_u.oplocku.offset = o->start;
	op.nfs_argop4_u.oplocku.length = o->len == 0 ? UINT64_MAX : o->len;
	if (!v4_path_op(v, o, &op, lock_cb, &c, "LOCKU", err, errlen))
		return false;
	return v4_close(v, o, err, errlen);
}

/* --op reclaim: an OPEN and a LOCK under a client identity of our own, then
 * held (RENEW every renew_ms) until stdin reaches EOF. A line "reclaim" on
 * stdin says the server restarted: a new connection, the same identity
 * (SETCLIENTID with the same id and verifier), an OPEN with CLAIM_PREVIOUS
 * and a LOCK with reclaim set, as a client does in a server's grace period;
 * prints "reclaimed", or "reclaim refused: OP NFS4ERR_..." and exits 1. */
static int run_reclaim(struct nfs_context *nfs, const struct nfs_url *u, const struct options *o)
{
	struct v4_open vo;
	struct v4_lock lk;
	char err[1024] = "", id[128];
	verifier4 verf;
	uint64_t r = ((uint64_t)now_ms() << 20) ^ (uint64_t)getpid();
	struct rpc_context *fresh = NULL;
	int rc;

	memset(&vo, 0, sizeof(vo));
	memset(&lk, 0, sizeof(lk));
	snprintf(id, sizeof(id), "nasgw-nfs-lock reclaim pid:%d t:%" PRId64, (int)getpid(), now_ms());
	memcpy(verf, &r, sizeof(verf));
	vo.rpc = nfs_get_rpc_context(nfs);
	snprintf(vo.path, sizeof(vo.path), "%s/%s", u->path, u->file);
	if (!v4_walk(&vo, err, sizeof(err)))
		return say_error("%s", err);
	if (!v4_client(vo.rpc, o, id, verf, NULL, &vo.clientid, err, sizeof(err)))
		return say_error("%s", err);
	rc = v4_open_claim(&vo, o, "open", false, err, sizeof(err));
	if (rc != NFS4_OK)
		return rc < 0 ? say_error("%s", err) : say_error("OPEN: %s (%d)", nfsstat4_name(rc), rc);
	rc = v4_lock_new_owner(&vo, &lk, o, "lock", false, err, sizeof(err));
	if (rc == NFS4ERR_DENIED)
		return say_denied(NULL);
	if (rc != NFS4_OK)
		return rc < 0 ? say_error("%s", err) : say_error("LOCK: %s (%d)", nfsstat4_name(rc), rc);
	say_granted();
	const int renew_ms = o->renew_ms ? o->renew_ms : 1000;
	for (;;) {
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		int n = poll(&p, 1, renew_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return say_error("poll: %s", strerror(errno));
		if (n == 0) {
			/* Renewal; a server that is gone or restarted refuses it
			 * until we reclaim: not an error here. */
			nfs_argop4 op;
			struct call c;
			memset(&op, 0, sizeof(op));
			memset(&c, 0, sizeof(c));
			op.argop = OP_RENEW;
			op.nfs_argop4_u.oprenew.clientid = vo.clientid;
			if (!compound(vo.rpc, status_cb, &op, 1, &c, 2000) || c.status != NFS4_OK)
				fprintf(stderr, "nasgw-nfs-lock: RENEW: %s\n", c.ok ? nfsstat4_name(c.status) : c.err);
			continue;
		}
		char line[256];
		ssize_t got = read(STDIN_FILENO, line, sizeof(line) - 1);
		if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
			break; /* EOF: release */
		if (got <= 0 || strncmp(line, "reclaim", 7) != 0)
			continue;
		/* The server restarted: our old connection is dead. */
		struct call c;
		memset(&c, 0, sizeof(c));
		if (fresh != NULL)
			rpc_destroy_context(fresh);
		fresh = rpc_init_context();
		if (fresh == NULL || rpc_connect_async(fresh, u->server, 2049, connect_cb, &c) != 0 ||
		    !rpc_wait(fresh, &c, o->timeout_ms))
			return say_error("connect to %s:2049 again: %s", u->server,
					 fresh ? (c.err[0] ? c.err : rpc_get_error(fresh)) : "no context");
		vo.rpc = fresh;
		if (!v4_client(vo.rpc, o, id, verf, NULL, &vo.clientid, err, sizeof(err)))
			return say_error("%s", err);
		rc = v4_open_claim(&vo, o, "reopen", true, err, sizeof(err));
		if (rc < 0)
			return say_error("%s", err);
		if (rc != NFS4_OK) {
			printf("reclaim refused: OPEN %s (%d)\n", nfsstat4_name(rc), rc);
			fflush(stdout);
			return EXIT_DENIED;
		}
		rc = v4_lock_new_owner(&vo, &lk, o, "relock", true, err, sizeof(err));
		if (rc < 0)
			return say_error("%s", err);
		if (rc != NFS4_OK) {
			printf("reclaim refused: LOCK %s (%d)\n", nfsstat4_name(rc), rc);
			fflush(stdout);
			return EXIT_DENIED;
		}
		printf("reclaimed\n");
		fflush(stdout);
	}
	rc = v4_unlock_close(&vo, &lk, o, err, sizeof(err)) ? EXIT_GRANTED : EXIT_ERROR;
	if (rc != EXIT_GRANTED)
		fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
	if (fresh != NULL)
		rpc_destroy_context(fresh);
	return rc;
}

/* ---- NFSv3: one WRITE --------------------------------------------------------- */

static void write3_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (status != RPC_STATUS_SUCCESS) {
		call_failed(c, status, data);
		return;
	}
	const WRITE3res *res = data;
	c->done = c->ok = true;
	c->status = res->status;
	if (res->status == NFS3_OK)
		c->lease_time = res->WRITE3res_u.resok.count; /* bytes written */
}

/* 0 written (all of it), 1 told to wait (NFS3ERR_JUKEBOX), 2 error. */
static int v3_write(struct rpc_context *rpc, const struct nfs_fh *fh, uint64_t offset, const char *data,
		    int timeout_ms, char *err, size_t errlen)
{
	WRITE3args a;
	struct call c;

	memset(&a, 0, sizeof(a));
	memset(&c, 0, sizeof(c));
	a.file.data.data_len = (u_int)fh->len;
	a.file.data.data_val = fh->val;
	a.offset = offset;
	a.count = (count3)strlen(data);
	a.stable = FILE_SYNC;
	a.data.data_len = (u_int)strlen(data);
	a.data.data_val = (char *)data;
	if (rpc_nfs3_write_async(rpc, write3_cb, &a, &c) != 0 || !rpc_wait(rpc, &c, timeout_ms)) {
		snprintf(err, errlen, "WRITE: %s", c.err[0] ? c.err : rpc_get_error(rpc));
		return EXIT_ERROR;
	}
	if (c.status == NFS3ERR_JUKEBOX)
		return EXIT_DENIED;
	if (c.status != NFS3_OK || c.lease_time != a.count) {
		snprintf(err, errlen, "WRITE: %s (%d), %u of %u bytes", nfsstat3_to_str(c.status), c.status,
			 c.lease_time, a.count);
		return EXIT_ERROR;
	}
	return EXIT_GRANTED;
}

/* ---- NFSv3: NLM4 ------------------------------------------------------------ */

static void connect_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (status != RPC_STATUS_SUCCESS) {
		call_failed(c, status, data);
		return;
	}
	c->done = c->ok = true;
}

static void nlm_test_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (status != RPC_STATUS_SUCCESS) {
		call_failed(c, status, data);
		return;
	}
	const NLM4_TESTres *res = data;
	c->done = c->ok = true;
	c->status = res->reply.status;
	if (res->reply.status == NLM4_DENIED) {
		const nlm4_holder *h = &res->reply.nlm4_testreply_u.lock.holder;
		c->conflict.known = true;
		c->conflict.write = h->exclusive != 0;
		c->conflict.start = h->l_offset;
		c->conflict.len = h->l_len;
		c->conflict.to_eof = h->l_len == 0;
	}
}

static void nlm_lock_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (status != RPC_STATUS_SUCCESS) {
		call_failed(c, status, data);
		return;
	}
	c->done = c->ok = true;
	c->status = ((const NLM4_LOCKres *)data)->status;
}

static void nlm_unlock_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	if (status != RPC_STATUS_SUCCESS) {
		call_failed(c, status, data);
		return;
	}
	c->done = c->ok = true;
	c->status = ((const NLM4_UNLOCKres *)data)->status;
}

struct nlm {
	struct rpc_context *rpc;
	char caller[INET6_ADDRSTRLEN + 64];
	char oh[256];
	uint32_t cookie;
	char cookie_buf[4];
	nlm4_lock lock;
};

static void next_cookie(struct nlm *n, nlm_cookie *ck)
{
	n->cookie++;
	memcpy(n->cookie_buf, &n->cookie, sizeof(n->cookie_buf));
	ck->data.data_len = sizeof(n->cookie_buf);
	ck->data.data_val = n->cookie_buf;
}

static bool nlm_connect(struct nlm *n, const char *server, const struct nfs_fh *fh,
			const struct options *o, char *err, size_t errlen)
{
	struct call c;

	memset(&c, 0, sizeof(c));
	n->rpc = rpc_init_context();
	if (n->rpc == NULL) {
		snprintf(err, errlen, "rpc_init_context failed");
		return false;
	}
	if (rpc_connect_program_async(n->rpc, server, NLM_PROGRAM, NLM_V4, connect_cb, &c) != 0) {
		snprintf(err, errlen, "NLM connect to %s: %s", server, rpc_get_error(n->rpc));
		return false;
	}
	if (!rpc_wait(n->rpc, &c, o->timeout_ms)) {
		snprintf(err, errlen, "NLM v4 (program %d) on %s via the portmapper: %s", NLM_PROGRAM, server,
			 c.err);
		return false;
	}
	if (o->caller != NULL) {
		snprintf(n->caller, sizeof(n->caller), "%s", o->caller);
	} else {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		if (getsockname(rpc_get_fd(n->rpc), (struct sockaddr *)&ss, &sl) != 0) {
			snprintf(err, errlen, "getsockname: %s", strerror(errno));
			return false;
		}
		const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
							 : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
		if (inet_ntop(ss.ss_family, a, n->caller, sizeof(n->caller)) == NULL) {
			snprintf(err, errlen, "inet_ntop: %s", strerror(errno));
			return false;
		}
	}
	snprintf(n->oh, sizeof(n->oh), "nasgw-nfs-lock:%d@%s", (int)getpid(), n->caller);
	memset(&n->lock, 0, sizeof(n->lock));
	n->lock.caller_name = n->caller;
	n->lock.fh.data.data_len = (u_int)fh->len;
	n->lock.fh.data.data_val = fh->val;
	n->lock.oh = n->oh;
	n->lock.svid = (u_int)getpid();
	n->lock.l_offset = o->start;
	n->lock.l_len = o->len; /* NLM: 0 is "to EOF" already */
	return true;
}

static const char *nlm_status(int s)
{
	return nlmstat4_to_str(s);
}

/* 0 granted, 1 denied, 2 error (err set). */
static int nlm_test(struct nlm *n, const struct options *o, struct conflict *conflict, char *err,
		    size_t errlen)
{
	NLM4_TESTargs a;
	struct call c;

	memset(&a, 0, sizeof(a));
	memset(&c, 0, sizeof(c));
	next_cookie(n, &a.cookie);
	a.exclusive = o->write;
	a.lock = n->lock;
	if (rpc_nlm4_test_async(n->rpc, nlm_test_cb, &a, &c) != 0 || !rpc_wait(n->rpc, &c, o->timeout_ms)) {
		snprintf(err, errlen, "NLM4_TEST: %s", c.err[0] ? c.err : rpc_get_error(n->rpc));
		return EXIT_ERROR;
	}
	if (c.status == NLM4_GRANTED)
		return EXIT_GRANTED;
	if (c.status == NLM4_DENIED) {
		*conflict = c.conflict;
		return EXIT_DENIED;
	}
	snprintf(err, errlen, "NLM4_TEST: %s", nlm_status(c.status));
	return EXIT_ERROR;
}

/* 0 granted, 1 denied, 2 error (err set); *status: the NLM answer. */
static int nlm_lock(struct nlm *n, const struct options *o, bool reclaim, int *status, char *err, size_t errlen)
{
	NLM4_LOCKargs a;
	struct call c;

	memset(&a, 0, sizeof(a));
	memset(&c, 0, sizeof(c));
	next_cookie(n, &a.cookie);
	a.block = 0;
	a.exclusive = o->write;
	a.lock = n->lock;
	a.reclaim = reclaim;
	a.state = 1; /* our NSM state number: we never reboot within a run */
	if (rpc_nlm4_lock_async(n->rpc, nlm_lock_cb, &a, &c) != 0 || !rpc_wait(n->rpc, &c, o->timeout_ms)) {
		snprintf(err, errlen, "NLM4_LOCK: %s", c.err[0] ? c.err : rpc_get_error(n->rpc));
		return EXIT_ERROR;
	}
	if (status != NULL)
		*status = c.status;
	if (c.status == NLM4_GRANTED)
		return EXIT_GRANTED;
	if (c.status == NLM4_DENIED)
		return EXIT_DENIED;
	snprintf(err, errlen, "NLM4_LOCK: %s", nlm_status(c.status));
	return EXIT_ERROR;
}

static bool nlm_unlock(struct nlm *n, const struct options *o, char *err, size_t errlen)
{
	NLM4_UNLOCKargs a;
	struct call c;

	memset(&a, 0, sizeof(a));
	memset(&c, 0, sizeof(c));
	next_cookie(n, &a.cookie);
	a.lock = n->lock;
	if (rpc_nlm4_unlock_async(n->rpc, nlm_unlock_cb, &a, &c) != 0 || !rpc_wait(n->rpc, &c, o->timeout_ms)) {
		snprintf(err, errlen, "NLM4_UNLOCK: %s", c.err[0] ? c.err : rpc_get_error(n->rpc));
		return false;
	}
	if (c.status != NLM4_GRANTED) {
		snprintf(err, errlen, "NLM4_UNLOCK: %s", nlm_status(c.status));
		return false;
	}
	return true;
}

/* ---- NFSv3: a lock reclaimed after the server's SM_NOTIFY ------------------- */

/* The client machine's portmapper and statd, as far as a server's reboot
 * notification needs them: one UDP socket on port 111 that answers
 * PMAPPROC_GETPORT for NSM (100024 v1 UDP) with port 111 itself, and
 * SM_NOTIFY (answered void). A kernel client's statd would call its lockd
 * back; here the notification is returned to the caller. */
static int nsm_socket(char *err, size_t errlen)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(111)};
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		snprintf(err, errlen, "bind UDP port 111 (a portmapper already runs here?): %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Serves one datagram on `fd`. True, with mon_name and state set, when it
 * was an SM_NOTIFY. */
static bool nsm_serve_one(int fd, char *mon_name, size_t mon_len, uint32_t *state)
{
	uint8_t in[2048], out[64];
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);
	ssize_t n = recvfrom(fd, in, sizeof(in), 0, (struct sockaddr *)&from, &fl);
	if (n <= 0)
		return false;
	struct xdr_in x = {in, in + n, true};
	struct rpc_call_hdr h;
	uint32_t l;
	if (!xin_call(&x, &h))
		return false;
	const uint32_t prog = h.prog, vers = h.vers, proc = h.proc;
	bool notify = false, answer = false;
	uint32_t port = 0;
	if (prog == 100000 && vers == 2 && proc == 3) { /* PMAPPROC_GETPORT */
		uint32_t p = xin_u32(&x), v = xin_u32(&x), prot = xin_u32(&x);
		port = x.ok && p == 100024 && v == 1 && prot == 17 ? 111 : 0;
		answer = true;
	} else if (prog == 100024 && vers == 1 && proc == 6) { /* SM_NOTIFY */
		const uint8_t *name = xin_opaque(&x, &l);
		*state = xin_u32(&x);
		if (!x.ok || l >= mon_len)
			return false;
		memcpy(mon_name, name, l);
		mon_name[l] = '\0';
		notify = answer = true;
	} else if (proc == 0) { /* NULL */
		answer = true;
	}
	if (!answer)
		return false;
	size_t at = 0;
	xout_accepted(out, &at, h.xid);
	xout_u32(out, &at, 0); /* SUCCESS */
	if (prog == 100000 && proc == 3)
		xout_u32(out, &at, port);
	(void)sendto(fd, out, at, 0, (struct sockaddr *)&from, fl);
	return notify;
}

/* --op reclaim (NFSv3): NLM4_LOCK of the range (prints "granted", or
 * "denied"), held until stdin reaches EOF, answering on UDP port 111 as the
 * client machine's portmapper and statd. An SM_NOTIFY (the server came
 * back: a restart, or its address moved to another node) prints
 * "notified mon_name=NAME state=N"; then, as a client's lockd does, a new
 * NLM connection to the server and NLM4_LOCK with reclaim set: "reclaimed",
 * or "reclaim refused: NLM4_..." (exit 1). At EOF NLM4_UNLOCK. */
static int run_nlm_reclaim(const char *server, const struct nfs_fh *fh, const struct options *o)
{
	struct nlm n;
	char err[1024] = "";
	int status = 0, rc;
	bool notified = false;
	uint32_t last_state = 0;

	memset(&n, 0, sizeof(n));
	int fd = nsm_socket(err, sizeof(err));
	if (fd < 0)
		return say_error("%s", err);
	if (!nlm_connect(&n, server, fh, o, err, sizeof(err))) {
		rc = say_error("%s", err);
		goto out;
	}
	rc = nlm_lock(&n, o, false, NULL, err, sizeof(err));
	if (rc != EXIT_GRANTED) {
		rc = rc == EXIT_DENIED ? say_denied(NULL) : say_error("%s", err);
		goto out;
	}
	say_granted();
	for (;;) {
		struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN}, {.fd = fd, .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			rc = say_error("poll: %s", strerror(errno));
			goto out;
		}
		if (p[0].revents != 0) {
			char buf[256];
			ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
			if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
				break; /* EOF: release */
		}
		char mon[1025];
		uint32_t state = 0;
		if (p[1].revents == 0 || !nsm_serve_one(fd, mon, sizeof(mon), &state))
			continue;
		/* The same notification again (our answer was lost): answered,
		 * nothing more. */
		if (notified && state == last_state)
			continue;
		notified = true;
		last_state = state;
		printf("notified mon_name=%s state=%u\n", mon, state);
		fflush(stdout);
		/* The server came back: what it knew of us is gone, and so is
		 * our connection. The lock again, as a reclaim. */
		char caller[sizeof(n.caller)];
		snprintf(caller, sizeof(caller), "%s", n.caller);
		rpc_destroy_context(n.rpc);
		n.rpc = NULL;
		struct options again = *o;
		again.caller = caller; /* the same owner as before */
		if (!nlm_connect(&n, server, fh, &again, err, sizeof(err))) {
			rc = say_error("%s", err);
			goto out;
		}
		rc = nlm_lock(&n, &again, true, &status, err, sizeof(err));
		if (rc == EXIT_ERROR) {
			rc = say_error("%s", err);
			goto out;
		}
		if (rc != EXIT_GRANTED) {
			printf("reclaim refused: %s\n", nlm_status(status));
			fflush(stdout);
			rc = EXIT_DENIED;
			goto out;
		}
		printf("reclaimed\n");
		fflush(stdout);
	}
	rc = EXIT_GRANTED;
	if (!nlm_unlock(&n, o, err, sizeof(err))) {
		fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
		rc = EXIT_ERROR;
	}
out:
	if (n.rpc != NULL)
		rpc_destroy_context(n.rpc);
	close(fd);
	return rc;
}

/* ---- holding ------------------------------------------------------------- */

/* Waits for EOF on stdin. For v4 (nfs != NULL) services the NFS connection
 * meanwhile and renews the lease every renew_ms with a READ on the open
 * stateid. False (message in err) if the connection or a renewal failed. */
static bool hold_until_eof(struct nfs_context *nfs, struct nfsfh *fh, int renew_ms, char *err, size_t errlen)
{
	int64_t next = now_ms() + renew_ms;

	for (;;) {
		struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN}};
		int n = 1;
		if (nfs != NULL) {
			p[1].fd = nfs_get_fd(nfs);
			p[1].events = (short)nfs_which_events(nfs);
			n = 2;
		}
		int timeout = -1;
		if (nfs != NULL) {
			int64_t left = next - now_ms();
			timeout = left < 0 ? 0 : (int)left;
		}
		int r = poll(p, (nfds_t)n, timeout);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "poll: %s", strerror(errno));
			return false;
		}
		if (p[0].revents != 0) {
			char buf[256];
			ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
			if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
				return true; /* EOF (or stdin gone): release */
		}
		if (nfs != NULL && p[1].revents != 0 && nfs_service(nfs, p[1].revents) < 0) {
			snprintf(err, errlen, "NFS connection lost: %s", nfs_get_error(nfs));
			return false;
		}
		if (nfs != NULL && now_ms() >= next) {
			char b[1];
			if (nfs_pread(nfs, fh, 0, 1, b) < 0) {
				snprintf(err, errlen, "lease renewal (READ) failed: %s", nfs_get_error(nfs));
				return false;
			}
			next = now_ms() + renew_ms;
		}
	}
}

/* ---- main ------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nasgw-nfs-lock --url nfs://SERVER/EXPORT/FILE?version=4|3 --op lock|test\n"
		"                      --type read|write --start N --len N (0: to EOF)\n"
		"                      [--hold] [--caller NAME] [--renew-ms N] [--timeout-ms N]\n"
		"       nasgw-nfs-lock --url nfs://SERVER/EXPORT/FILE?version=4 --op open\n"
		"                      --access read|write|both --deny none|read|write|both\n"
		"                      [--hold] [--renew-ms N] [--timeout-ms N]\n"
		"       nasgw-nfs-lock --url nfs://SERVER/EXPORT/FILE?version=4|3 --op reclaim\n"
		"                      --type read|write --start N --len N [--renew-ms N]\n"
		"                      (held until EOF; v4: a line \"reclaim\" reclaims it after a server restart;\n"
		"                      v3: reclaimed when an SM_NOTIFY comes to UDP port 111)\n"
		"prints one line: granted (exit 0), denied [start=S len=L|eof type=T] (1),\n"
		"error: MSG (2). --hold keeps a granted lock or open until stdin reaches EOF.\n");
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (s[0] == '-' || s[0] == '\0')
		return false;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno != 0 || *end != '\0')
		return false;
	*out = v;
	return true;
}

static int url_version(const char *url)
{
	const char *q = strchr(url, '?');
	if (q == NULL)
		return 3;
	for (const char *p = q + 1; p != NULL && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
		if (strncmp(p, "version=", 8) == 0) {
			if (strncmp(p + 8, "4", 1) == 0 && (p[9] == '\0' || p[9] == '&'))
				return 4;
			if (strncmp(p + 8, "3", 1) == 0 && (p[9] == '\0' || p[9] == '&'))
				return 3;
			return -1;
		}
	}
	return 3;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"url", required_argument, NULL, 'u'},      {"op", required_argument, NULL, 'o'},
		{"type", required_argument, NULL, 't'},     {"start", required_argument, NULL, 's'},
		{"len", required_argument, NULL, 'l'},      {"hold", no_argument, NULL, 'H'},
		{"caller", required_argument, NULL, 'c'},   {"renew-ms", required_argument, NULL, 'r'},
		{"timeout-ms", required_argument, NULL, 'T'}, {"help", no_argument, NULL, 'h'},
		{"access", required_argument, NULL, 'a'},   {"deny", required_argument, NULL, 'd'},
		{"data", required_argument, NULL, 'D'},
		{NULL, 0, NULL, 0}};
	struct options o = {.timeout_ms = 30000};
	bool have_op = false, have_type = false, have_start = false, have_len = false;
	uint64_t v;
	int ch;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'u': o.url = optarg; break;
		case 'o':
			if (strcmp(optarg, "lock") != 0 && strcmp(optarg, "test") != 0 &&
			    strcmp(optarg, "open") != 0 && strcmp(optarg, "write") != 0 &&
			    strcmp(optarg, "deleg") != 0 && strcmp(optarg, "reclaim") != 0)
				return say_error("--op must be lock, test, open, write, deleg or reclaim, not %s",
						 optarg);
			o.reclaim = strcmp(optarg, "reclaim") == 0;
			o.lock = strcmp(optarg, "lock") == 0 || o.reclaim;
			o.open = strcmp(optarg, "open") == 0;
			o.write_data = strcmp(optarg, "write") == 0;
			o.deleg = strcmp(optarg, "deleg") == 0;
			o.open = o.open || o.deleg; /* an open, held */
			have_op = true;
			break;
		case 'a':
			if (strcmp(optarg, "read") == 0)
				o.share_access = OPEN4_SHARE_ACCESS_READ;
			else if (strcmp(optarg, "write") == 0)
				o.share_access = OPEN4_SHARE_ACCESS_WRITE;
			else if (strcmp(optarg, "both") == 0)
				o.share_access = OPEN4_SHARE_ACCESS_BOTH;
			else
				return say_error("--access must be read, write or both, not %s", optarg);
			break;
		case 'd':
			if (strcmp(optarg, "none") == 0)
				o.share_deny = OPEN4_SHARE_DENY_NONE;
			else if (strcmp(optarg, "read") == 0)
				o.share_deny = OPEN4_SHARE_DENY_READ;
			else if (strcmp(optarg, "write") == 0)
				o.share_deny = OPEN4_SHARE_DENY_WRITE;
			else if (strcmp(optarg, "both") == 0)
				o.share_deny = OPEN4_SHARE_DENY_BOTH;
			else
				return say_error("--deny must be none, read, write or both, not %s", optarg);
			break;
		case 't':
			if (strcmp(optarg, "read") != 0 && strcmp(optarg, "write") != 0)
				return say_error("--type must be read or write, not %s", optarg);
			o.write = strcmp(optarg, "write") == 0;
			have_type = true;
			break;
		case 's':
			if (!parse_u64(optarg, &o.start))
				return say_error("--start: not a number: %s", optarg);
			have_start = true;
			break;
		case 'l':
			if (!parse_u64(optarg, &o.len))
				return say_error("--len: not a number: %s", optarg);
			have_len = true;
			break;
		case 'H': o.hold = true; break;
		case 'c': o.caller = optarg; break;
		case 'r':
			if (!parse_u64(optarg, &v) || v == 0 || v > 3600000)
				return say_error("--renew-ms: 1..3600000");
			o.renew_ms = (int)v;
			break;
		case 'T':
			if (!parse_u64(optarg, &v) || v == 0 || v > 3600000)
				return say_error("--timeout-ms: 1..3600000");
			o.timeout_ms = (int)v;
			break;
		case 'D': o.data = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return say_error("bad arguments");
		}
	}
	if (o.write_data && (optind != argc || o.url == NULL || o.data == NULL || !have_start)) {
		usage(stderr);
		return say_error("--op write needs --url, --start and --data");
	}
	if (o.open && (optind != argc || o.url == NULL || o.share_access == 0)) {
		usage(stderr);
		return say_error("--op open needs --url and --access");
	}
	if (!o.open && !o.write_data && (optind != argc || o.url == NULL || !have_op || !have_type || !have_start || !have_len)) {
		usage(stderr);
		return say_error("--url, --op, --type, --start and --len are required");
	}
	if (o.hold && !o.lock && !o.open)
		return say_error("--hold needs --op lock or open");
	if (o.len != 0 && o.start > UINT64_MAX - o.len)
		return say_error("--start + --len overflows");
	o.version = url_version(o.url);
	if (o.version < 0)
		return say_error("the URL's version must be 3 or 4");
	if (o.open && o.version != 4)
		return say_error("--op open and deleg are NFSv4 (version=4 in the URL)");
	if (o.write_data && o.version != 3)
		return say_error("--op write is NFSv3 (version=3 in the URL)");

	struct nfs_context *nfs = nfs_init_context();
	if (nfs == NULL)
		return say_error("nfs_init_context failed");
	int rc = EXIT_ERROR;
	struct nfs_url *u = NULL;
	struct nfsfh *fh = NULL;
	struct nlm n;
	char err[1024] = "";
	struct conflict conflict = {0};
	memset(&n, 0, sizeof(n));

	if (o.version == 4) {
		/* Our own client identity (libnfs's default is "Libnfs pid:<pid> <time>");
		 * the lab's client namespaces share one pid space, so either is unique. */
		char id[128];
		uint64_t r = ((uint64_t)now_ms() << 20) ^ (uint64_t)getpid();
		snprintf(id, sizeof(id), "nasgw-nfs-lock pid:%d t:%" PRId64, (int)getpid(), now_ms());
		nfs4_set_client_name(nfs, id);
		nfs4_set_verifier(nfs, (const char *)&r);
	}
	u = nfs_parse_url_full(nfs, o.url);
	if (u == NULL) {
		rc = say_error("URL %s: %s", o.url, nfs_get_error(nfs));
		goto out;
	}
	nfs_set_timeout(nfs, o.timeout_ms);
	if (nfs_mount(nfs, u->server, u->path) != 0) {
		rc = say_error("mount %s:%s (NFSv%d): %s", u->server, u->path, o.version, nfs_get_error(nfs));
		goto out;
	}
	if (o.reclaim && o.version == 4) {
		rc = run_reclaim(nfs, u, &o);
		goto out;
	}
	if (o.open) {
		struct v4_open vo;
		static struct cb_server cbs = {.listen_fd = -1, .notify = {-1, -1}};
		memset(&vo, 0, sizeof(vo));
		vo.rpc = nfs_get_rpc_context(nfs);
		if (o.deleg && !cb_start(&cbs, rpc_get_fd(vo.rpc), vo.cb_addr, sizeof(vo.cb_addr), err, sizeof(err))) {
			rc = say_error("%s", err);
			goto out;
		}
		snprintf(vo.path, sizeof(vo.path), "%s/%s", u->path, u->file);
		if (!v4_walk(&vo, err, sizeof(err))) {
			rc = say_error("%s", err);
			goto out;
		}
		rc = v4_open_share(&vo, &o, err, sizeof(err));
		if (rc != EXIT_GRANTED) {
			rc = rc == EXIT_DENIED ? say_denied(NULL) : say_error("%s", err);
			goto out;
		}
		if (o.deleg) {
			printf("granted deleg=%s\n", vo.deleg == OPEN_DELEGATE_READ    ? "read"
						     : vo.deleg == OPEN_DELEGATE_WRITE ? "write"
										       : "none");
			fflush(stdout);
			rc = EXIT_GRANTED;
		} else {
			rc = say_granted();
		}
		if ((o.hold || o.deleg) &&
		    !v4_hold_open(&vo, &o, o.renew_ms ? o.renew_ms : 1000, o.deleg ? cbs.notify[0] : -1, err,
				  sizeof(err))) {
			fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
			rc = EXIT_ERROR;
			goto out;
		}
		if (!v4_close(&vo, &o, err, sizeof(err))) {
			fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
			rc = EXIT_ERROR;
		}
		goto out;
	}
	if (o.write_data) {
		int retries = 0;
		int64_t deadline = now_ms() + o.timeout_ms;

		if (nfs_open(nfs, u->file, O_WRONLY, &fh) != 0) {
			fh = NULL;
			rc = say_error("open %s: %s", u->file, nfs_get_error(nfs));
			goto out;
		}
		for (;;) {
			int w = v3_write(nfs_get_rpc_context(nfs), nfs_get_fh(fh), o.start, o.data, o.timeout_ms, err,
					 sizeof(err));
			if (w == EXIT_GRANTED)
				break;
			if (w == EXIT_ERROR || now_ms() > deadline) {
				rc = say_error("%s (after %d retries)", w == EXIT_ERROR ? err : "still NFS3ERR_JUKEBOX",
					       retries);
				goto out;
			}
			retries++;
			usleep(20000);
		}
		printf("written retries=%d\n", retries);
		fflush(stdout);
		rc = EXIT_GRANTED;
		goto out;
	}
	if (nfs_open(nfs, u->file, o.lock && o.write ? O_RDWR : O_RDONLY, &fh) != 0) {
		fh = NULL;
		rc = say_error("open %s: %s", u->file, nfs_get_error(nfs));
		goto out;
	}
	const struct nfs_fh *wire = nfs_get_fh(fh);

	if (o.version == 4) {
		struct rpc_context *rpc = nfs_get_rpc_context(nfs);
		if (!o.lock) {
			rc = v4_lockt(rpc, wire, &o, "test", &conflict, err, sizeof(err));
			rc = rc == EXIT_GRANTED ? say_granted() : rc == EXIT_DENIED ? say_denied(&conflict)
										 : say_error("%s", err);
			goto out;
		}
		struct nfs4_flock fl = {.l_type = o.write ? F_WRLCK : F_RDLCK,
					.l_whence = SEEK_SET,
					.l_pid = (uint32_t)getpid(),
					.l_start = o.start,
					.l_len = o.len == 0 ? UINT64_MAX : o.len};
		if (nfs_fcntl(nfs, fh, NFS4_F_SETLK, &fl) != 0) {
			const char *e = nfs_get_error(nfs);
			if (e != NULL && strstr(e, "NFS4ERR_DENIED") != NULL) {
				/* libnfs drops the LOCK4denied: ask LOCKT who is in the way. */
				if (v4_lockt(rpc, wire, &o, "conflict", &conflict, err, sizeof(err)) != EXIT_DENIED)
					conflict.known = false;
				rc = say_denied(&conflict);
			} else {
				rc = say_error("LOCK: %s", e ? e : "failed");
			}
			goto out;
		}
		rc = say_granted();
		if (o.hold) {
			int renew_ms = o.renew_ms;
			if (renew_ms == 0) {
				uint32_t lease = v4_lease_time(rpc, wire, o.timeout_ms);
				renew_ms = lease > 0 ? (int)(lease * 1000 / 3) : 1000;
				if (renew_ms < 200)
					renew_ms = 200;
			}
			if (!hold_until_eof(nfs, fh, renew_ms, err, sizeof(err))) {
				fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
				rc = EXIT_ERROR;
				goto out;
			}
		}
		/* LOCKU before CLOSE: a v4.0 CLOSE with locks held is refused. */
		fl.l_type = F_UNLCK;
		if (nfs_fcntl(nfs, fh, NFS4_F_SETLK, &fl) != 0) {
			fprintf(stderr, "nasgw-nfs-lock: LOCKU: %s\n", nfs_get_error(nfs));
			rc = EXIT_ERROR;
		}
		goto out;
	}

	/* NFSv3: NLM */
	if (o.reclaim) {
		rc = run_nlm_reclaim(u->server, wire, &o);
		goto out;
	}
	if (!nlm_connect(&n, u->server, wire, &o, err, sizeof(err))) {
		rc = say_error("%s", err);
		goto out;
	}
	if (!o.lock) {
		rc = nlm_test(&n, &o, &conflict, err, sizeof(err));
		rc = rc == EXIT_GRANTED ? say_granted() : rc == EXIT_DENIED ? say_denied(&conflict) : say_error("%s", err);
		goto out;
	}
	rc = nlm_lock(&n, &o, false, NULL, err, sizeof(err));
	if (rc == EXIT_DENIED) {
		/* NLM4_LOCK carries no holder: NLM4_TEST does. */
		if (nlm_test(&n, &o, &conflict, err, sizeof(err)) != EXIT_DENIED)
			conflict.known = false;
		rc = say_denied(&conflict);
		goto out;
	}
	if (rc != EXIT_GRANTED) {
		rc = say_error("%s", err);
		goto out;
	}
	rc = say_granted();
	if (!o.hold) {
		/* Without --hold the lock goes with us: NLM would keep it forever. */
		if (!nlm_unlock(&n, &o, err, sizeof(err))) {
			fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
			rc = EXIT_ERROR;
		}
		goto out;
	}
	if (!hold_until_eof(NULL, NULL, 0, err, sizeof(err))) {
		fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
		rc = EXIT_ERROR;
		goto out;
	}
	if (!nlm_unlock(&n, &o, err, sizeof(err))) {
		fprintf(stderr, "nasgw-nfs-lock: %s\n", err);
		rc = EXIT_ERROR;
	}

out:
	if (n.rpc != NULL)
		rpc_destroy_context(n.rpc);
	if (fh != NULL)
		nfs_close(nfs, fh);
	if (u != NULL)
		nfs_destroy_url(u);
	nfs_destroy_context(nfs);
	return rc;
}
