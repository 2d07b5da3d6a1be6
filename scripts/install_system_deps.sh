#!/usr/bin/env bash
# Installs the Debian packages headless MuJoCo rendering needs (EGL + OSMesa), when running as root
# and they are missing. As a non-root user it only reports what is missing.
set -euo pipefail
pkgs=(libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libosmesa6)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian packages for headless rendering: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "warning: missing Debian packages for headless rendering: ${missing[*]}" >&2
  echo "         install them with: sudo apt-get install ${missing[*]}" >&2
fi
