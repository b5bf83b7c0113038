#!/usr/bin/env bash
# Installs the Debian packages tapegrad builds with, plus any named as arguments, when any
# is missing. Idempotent. An optional package that fails to install is reported, not fatal.
set -euo pipefail
packages=(cmake g++ make libeigen3-dev doctest-dev librandom123-dev nlohmann-json3-dev libcli11-dev
  libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin)
optional=("$@")
missing() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
need=$(missing "${packages[@]}")
want=$( [ ${#optional[@]} -gt 0 ] && missing "${optional[@]}" || true)
if [ -n "$need$want" ]; then
  echo "installing: $need $want"
  $sudo apt-get update -qq
fi
if [ -n "$need" ]; then
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
fi
if [ -n "$want" ]; then
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $want >/dev/null ||
    echo "note: could not install $want (optional)"
fi
