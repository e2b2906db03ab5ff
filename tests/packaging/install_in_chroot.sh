#!/usr/bin/env bash
# The built packages on a clean Debian 12: debootstrap a minimal root, install the .debs there
# with apt (which must find every dependency they declare), then train with the engine (one rank,
# and two through mpirun), plan with the CLI, and start the app headless. A package that
# under-declares its dependencies fails here, not on a user's GPU host.
#   install_in_chroot.sh BUILD_DIR
# Exit 77 (skip) when a clean root cannot be made here: not root, no debootstrap, no mirror.
set -euo pipefail
build=$(cd "$1" && pwd)
mirror=${SHARDSCOPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
skip() { echo "install_in_chroot: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for debootstrap and chroot"
command -v debootstrap >/dev/null || skip "no debootstrap (Debian: debootstrap)"

work=$(mktemp -d /tmp/shardscope-chroot-XXXXXX)
root=$work/root
cleanup() {
  for m in dev/shm dev proc; do umount "$root/$m" 2>/dev/null || umount -l "$root/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "== packages"
(cd "$build" && cpack -G DEB -B "$work/debs" >/dev/null)
ls "$work"/debs/*.deb

echo "== a clean Debian 12 root from $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" > "$work/debootstrap.log" 2>&1 \
  || skip "debootstrap failed (no network to $mirror?): $(tail -3 "$work/debootstrap.log")"
mount -t proc proc "$root/proc"
# A /dev of its own, not a bind of this machine's: with shared mount propagation a tmpfs mounted
# on a bound /dev/shm would replace this machine's /dev/shm, under every MPI job running here.
mount -t tmpfs -o mode=755 tmpfs "$root/dev"
for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" "tty c 5 0"; do
  set -- $node
  mknod -m 666 "$root/dev/$1" "$2" "$3" "$4"
done
mkdir -p "$root/dev/shm" "$root/dev/pts"
mount -t tmpfs tmpfs "$root/dev/shm"
cp "$work"/debs/*.deb "$root/tmp/"
engine_deb=/tmp/$(basename "$work"/debs/shardscope-engine_*.deb)
app_deb=/tmp/$(basename "$work"/debs/shardscope_*.deb)
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

echo "== installing: apt resolves what the packages declare"
in_root apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -q --no-install-recommends \
  "$engine_deb" > "$work/apt-engine.log" 2>&1 || { cat "$work/apt-engine.log"; exit 1; }

echo "== the engine, alone"
in_root shardscope-engine version
in_root shardscope-engine train --steps 25 --warmup-steps 2 --out /tmp/run1 -q
echo "== the engine, two ranks through mpirun"
in_root env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  shardscope-engine train --dp 2 --ranks 2 --steps 25 --warmup-steps 2 --out /tmp/run2 -q
echo "== the CLI"
in_root shardscope-cli plan --model llama3-8b --nodes 1 --tp 8 --pp 1 | head -3
in_root shardscope-cli report /tmp/run2 | head -8

echo "== the app, headless"
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -q --no-install-recommends \
  "$app_deb" > "$work/apt-app.log" 2>&1 || { cat "$work/apt-app.log"; exit 1; }
in_root env QT_QPA_PLATFORM=offscreen shardscope --render memory -o /tmp/memory.png
test -s "$root/tmp/memory.png"
echo "install_in_chroot: both packages install on a clean Debian 12 and run"
