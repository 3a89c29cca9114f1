# Sourced by the scripts that build against a Debian source package's headers
# (ganesha-headers.sh, samba-headers.sh): what they share.
#
#   debsrc_version NAME PKG        prints the installed version of PKG (exits 1 if none)
#   debsrc_enable NAME             enables deb-src (a copy of debian.sources) if it is not
#   debsrc_fetch PKG VER           downloads PKG's source package (VER, else any) into .
#
# NAME prefixes the messages.

debsrc_version() {
  local v
  v=$(dpkg-query -W -f='${Version}' "$2" 2>/dev/null || true)
  if [ -z "$v" ]; then
    echo "$1: $2 is not installed (run deploy/install-deps.sh)" >&2
    exit 1
  fi
  echo "$v"
}

debsrc_enable() {
  if grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ || grep -qs '^deb-src' /etc/apt/sources.list; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "$1: need root to enable deb-src" >&2
    exit 1
  fi
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
    > /etc/apt/sources.list.d/nasgw-deb-src.sources
  apt-get update -qq
}

# The mirror may lack the Debian diff: callers judge by the files they
# need, not by apt-get's exit status.
debsrc_fetch() {
  apt-get source --download-only -qq "$1=$2" >/dev/null 2>&1 ||
    apt-get source --download-only -qq "$1" >/dev/null 2>&1 || true
}
