#!/usr/bin/env bash
# Readies the headers FSAL_NASGW compiles against: Debian ships no
# nfs-ganesha-dev, so fetch Debian's own source package for the installed
# nfs-ganesha (deb-src enabled here if it is not), unpack it and generate the
# one header a build makes, include/config.h, with a cmake configure that
# reproduces Debian's feature set (these #defines change struct layouts).
#
#   deploy/ganesha-headers.sh [DIR]     (default /var/cache/nasgw/ganesha)
#
# Prints DIR. Idempotent: returns at once when DIR holds headers for the
# installed version. Nothing of Ganesha's enters the repository.
set -euo pipefail
DIR=${1:-/var/cache/nasgw/ganesha}
. "$(dirname "$0")/debian-source.sh"
VER=$(debsrc_version ganesha-headers nfs-ganesha)
if [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "$VER" ]; then
  echo "$DIR"
  exit 0
fi

debsrc_enable ganesha-headers

rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp"
cd "$DIR.tmp"
# Only the upstream tarball is needed.
debsrc_fetch nfs-ganesha "$VER"
tgz=$(ls nfs-ganesha_*.orig.tar.gz 2>/dev/null | head -1)
if [ -z "$tgz" ]; then
  echo "ganesha-headers: could not fetch Debian's nfs-ganesha source package (deb-src)" >&2
  exit 1
fi
tar xzf "$tgz"
src=$(ls -d nfs-ganesha-*/ | head -1)
mv "$src" source
rm -f ./*.tar.* ./*.dsc
cmake -S source/src -B build -DUSE_SYSTEM_NTIRPC=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX=/usr -DFSAL_DESTINATION=/usr/lib/x86_64-linux-gnu/ganesha \
  -DUSE_FSAL_CEPH=OFF -DUSE_FSAL_GLUSTER=OFF -DUSE_FSAL_GPFS=OFF -DUSE_FSAL_RGW=OFF \
  -DUSE_FSAL_LUSTRE=OFF -DUSE_FSAL_LIZARDFS=OFF -DUSE_FSAL_KVSFS=OFF -DUSE_FSAL_XFS=OFF \
  -DUSE_GUI_ADMIN_TOOLS=OFF -DUSE_ADMIN_TOOLS=OFF -DUSE_RADOS_RECOV=OFF -DRADOS_URLS=OFF \
  -DUSE_MAN_PAGE=OFF -DUSE_LTTNG=OFF >cmake.log 2>&1 || {
  echo "ganesha-headers: cmake configure failed; see $DIR.tmp/cmake.log" >&2
  exit 1
}
test -f build/include/config.h
echo "$VER" > stamp
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
echo "$DIR"
