#!/usr/bin/env bash
# Fetches QCustomPlot's source from Debian's source package into DIR (default
# /opt/crowdtrain-deps/qcustomplot), so that cmake/QCustomPlot.cmake can build
# it against Qt 6. Debian's binary package is built for Qt 5 only.
# The pristine upstream source is kept (Debian's patches skipped): the build
# makes its own Qt 6 fix, see cmake/QCustomPlot.cmake.
# Idempotent: does nothing when DIR already holds qcustomplot.h/.cpp.
set -euo pipefail

dest=${1:-/opt/crowdtrain-deps/qcustomplot}
if [ -f "$dest/qcustomplot.h" ] && [ -f "$dest/qcustomplot.cpp" ]; then
    echo "fetch-qcustomplot: source present in $dest"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi

# `apt-get source` needs a deb-src entry; add one for the suites already used.
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "fetch-qcustomplot: adding a deb-src entry for Debian 12"
    $sudo tee /etc/apt/sources.list.d/crowdtrain-deb-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    $sudo apt-get update -qq
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 777 "$work"   # apt downloads as its own user, which must write there
(cd "$work" && apt-get source -qq --download-only qcustomplot >/dev/null && dpkg-source -x --no-check --skip-patches ./*.dsc src >/dev/null)
$sudo mkdir -p "$dest"
$sudo cp "$work/src/qcustomplot.h" "$work/src/qcustomplot.cpp" "$dest/"
[ -f "$work/src/GPL.txt" ] && $sudo cp "$work/src/GPL.txt" "$dest/" || true
echo "fetch-qcustomplot: source in $dest"
