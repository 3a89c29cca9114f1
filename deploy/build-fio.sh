#!/usr/bin/env bash
# Builds fio with its NFS (libnfs) and iSCSI (libiscsi) engines, for the NFS
# benchmark (bench/nfs_bench.py): Debian's fio package has neither. Fetches
# Debian's own fio source package (deb-src enabled here if it is not), then
#   ./configure --enable-libnfs --enable-libiscsi && make
# outside the repository.
#
#   deploy/build-fio.sh [DIR]     (default /var/cache/nasgw/fio)
#
# Prints the path of the fio binary. Idempotent: returns at once when DIR
# holds a fio built from the current source version and patch with both
# engines. Needs libnfs-dev and libiscsi-dev (deploy/install-deps.sh), gcc,
# make, patch.
#
# One patch, to fio 3.33's nfs engine: its getevents ignored `min`, so when
# fio waits for its in-flight I/O (end of a job, moving on to the next file)
# it got none back and went on as if it had: callbacks then found their file
# closed (SIGSEGV in sequential reads over several files), I/O still queued
# at the end failed ("Failed NFS operation(code:-14)") and nfs_umount at job
# cleanup could hang for good. Patched, getevents blocks until `min` have
# completed, as every other fio engine does.
set -euo pipefail
DIR=${1:-/var/cache/nasgw/fio}
PATCHLEVEL=nasgw.1

has_engines() {
  local out
  out=$("$1" --enghelp 2>/dev/null) || return 1
  grep -qw nfs <<<"$out" && grep -qw libiscsi <<<"$out"
}

VER=$(apt-cache showsrc fio 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1 || true)
if [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "${VER:-unknown}+$PATCHLEVEL" ] && has_engines "$DIR/fio"; then
  echo "$DIR/fio"
  exit 0
fi

for p in libnfs-dev libiscsi-dev; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "build-fio: $p is not installed (run deploy/install-deps.sh)" >&2
    exit 1
  fi
done

. "$(dirname "$0")/debian-source.sh"
debsrc_enable build-fio
# (known only once deb-src is on)
VER=$(apt-cache showsrc fio 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1 || true)

rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp"
trap 'rm -rf "$DIR.tmp"' EXIT
cd "$DIR.tmp"
# Only the upstream tarball is needed.
debsrc_fetch fio "$VER"
tgz=$(ls fio_*.orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -1 || true)
if [ -z "$tgz" ]; then
  echo "build-fio: could not fetch Debian's fio source package (deb-src)" >&2
  exit 1
fi
tar xf "$tgz"
src=$(ls -d fio-*/ | head -1)
mv "$src" source
rm -f ./*.tar.* ./*.dsc
cd source
patch -p1 --quiet <<'PATCH' || { echo "build-fio: the nfs engine patch does not apply to fio $VER" >&2; exit 1; }
--- a/engines/nfs.c
+++ b/engines/nfs.c
@@ -104,7 +104,30 @@
 static int fio_libnfs_getevents(struct thread_data *td, unsigned int min,
 				  unsigned int max, const struct timespec *t)
 {
-	return nfs_event_loop(td, false);
+	struct fio_libnfs_options *o = td->eo;
+	int n = nfs_event_loop(td, false);
+
+	/* nasgw: fio asks for at least min completions; returning fewer while
+	 * I/O is in flight makes it give up on that I/O (end of job, file
+	 * switch), whose callbacks then find their file closed. */
+	while (n >= 0 && (unsigned int)n < min && o->outstanding_events > 0) {
+		struct pollfd pfd;
+
+		pfd.fd = nfs_get_fd(o->context);
+		pfd.events = nfs_which_events(o->context);
+		if (poll(&pfd, 1, -1) < 0) {
+			if (errno == EINTR || errno == EAGAIN)
+				continue;
+			log_err("nfs: failed to poll events: %s.\n", strerror(errno));
+			break;
+		}
+		if (nfs_service(o->context, pfd.revents) < 0) {
+			log_err("nfs: socket is in an unrecoverable error state.\n");
+			break;
+		}
+		n = o->buffered_event_count;
+	}
+	return n;
 }
 
 static void nfs_callback(int res, struct nfs_context *nfs, void *data,
PATCH
# --disable-native: the binary may run on another CPU of the same family.
./configure --enable-libnfs --enable-libiscsi --disable-native >../configure.log 2>&1 || {
  cp ../configure.log /tmp/nasgw-build-fio-configure.log
  echo "build-fio: configure failed; see /tmp/nasgw-build-fio-configure.log" >&2
  exit 1
}
# Other engineers build on the same two cores: one job.
make -j1 >../make.log 2>&1 || {
  tail -30 ../make.log >&2
  echo "build-fio: make failed" >&2
  exit 1
}
if ! has_engines ./fio; then
  echo "build-fio: fio built without the nfs or libiscsi engine; configure said:" >&2
  grep -iE 'nfs|iscsi' ../configure.log >&2 || true
  exit 1
fi
mkdir -p "$DIR.new"
cp fio "$DIR.new/fio"
echo "${VER:-unknown}+$PATCHLEVEL" > "$DIR.new/stamp"
cd /
rm -rf "$DIR"
mv "$DIR.new" "$DIR"
echo "$DIR/fio"
