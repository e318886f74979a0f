#!/usr/bin/env bash
# The package's test (CTest label `package`): builds the .deb and .tar.gz
# from BUILD_DIR, checks their contents and Depends, lintian (no errors),
# the desktop entry and AppStream metadata; installs the .deb into a
# throw-away root with `dpkg --root` (a debootstrap chroot would download
# Qt, libtorch and their dependencies, about 1 GB, on every run, so the
# installed programs run against this machine's libraries instead);
# runs crowdtrain-worker --version, the headless demo and the GUI (Xvfb)
# from the installed paths; removes the package and checks that nothing but
# the user's own data is left.
# The CUDA core's package (installer/cuda-package.sh, from build/core-cuda,
# which CTest's cuda_core test builds first) is installed beside it: its core
# starts, says it finds no device (this machine has no GPU), and the daemon,
# asked for CUDA, trains the demo on the CPU core and says why in `status`.
#   installer/package-test.sh BUILD_DIR [CORE_CUDA_BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "$1")
core_cuda=$(realpath "${2:-$here/../build/core-cuda}")
work=$(mktemp -d /tmp/crowdtrain-package.XXXXXX)
daemon=
cleanup() {
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$here/package.sh" "$build" "$work/out"
deb=$(ls "$work"/out/crowdtrain_*_amd64.deb)
tgz=$(ls "$work"/out/crowdtrain_*_amd64.tar.gz)
"$here/cuda-package.sh" "$core_cuda" "$work/out"
cuda_deb=$(ls "$work"/out/crowdtrain-core-cuda_*_amd64.deb)

# Contents.
dpkg-deb -c "$deb" | awk '{print $6}' > "$work/contents"
for path in ./usr/bin/crowdtrain ./usr/bin/crowdtrain-worker ./usr/bin/crowdtrain-server \
    ./usr/bin/crowdtrain-prepare ./usr/bin/crowdtrain-train ./usr/libexec/crowdtrain/crowdtrain-daemon \
    ./usr/libexec/crowdtrain/crowdtrain-core \
    ./usr/share/applications/io.github.crowdtrain.Crowdtrain.desktop \
    ./usr/share/metainfo/io.github.crowdtrain.Crowdtrain.metainfo.xml \
    ./usr/share/icons/hicolor/scalable/apps/io.github.crowdtrain.Crowdtrain.svg \
    ./usr/lib/systemd/user/crowdtrain-worker.service \
    ./usr/share/bash-completion/completions/crowdtrain-worker \
    ./usr/share/doc/crowdtrain/copyright ./usr/share/doc/crowdtrain/changelog.gz \
    ./usr/share/man/man1/crowdtrain.1.gz ./usr/share/man/man1/crowdtrain-worker.1.gz \
    ./usr/share/man/man1/crowdtrain-server.1.gz ./usr/share/man/man1/crowdtrain-prepare.1.gz \
    ./usr/share/man/man1/crowdtrain-train.1.gz; do
    grep -qx "$path" "$work/contents" || fail "the package lacks $path"
done
dpkg-deb -c "$cuda_deb" | awk '{print $6}' > "$work/cuda-contents"
for path in ./usr/libexec/crowdtrain/crowdtrain-core-cuda ./usr/libexec/crowdtrain/cuda-lib/libtorch_cuda.so \
    ./usr/libexec/crowdtrain/cuda-lib/libcudart.so.13 ./usr/libexec/crowdtrain/cuda-lib/libcublasLt.so.13 \
    ./usr/libexec/crowdtrain/cuda-lib/libcudnn.so.9 ./usr/libexec/crowdtrain/cuda-lib/libnccl.so.2 \
    ./usr/share/doc/crowdtrain-core-cuda/copyright; do
    grep -qx "$path" "$work/cuda-contents" || fail "the CUDA core's package lacks $path"
done
grep -q "/libcuda\.so" "$work/cuda-contents" && fail "the CUDA core's package bundles the driver's libcuda.so"
version=$(dpkg-deb -f "$deb" Version)
grep -qF "crowdtrain (= $version)" <<<"$(dpkg-deb -f "$cuda_deb" Depends)" \
    || fail "crowdtrain-core-cuda does not depend on crowdtrain $version"
echo "crowdtrain-core-cuda: $(du -m "$cuda_deb" | cut -f1) MiB to download, $(($(dpkg-deb -f "$cuda_deb" Installed-Size) / 1024)) MiB installed"
tar -tzf "$tgz" > "$work/tgz-contents"
grep -q "/usr/bin/crowdtrain-worker$" "$work/tgz-contents" || fail "the .tar.gz lacks usr/bin/crowdtrain-worker"

# Depends: computed from the programs, plus what dpkg-shlibdeps cannot see.
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for want in libtorch libqt6widgets6 libqt6svg6 libqcustomplot2.1-qt6 libzmq5 libsqlite3-0 libsodium23 fortunes qt6-qpa-plugins; do
    grep -q "$want" <<<"$depends" || fail "Depends lacks $want"
done

# The desktop entry and AppStream metadata are valid.
dpkg-deb -x "$deb" "$work/extracted"
desktop-file-validate "$work/extracted/usr/share/applications/io.github.crowdtrain.Crowdtrain.desktop"
appstreamcli validate --no-net --pedantic \
    "$work/extracted/usr/share/metainfo/io.github.crowdtrain.Crowdtrain.metainfo.xml" | tee "$work/appstream.txt"
grep -q "^E:" "$work/appstream.txt" && fail "appstreamcli found errors"
grep -q "ExecStart=/usr/bin/crowdtrain-worker run" "$work/extracted/usr/lib/systemd/user/crowdtrain-worker.service" \
    || fail "the systemd unit does not start /usr/bin/crowdtrain-worker"

# Install into a throw-away root.
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
# --force-depends: the root has no Debian of its own; the programs run
# against this machine's libraries, which the Depends above name.
dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless --log=/dev/null -i "$deb" \
    >"$work/dpkg-install.log" 2>&1 || { cat "$work/dpkg-install.log" >&2; fail "dpkg -i"; }
grep -q "^Status: install ok installed" <<<"$(dpkg --root="$root" -s crowdtrain)" || fail "dpkg does not list crowdtrain"
grep -q "^crowdtrain-worker " <<<"$("$root/usr/bin/crowdtrain-worker" --version)" || fail "crowdtrain-worker --version"
dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless --log=/dev/null -i "$cuda_deb" \
    >"$work/dpkg-install-cuda.log" 2>&1 || { cat "$work/dpkg-install-cuda.log" >&2; fail "dpkg -i crowdtrain-core-cuda"; }
# The installed CUDA core runs from its own libraries (no LD_LIBRARY_PATH)
# and, with no GPU here, says so.
env -u LD_LIBRARY_PATH "$root/usr/libexec/crowdtrain/crowdtrain-core-cuda" probe >"$work/cuda-probe.json" \
    || fail "the installed CUDA core did not start"
cat "$work/cuda-probe.json"
grep -q '"family":"cuda"' "$work/cuda-probe.json" || fail "the CUDA core does not say it is one"
grep -q '"devices":\["cpu"\]' "$work/cuda-probe.json" || fail "the CUDA core lists a GPU on a machine without one"
grep -q 'no CUDA device' "$work/cuda-probe.json" || fail "the CUDA core does not say why it finds no device"

# The headless demo from the installed paths, as a new user.
export HOME=$work/home XDG_RUNTIME_DIR=$work/home/run XDG_CONFIG_HOME=$work/home/config
export XDG_DATA_HOME=$work/home/data XDG_CACHE_HOME=$work/home/cache
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
"$root/usr/bin/crowdtrain-worker" run >"$work/daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do "$root/usr/bin/crowdtrain-worker" status >/dev/null 2>&1 && break; sleep 0.2; done
# Asked for CUDA: the daemon tries the installed CUDA core, which refuses.
"$root/usr/bin/crowdtrain-worker" settings set device cuda >/dev/null
"$root/usr/bin/crowdtrain-worker" join demo demo-fortunes >/dev/null
accepted=0
for _ in $(seq 240); do
    accepted=$("$root/usr/bin/crowdtrain-worker" status --json 2>/dev/null \
        | sed -n 's/.*"accepted": *\([0-9]*\).*/\1/p')
    [ "${accepted:-0}" -ge 1 ] && break
    sleep 0.5
done
[ "${accepted:-0}" -ge 1 ] || { cat "$work/daemon.log" >&2; fail "the installed demo accepted no task"; }
echo "installed demo: $accepted task(s) accepted"
"$root/usr/bin/crowdtrain-worker" status --json >"$work/status.json"
grep -q '"core": *"cpu"' "$work/status.json" || { cat "$work/status.json" >&2; fail "the daemon did not fall back to the CPU core"; }
grep -q '"cuda_refusal": *"[^"]*no CUDA device' "$work/status.json" \
    || { cat "$work/status.json" >&2; fail "status does not say why the CUDA core was not used"; }

# The GUI from the installed path, under Xvfb, for a few seconds.
xvfb-run -a -s "-screen 0 1280x860x24" "$root/usr/bin/crowdtrain" --quit-after-ms 4000 >"$work/gui.log" 2>&1 \
    || { cat "$work/gui.log" >&2; fail "the installed GUI did not run"; }

kill "$daemon"
wait "$daemon" || true
daemon=

# Removal leaves nothing of the package; the user's data stays.
dpkg --root="$root" --force-not-root --force-script-chrootless --log=/dev/null --purge crowdtrain-core-cuda crowdtrain
left=$(find "$root" -path "$root/var/lib/dpkg" -prune -o -type f -print | wc -l)
[ "$left" -eq 0 ] || { find "$root" -path "$root/var/lib/dpkg" -prune -o -type f -print >&2; fail "$left files left after removal"; }
[ -f "$XDG_DATA_HOME/crowdtrain/identity.key" ] || fail "the user's identity was not kept"
echo "package test passed"
