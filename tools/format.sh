#!/usr/bin/env bash
# Reformats our C++ sources in place with .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
find core engine net ui app tests bench \( -name '*.cpp' -o -name '*.h' \) -print0 | xargs -0 clang-format -i
