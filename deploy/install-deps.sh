#!/usr/bin/env bash
# Readies a fresh Debian 12 machine for building, testing and benchmarking
# nasgw. Idempotent and quiet; returns at once when everything is present.
# Later capabilities add their packages to PACKAGES below.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config ccache git
  clang-format clang-tidy  # make lint (run-clang-tidy comes with clang-tidy)
  # block layer; the metadata store (RocksDB)
  libiscsi-dev librocksdb-dev
  # tests
  libgtest-dev libgmock-dev python3 nlohmann-json3-dev
  # the FUSE head and the POSIX stress tools run through it
  libfuse3-dev fuse3 stress-ng
  # the SAN lab: tgtd targets, namespaces, rate limits; libiscsi tools for baselines
  tgt iproute2 libiscsi-bin procps
  # nasgwd: admin API (gRPC, protobuf), config (TOML), TLS test certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libtomlplusplus-dev openssl
  # handle MACs (HMAC-SHA256, fs/handle.cc)
  libssl-dev
  # the head-protocol decoder's libFuzzer run; the thread-safety build (make tsa)
  clang libclang-rt-14-dev
  # the NFS head: Debian's ganesha (runtime, FSAL_VFS for the benchmark's
  # peer), rpcbind for NFSv3, libnfs clients; the FSAL's compile needs the
  # source package's headers (deploy/ganesha-headers.sh) and these -dev
  # packages so its cmake configure matches Debian's feature set
  nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils libnfs-dev dpkg-dev
  libntirpc-dev liburcu-dev libkrb5-dev bison flex libdbus-1-dev libnfsidmap-dev
  libcap-dev libblkid-dev uuid-dev libacl1-dev libwbclient-dev
  # benchmark peer file system and chart; nfs-rs (PyPI) for NFSv4 tests
  xfsprogs python3-matplotlib python3-venv python3-pip
  # setfacl and getfacl: the POSIX ACL suite (fuse_lab.py acl)
  acl
  # the SMB head: Debian's smbd loads vfs_nasgw; smbclient and smbtorture as
  # clients; stock modules for the baseline share. The module compiles
  # against headers of Debian's samba source package (deploy/samba-headers.sh),
  # whose waf configure needs these
  samba smbclient samba-testsuite samba-vfs-modules libparse-yapp-perl
  libgnutls28-dev zlib1g-dev libpopt-dev libtalloc-dev libtevent-dev libtdb-dev
  libldb-dev libjansson-dev libarchive-dev libicu-dev
  # nasgw-smb-load, the SMB benchmark's clients (bench/smb_load.c)
  libsmbclient-dev
  # the controller pair (cluster/): Corosync membership and quorum over the
  # interconnect, through libcpg and libvotequorum
  corosync libcpg-dev libvotequorum-dev
  # NFSv4 reclaims after a takeover: nasgwd asks ganesha for its grace
  # period over DBus (dbus-send); the lab runs a bus per node (dbus-daemon)
  dbus-bin dbus-daemon
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tgt's package tries to start the system tgtd; the lab runs its own.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
