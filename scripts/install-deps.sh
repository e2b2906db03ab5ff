#!/usr/bin/env bash
# Installs the Debian 12 packages Shardscope needs, skipping those already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-14-dev libomp-14-dev
  qt6-base-dev libqt6opengl6-dev qt6-charts-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6
  libgl-dev xvfb xauth fonts-dejavu-core
  libopenmpi-dev openmpi-bin libopenblas-dev
  zlib1g-dev nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev
  python3-torch
  openssh-server openssh-client slurm-wlm munge iproute2 debootstrap dpkg-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
