#!/usr/bin/env bash
# Readies the headers vfs_nasgw compiles against: Debian's samba-dev ships
# only the public headers (no vfs.h, no includes.h, no config.h), so fetch
# Debian's own source package for the installed samba (deb-src enabled here
# if it is not), unpack it with Debian's patches, run waf configure with most
# features off (it writes config.h) and generate only the headers that
# smbd/smbd.h and its includes need. Then keep the headers alone (about
# 20 MB unpacked) and drop the rest of the tree.
#
#   deploy/samba-headers.sh [DIR]     (default /var/cache/nasgw/samba)
#
# Prints DIR; the headers are in DIR/sdk. Idempotent: returns at once when
# DIR holds headers for the installed version. About 60-120 s the first
# time. Nothing of Samba's enters the repository.
set -euo pipefail
DIR=${1:-/var/cache/nasgw/samba}
. "$(dirname "$0")/debian-source.sh"
VER=$(debsrc_version samba-headers samba)
if [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "$VER" ]; then
  echo "$DIR"
  exit 0
fi

debsrc_enable samba-headers

rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp"
cd "$DIR.tmp"
debsrc_fetch samba "$VER"
dsc=$(ls samba_*.dsc 2>/dev/null | head -1)
if [ -z "$dsc" ]; then
  echo "samba-headers: could not fetch Debian's samba source package (deb-src)" >&2
  exit 1
fi
# With Debian's patches: some touch lib/replace/replace.h and lib/util/*.h.
dpkg-source --no-check -x "$dsc" src >/dev/null 2>&1
cd src
SLIB=/usr/lib/x86_64-linux-gnu/samba
PYTHON=/usr/bin/python3 ./configure --prefix=/usr --enable-fhs --sysconfdir=/etc \
  --localstatedir=/var --libdir=/usr/lib/x86_64-linux-gnu --with-modulesdir=$SLIB \
  --without-ad-dc --disable-python --without-json --without-ldap --without-ads \
  --without-systemd --without-libarchive --without-pam --disable-cups --disable-iprint \
  --without-quotas --without-utmp --disable-avahi --without-gpgme --without-ldb-lmdb \
  --without-lttng --disable-glusterfs --disable-cephfs --disable-spotlight \
  --without-regedit --without-winexe --without-fam --without-dmapi --without-automount \
  --without-libunwind --without-cluster-support --with-system-mitkrb5 \
  --disable-warnings-as-errors >"$DIR.tmp/configure.log" 2>&1 || {
  echo "samba-headers: waf configure failed; see $DIR.tmp/configure.log" >&2
  exit 1
}
# Only the generated headers includes.h and smbd/smbd.h need (asking for
# lib/param/param_proto.h would run every PIDL target).
targets=ntstatus_generated,werror_generated,param_local.h,s3_param_proto_h
targets=$targets,PIDL_FILE_ID,PIDL_MISC,PIDL_SECURITY,PIDL_SERVER_ID,PIDL_SMB2_LEASE_STRUCT,PIDL_SMB_ACL
targets=$targets,PIDL_SMBXSRV,PIDL_OPEN_FILES,PIDL_LEASES_DB,PIDL_XATTR,PIDL_AUTH,PIDL_LSA,PIDL_SAMR,PIDL_NETLOGON,PIDL_KRB5PAC
env PYTHONHASHSEED=1 /usr/bin/python3 ./buildtools/bin/waf build --targets="$targets" \
  >"$DIR.tmp/waf.log" 2>&1 || {
  echo "samba-headers: header generation failed; see $DIR.tmp/waf.log" >&2
  exit 1
}
mkdir -p "$DIR.tmp/sdk"
{
  find . -path ./bin -prune -o -path ./third_party -prune -o -path ./ctdb -prune \
    -o -path ./debian -prune -o -path ./source4/heimdal -prune -o -name '*.h' -print
  find bin/default -name '*.h'
} | tar cf - -T - | tar xf - -C "$DIR.tmp/sdk"
test -f "$DIR.tmp/sdk/bin/default/include/config.h"
test -f "$DIR.tmp/sdk/source3/include/vfs.h"
cd "$DIR.tmp"
rm -rf src ./*.tar.* ./*.dsc
echo "$VER" > stamp
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
echo "$DIR"
