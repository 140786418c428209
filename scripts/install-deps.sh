#!/usr/bin/env bash
# Installs the Debian packages memtile needs to build and test (idempotent; only missing ones are fetched).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
      libcli11-dev nlohmann-json3-dev libfmt-dev libpcre2-dev libhwloc-dev libcpp-httplib-dev
      libgtest-dev libgmock-dev libbenchmark-dev clang-format python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[install-deps] installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
