#!/usr/bin/env bash
# Reformats our C++ sources in place with .clang-format; with --check,
# changes nothing and lists the files that differ (exit 1 if any), as the
# `format` test does.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --check ]; then
    differ=$(find core engine net ui app tests bench \( -name '*.cpp' -o -name '*.h' \) -print0 \
        | { xargs -0 clang-format --dry-run 2>&1 || true; } | { grep ': warning: ' || true; } | cut -d: -f1 | sort -u)
    [ -z "$differ" ] || { echo "$differ"; exit 1; }
    exit 0
fi
find core engine net ui app tests bench \( -name '*.cpp' -o -name '*.h' \) -print0 | xargs -0 clang-format -i
