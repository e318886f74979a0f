#!/usr/bin/env bash
# Vendors uPlot (MIT, https://github.com/leeoniya/uPlot), the public project
# page's chart library, from the npm registry into resources/page/vendor/:
# a pinned version, its tarball checked against a pinned SHA-256, and the
# files' own SHA-256 written to SHA256SUMS, which the build checks
# (cmake/EmbedFiles.cmake) before it embeds them in crowdtrain-server.
# The page never loads anything from the internet at view time.
#
#   tools/vendor-uplot.sh     # needs npm (or curl) and network, once
set -euo pipefail

version=1.6.32
tarball_sha256=4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$here/resources/page/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if command -v npm >/dev/null; then
    (cd "$work" && npm pack --silent "uplot@$version" >/dev/null)
else
    curl -fsSL -o "$work/uplot-$version.tgz" "https://registry.npmjs.org/uplot/-/uplot-$version.tgz"
fi
echo "$tarball_sha256  $work/uplot-$version.tgz" | sha256sum -c --quiet
tar -xzf "$work/uplot-$version.tgz" -C "$work"
mkdir -p "$dest"
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" "$dest/"
cp "$work/package/LICENSE" "$dest/uPlot.LICENSE"
(cd "$dest" && sha256sum uPlot.iife.min.js uPlot.min.css > SHA256SUMS)
echo "vendor-uplot: uPlot $version in $dest"
