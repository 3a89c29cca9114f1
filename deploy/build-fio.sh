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
# holds a fio built from the current source version with both engines.
# Needs libnfs-dev and libiscsi-dev (deploy/install-deps.sh), gcc, make.
set -euo pipefail
DIR=${1:-/var/cache/nasgw/fio}

has_engines() {
  local out
  out=$("$1" --enghelp 2>/dev/null) || return 1
  grep -qw nfs <<<"$out" && grep -qw libiscsi <<<"$out"
}

VER=$(apt-cache showsrc fio 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1 || true)
if [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "${VER:-unknown}" ] && has_engines "$DIR/fio"; then
  echo "$DIR/fio"
  exit 0
fi

for p in libnfs-dev libiscsi-dev; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "build-fio: $p is not installed (run deploy/install-deps.sh)" >&2
    exit 1
  fi
done

if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "build-fio: need root to enable deb-src" >&2
    exit 1
  fi
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
    > /etc/apt/sources.list.d/nasgw-deb-src.sources
  apt-get update -qq
  VER=$(apt-cache showsrc fio 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1 || true)
fi

rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp"
trap 'rm -rf "$DIR.tmp"' EXIT
cd "$DIR.tmp"
# Only the upstream tarball is needed; the mirror may lack the Debian diff,
# so judge by the tarball, not by apt-get's exit status.
apt-get source --download-only -qq "fio=$VER" >/dev/null 2>&1 ||
  apt-get source --download-only -qq fio >/dev/null 2>&1 || true
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
echo "${VER:-unknown}" > "$DIR.new/stamp"
cd /
rm -rf "$DIR"
mv "$DIR.new" "$DIR"
echo "$DIR/fio"
