#!/usr/bin/env bash
# Builds Crowdtrain's packages: crowdtrain_<version>_amd64.deb (Depends from
# dpkg-shlibdeps plus the demo's corpus and Qt's plugins) and a .tar.gz of
# the same /usr tree, then runs lintian on the .deb (errors fail).
#   installer/package.sh [BUILD_DIR] [OUT_DIR]
# BUILD_DIR: a configured build tree (default build/release, configured with
# the release preset, after installing the dependencies, when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
out=${2:-$build/packages}
if [ ! -f "$build/CMakeCache.txt" ]; then
    installer/install-deps.sh
    cmake --preset release
fi
cmake --build "$build"
mkdir -p "$out"
out=$(realpath "$out")
(cd "$build" && cpack -B "$out" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log" >&2; exit 1; }
rm -rf "$out/_CPack_Packages"
deb=$(ls "$out"/crowdtrain_*_amd64.deb)
# Errors fail; the warnings left (listed in README's packaging notes) are printed.
lintian --fail-on error --tag-display-limit 0 "$deb" | tee "$out/lintian.txt"
ls -l "$out"/crowdtrain_*
