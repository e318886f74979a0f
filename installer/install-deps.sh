#!/usr/bin/env bash
# Takes a fresh Debian 12 machine (root, apt) to everything Crowdtrain's build,
# tests and benchmarks need. Idempotent, and quick when everything is present:
# it calls apt only for packages that are missing. Everything comes from
# Debian's binary packages (QCustomPlot too: its Qt 6 build, see
# cmake/QCustomPlot.cmake); no source package is fetched, and the apt
# sources are left as they are.
#
#   installer/install-deps.sh
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    sudo=sudo
else
    sudo=
fi

packages=(
    build-essential cmake ninja-build pkg-config git ca-certificates
    clang-format
    # Qt 6: Widgets, Test, Svg (icons); libgl-dev etc. come with qt6-base-dev.
    qt6-base-dev qt6-base-dev-tools qt6-svg-dev libqt6svg6
    # The charts: QCustomPlot 2.1 built for Qt 6 (the -dev package's header
    # serves its Qt 5 and Qt 6 builds, so it pulls qtbase5-dev along).
    libqcustomplot-dev libqcustomplot2.1-qt6
    # libtorch (CPU) and the c10d Gloo headers it needs.
    libtorch-dev libgloo-dev
    # Debian's default OpenBLAS (pthreads); without it libtorch's matmuls use
    # the slow reference BLAS. engine/cpu_runtime.cpp tunes it at start-up.
    libopenblas0-pthread
    # Networking, serialisation, storage.
    libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libsqlite3-dev libssl-dev libsodium-dev
    # The peer-to-peer swarm for checkpoints and model state (net/swarm).
    libtorrent-rasterbar-dev
    # JSON (encoder.json, config.json, safetensors headers); header-only.
    nlohmann-json3-dev
    # The programs' command-line parser (app/args.cpp); header-only.
    libcli11-dev
    # The public project page (crowdtrain-server --http): the HTTP server; and
    # the headless browser its test opens the page in (tests/tst_page.cpp,
    # tools/page-screenshots.sh).
    libcpp-httplib-dev chromium
    # The demo project's corpus: Debian's fortune cookies, real English text
    # (/usr/share/games/fortunes, about 2.4 MB; net/daemon/demo_hub.h).
    fortunes
    # systemd-analyze verifies the daemon's user unit in the tests.
    systemd
    # Screenshots and headless GUI runs.
    xvfb xauth
    # dpkg-shlibdeps for the package's Depends.
    dpkg-dev
    # The package (installer/package.sh): man pages from --help, its checks.
    help2man lintian appstream desktop-file-utils
    # The PyTorch reference used by bench/ and the safetensors checks in tests/.
    python3-torch python3-numpy
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "install-deps: all Debian packages present"
fi
