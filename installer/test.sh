#!/usr/bin/env bash
# Installs everything, builds the `ci` preset (the `release` build that
# installer/run.sh and the package make, plus -Werror) and runs every test.
# This is README's test command and what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."
installer/install-deps.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci
