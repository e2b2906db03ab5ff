#!/usr/bin/env bash
# Packs what a GPU machine without Debian's libraries needs to run the CUDA backend's checks: the
# gpu test programs, the engine with its CUDA plugin, and every shared library they load that such
# a machine may lack (OpenBLAS, Open MPI's libraries, ...), stripped. The GPU machine brings its
# own C library, C++ runtime, driver and NVIDIA libraries (cuBLASLt).
#
#   scripts/device-bundle.sh [BUILD_DIR] [OUT_DIR]      (defaults: build/dev, .device-bundle)
#
# It leaves OUT_DIR and OUT_DIR.tar.xz (about 20 MB: the folder is about 120 MB, most of it
# OpenBLAS and the test programs, over the device tool's 64 MiB carry limit). On the GPU machine, from the repository
# root: tar -xJf .device-bundle.tar.xz && .device-bundle/run.sh [regex of test programs] (or
# scripts/gpu-check.sh, which also trains, profiles and benchmarks). It
# runs every gpu test program and prints what each says; the engine in OUT_DIR/bin finds its
# plugin in OUT_DIR/lib/shardscope (for bench/engine/gpu_vs_torch.py).
# Layouts across ranks (test_cuda_layouts) start the engine under mpirun: the bundle carries
# Debian's Open MPI (mpirun, orted, their plugins, PMIx) under OUT_DIR/mpi/usr, found there
# through OPAL_PREFIX, Open MPI's relocation variable.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
out=${2:-.device-bundle}
[ -x "$build/kernels/cuda/libshardscope-cuda.so" ] || {
  echo "no CUDA build in $build: run cmake --preset dev && cmake --build --preset dev where nvcc is" >&2
  exit 2
}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/shardscope" "$out/tests"
cp "$build/engine/tools/shardscope-engine" "$build/engine/tools/shardscope-cli" "$out/bin/"
cp "$build/kernels/cuda/libshardscope-cuda.so" "$out/lib/shardscope/"
for t in "$build"/tests/runtime/test_cuda_*; do
  [ -x "$t" ] && [ -f "$t" ] && cp "$t" "$out/tests/"
done

# Open MPI as Debian lays it out, under OUT_DIR/mpi: its launcher, its daemon, the plugins it
# opens at run time (not listed by ldd), PMIx's, and the help texts its messages are made from.
mpi_root=$(dirname "$(dirname "$(readlink -f "$(command -v orterun)")")")
[ "$mpi_root" = /usr ] || { echo "expected Debian's Open MPI under /usr (found $mpi_root)" >&2; exit 2; }
mpi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_plugins=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
mkdir -p "$out/mpi/usr/bin" "$out/mpi$mpi_plugins" "$out/mpi$pmix_plugins" "$out/mpi/usr/share"
cp -L /usr/bin/orterun /usr/bin/orted "$out/mpi/usr/bin/"
ln -s orterun "$out/mpi/usr/bin/mpirun"
cp -L "$mpi_plugins"/*.so "$out/mpi$mpi_plugins/"
cp -L "$pmix_plugins"/*.so "$out/mpi$pmix_plugins/"
cp -r /usr/share/openmpi "$out/mpi/usr/share/"
cp -rL /usr/lib/x86_64-linux-gnu/pmix2/share "$out/mpi/usr/lib/x86_64-linux-gnu/pmix2/"

# Every library the programs load, except what the GPU machine has itself.
keep_out='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|libgcc_s|libstdc\+\+|libcuda\.so|libcublas|libnccl'
for f in "$out"/bin/* "$out"/lib/shardscope/* "$out"/tests/* "$out"/mpi/usr/bin/orte* \
  "$out/mpi$mpi_plugins"/*.so "$out/mpi$pmix_plugins"/*.so; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -Ev "$keep_out" | while read -r lib; do
  cp -L "$lib" "$out/lib/"
done
strip --strip-debug "$out"/bin/* "$out"/lib/shardscope/* "$out"/tests/* "$out"/lib/*.so* \
  "$out"/mpi/usr/bin/orte* "$out/mpi$mpi_plugins"/*.so "$out/mpi$pmix_plugins"/*.so 2>/dev/null || true

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled gpu test programs on this machine (see scripts/device-bundle.sh).
here=$(cd "$(dirname "$0")" && pwd)
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
py_libs=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$here/lib:${cuda_libs}${py_libs}:${LD_LIBRARY_PATH:-}"
export SHARDSCOPE_CUDA_BACKEND="$here/lib/shardscope/libshardscope-cuda.so"
# The layouts test runs the bundled engine under the bundled mpirun. Open MPI finds its plugins
# and help texts from OPAL_PREFIX, PMIx its own from PMIX_PREFIX (both relocate Debian's
# /usr); the ranks share this host, so messages go through shared memory with plain copies (a
# container may forbid the cross-process reads of the faster path).
export SHARDSCOPE_TEST_ENGINE="$here/bin/shardscope-engine"
export PATH="$here/mpi/usr/bin:$PATH"
export OPAL_PREFIX="$here/mpi/usr"
export PMIX_PREFIX="$here/mpi/usr/lib/x86_64-linux-gnu/pmix2"
export OMPI_MCA_pml=ob1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
for t in "$here"/tests/*; do
  [ -n "${1:-}" ] && ! [[ "$(basename "$t")" =~ $1 ]] && continue
  echo "=== $(basename "$t")"
  # One hung kernel must not take the others' time: each program gets TEST_TIMEOUT seconds
  # (the layouts, 16 short training runs under mpirun, LAYOUTS_TIMEOUT).
  limit=${TEST_TIMEOUT:-120}
  [ "$(basename "$t")" = test_cuda_layouts ] && limit=${LAYOUTS_TIMEOUT:-300}
  timeout "$limit" "$t" --gtest_brief=1 || { echo "=== $(basename "$t") failed (exit $?)"; status=1; }
done
exit $status
RUN
chmod +x "$out/run.sh"
tar -cJf "$out.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
du -sh "$out" "$out.tar.xz"
