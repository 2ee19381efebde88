#!/usr/bin/env bash
# Builds the binaries a bare GPU node needs and bundles them with the shared libraries that node
# lacks, so that `ci/gpu-check.sh --bundle DIR` runs there without any Debian package:
#
#   bash ci/gpu-bundle.sh [OUT_DIR]                  # build preset gpu-bundle, bundle, verify
#   bash ci/gpu-bundle.sh OUT_DIR --build-dir DIR    # bundle an existing build instead (no build)
#   bash ci/gpu-bundle.sh --verify OUT_DIR           # only the proof, on an existing bundle
#   (--no-verify: bundle without the proof, which needs root; --pack-over MiB: see lib-packed;
#    --any-march: accept a --build-dir not built for x86-64-v3, e.g. -march=native, which may
#    stop with "illegal instruction" on the node's CPU: for tests on this machine only)
#
# OUT_DIR (default dist/gpu-bundle, git-ignored; it travels to the GPU node as a carried path):
#   bin/               tripod, tripod_gpu_tests (debug sections stripped, symbols kept; packed below
#                      when over the threshold)
#   lib/               every library they need that is neither the node's C runtime nor CUDA
#   lib/compat/        libstdc++ and libgcc_s: used only where the node's own are too old for the
#                      binaries (gpu-check.sh asks ldd), since a newer one serves an older binary
#   lib/glibc/         this machine's loader and glibc: used only where the node's glibc is older
#                      than the binaries need (bundle.json: glibc_required); then gpu-check.sh
#                      starts tripod through lib/glibc/ld-linux-x86-64.so.2 --library-path ...
#   lib-packed.tar.xz  the binaries and libraries over --pack-over MiB (default 1: OpenBLAS alone is
#                      ~36 MiB, every CPU's kernels), xz-compressed, paths relative to OUT_DIR: a
#                      user copies OUT_DIR and unpacks it in the copy (gpu-check.sh does)
#   openmpi/           Open MPI's launcher (orterun = mpirun, orted), its run-time plugins (mca
#                      components, PMIx's plugins), help texts and settings, relocated by
#                      openmpi/env.sh (OPAL_PREFIX and friends): multi-rank runs on a node without
#                      Open MPI (the staged conform, NCCL). Fabric plugins (UCX, OFI, PSM, verbs,
#                      OpenSHMEM) are left out: a single node's ranks talk through shared memory.
#   MANIFEST.txt, bundle.json  what was bundled, from where, sizes, and what the node must provide
#
# Never bundled: CUDA's libcudart, libcublas, libcublasLt, NCCL (the node's CUDA 13 toolkit in
# /usr/local/cuda/lib64, or the nvidia-* pip packages' lib folders: gpu-check.sh looks in both)
# and libcuda (the driver). --verify runs where no Open MPI folder of this machine is visible: the
# single-process commands without MPI_Init, and a 2-rank `bench comm` through openmpi/.
# The build uses TRIPOD_MARCH=x86-64-v3 (AVX2/FMA), not -march=native: the node's CPU is another.
#
# --verify DIR, the proof. In a private mount namespace (unshare -m: root only), chroot'ed into
# fake roots, with `env -i`:
#   1. a root with only the loader and glibc (as every node has) + the bundle (+ this machine's
#      CUDA library folder standing in for the node's, when the binaries need CUDA): the loader's
#      --list resolves every library into the bundle, glibc or CUDA; tripod data synthetic, train
#      --config tiny (3 steps), check-backend (emulated vs cpu), bench gemm-rate run;
#      tripod_gpu_tests, when bundled, starts and skips (no GPU);
#   2. a root with no system library at all: the same train through lib/glibc's loader;
#   3. a control that the proof can fail: tripod without the bundle's lib/ must not start.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

OUT=""
BUILD_DIR=""
VERIFY_ONLY=0
NO_VERIFY=0
PACK_OVER_MIB=1
ANY_MARCH=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR=$(cd "$2" && pwd); shift 2 ;;
    --verify) VERIFY_ONLY=1; OUT=${2:?--verify needs the bundle folder}; shift 2 ;;
    --pack-over) PACK_OVER_MIB=${2:?--pack-over needs MiB}; shift 2 ;;
    --no-verify) NO_VERIFY=1; shift ;;
    --any-march) ANY_MARCH=1; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu-bundle: unknown option $1" >&2; usage ;;
    *) OUT=$1; shift ;;
  esac
done
OUT=${OUT:-$ROOT/dist/gpu-bundle}

# Sonames the node provides. Base: the C runtime every Linux has (glibc, its loader, libmvec).
is_base_lib() {
  case "$1" in
    linux-vdso.so.*|ld-linux-x86-64.so.*|libc.so.6|libm.so.6|libmvec.so.1|libpthread.so.0|libdl.so.2|librt.so.1) return 0 ;;
  esac
  return 1
}
# CUDA: the node's toolkit and driver (a bundled copy could mismatch its driver).
is_cuda_lib() {
  case "$1" in
    libcuda.so.*|libcudart.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*|libnvidia-*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}
is_compat_lib() { case "$1" in libstdc++.so.6|libgcc_s.so.1) return 0 ;; esac; return 1; }

# "soname path" for every library ldd resolves for a binary ("soname not-found" when it cannot).
resolved_libs() {
  ldd "$1" | awk '
    /=>/ { if ($3 == "not") print $1, "not-found"; else if ($3 ~ /^\//) print $1, $3; next }
    /^[ \t]*\// { n = split($1, p, "/"); print p[n], $1 }'
}

build() {
  echo "== building preset gpu-bundle (build/gpu-bundle, TRIPOD_MARCH=x86-64-v3)"
  (cd "$ROOT" && cmake --preset gpu-bundle && cmake --build --preset gpu-bundle -j "$(nproc)" --target tripod tripod_gpu_tests)
  BUILD_DIR=$ROOT/build/gpu-bundle
}

# Copies one library (the file a symlink chain ends at) under its soname into OUT/DIR, or into
# the packing tree when it is large; one MANIFEST line.
add_lib() {  # soname path dir(lib|lib/compat|lib/glibc)
  local soname=$1 real dir=$3 dest
  real=$(readlink -f "$2")
  if [ "$(stat -c %s "$real")" -gt $((PACK_OVER_MIB * 1024 * 1024)) ]; then dest=$PACK_DIR/$dir; else dest=$OUT/$dir; fi
  mkdir -p "$dest"
  cp "$real" "$dest/$soname"
  chmod u+w "$dest/$soname"
  # The loader must keep its symbols; every other library loses only what linking does not need.
  [ "$dir" = lib/glibc ] || strip --strip-unneeded "$dest/$soname" 2>/dev/null || true
  printf '%-28s %10s  %-10s %-6s %s\n' "$soname" "$(stat -c %s "$dest/$soname")" "$dir" \
         "$([ "$dest" = "$OUT/$dir" ] && echo plain || echo packed)" "$real" >>"$OUT/MANIFEST.txt"
}

# A binary, its debug sections stripped, into OUT/bin or (over the threshold: xz shrinks them ~4x) the packing tree.
add_binary() {
  local name dest
  name=$(basename "$1")
  dest=$OUT/bin
  [ "$(stat -c %s "$1")" -le $((PACK_OVER_MIB * 1024 * 1024)) ] || dest=$PACK_DIR/bin
  mkdir -p "$dest"
  cp "$1" "$dest/$name"
  # Debug sections go, the symbol table stays (~0.1 MiB packed): a debugger on the node, and
  # reports/symbolize_stack.py anywhere, name the functions of a crash report's frames.
  strip --strip-debug "$dest/$name"
  printf '%-28s %10s  %-10s %-6s %s\n' "$name" "$(stat -c %s "$dest/$name")" bin \
         "$([ "$dest" = "$OUT/bin" ] && echo plain || echo packed)" "$1" >>"$OUT/MANIFEST.txt"
}

# Open MPI's launcher and plugins into OUT/openmpi (see the header), their libraries into lib/.
OMPI_PKGLIB=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
PMIX_PLUGINS=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
OMPI_LEFT_OUT='ucx|ofi|psm|verbs|openib|usnic|portals|spml|sshmem|scoll|memheap|atomic_|oshmem|monitoring|java'
add_openmpi() {
  local o=$OUT/openmpi f soname path
  mkdir -p "$o/bin" "$o/lib/openmpi3" "$o/lib/pmix" "$o/share" "$o/etc"
  cp /usr/bin/orterun /usr/bin/orted "$o/bin/"
  ln -s orterun "$o/bin/mpirun"  # the name the README's commands use (openmpi/env.sh puts bin/ on PATH)
  for f in "$OMPI_PKGLIB"/*.so; do
    [[ "$(basename "$f")" =~ $OMPI_LEFT_OUT ]] || cp "$f" "$o/lib/openmpi3/"
  done
  cp "$PMIX_PLUGINS"/*.so "$o/lib/pmix/"
  cp -r /usr/share/openmpi "$o/share/openmpi"
  cp /etc/openmpi/openmpi-mca-params.conf "$o/etc/"
  for f in "$o"/bin/* "$o"/lib/openmpi3/*.so "$o"/lib/pmix/*.so; do
    while read -r soname path; do
      [ -z "${seen[$soname]:-}" ] || continue
      seen[$soname]=1
      if is_cuda_lib "$soname" || is_base_lib "$soname"; then continue; fi
      [ "$path" != not-found ] || { echo "gpu-bundle: error: $f needs $soname, not found here" >&2; exit 1; }
      if is_compat_lib "$soname"; then add_lib "$soname" "$path" lib/compat; else add_lib "$soname" "$path" lib; fi
    done < <(resolved_libs "$f")
  done
  # Sourced by gpu-check-lib.sh: Open MPI and PMIx find their parts under the bundle, not /usr.
  cat >"$o/env.sh" <<'ENV'
# shellcheck shell=sh
# Source it from bash (it finds its folder), or from any sh with TRIPOD_OPENMPI=this folder.
_ompi=${TRIPOD_OPENMPI:-}
if [ -z "$_ompi" ] && [ -n "${BASH_SOURCE:-}" ]; then _ompi=$(cd "${BASH_SOURCE%/*}" && pwd); fi
[ -n "$_ompi" ] || { echo "openmpi/env.sh: source it from bash, or set TRIPOD_OPENMPI" >&2; return 1; }
export OPAL_PREFIX=$_ompi OPAL_EXEC_PREFIX=$_ompi OPAL_BINDIR=$_ompi/bin OPAL_LIBDIR=$_ompi/lib \
       OPAL_PKGLIBDIR=$_ompi/lib/openmpi3 OPAL_DATAROOTDIR=$_ompi/share OPAL_DATADIR=$_ompi/share \
       OPAL_PKGDATADIR=$_ompi/share/openmpi OPAL_SYSCONFDIR=$_ompi/etc \
       PMIX_MCA_mca_base_component_path=$_ompi/lib/pmix
export PATH=$_ompi/bin:$PATH
# Without ssh (a bare node), mpirun's default launcher refuses to start even local ranks; the
# isolated launcher starts them on this node only.
command -v ssh >/dev/null 2>&1 || command -v rsh >/dev/null 2>&1 || export OMPI_MCA_plm=isolated
# A process started without mpirun (a singleton: the GPU tests' NCCL case) would start orted through
# the node's own loader, which finds none of the bundle's libraries where tripod runs through the
# bundled glibc's loader (no LD_LIBRARY_PATH then); isolated, a singleton starts no orted.
export OMPI_MCA_ess_singleton_isolated=1
unset _ompi
ENV
  printf '%-28s %10s  %-10s %-6s %s\n' openmpi/ "$(du -sb "$o" | cut -f1)" openmpi plain \
         "orterun, orted, $(find "$o/lib" -name '*.so' | wc -l) plugins" >>"$OUT/MANIFEST.txt"
}

bundle() {
  local binaries=("$BUILD_DIR/reference/tripod")
  if [ -x "$BUILD_DIR/suites/tripod_gpu_tests" ]; then
    binaries+=("$BUILD_DIR/suites/tripod_gpu_tests")
  else
    echo "gpu-bundle: note: $BUILD_DIR has no suites/tripod_gpu_tests (a build without CUDA): bundling tripod alone"
  fi
  [ -x "${binaries[0]}" ] || { echo "gpu-bundle: error: ${binaries[0]} not found (build first)" >&2; exit 1; }
  local march
  march=$(grep -s '^TRIPOD_MARCH' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2 || true)
  if [ "$march" != x86-64-v3 ] && [ "$ANY_MARCH" = 0 ]; then
    echo "gpu-bundle: error: $BUILD_DIR is built for -march=${march:-?}, not x86-64-v3: on the GPU node's CPU it may" \
         "stop with 'illegal instruction'. Bundle the gpu-bundle preset (no --build-dir), or pass --any-march." >&2
    exit 1
  fi
  rm -rf "$OUT"
  mkdir -p "$OUT/bin" "$OUT/lib"
  PACK_DIR=$(mktemp -d)
  printf '%-28s %10s  %-10s %-6s %s\n' "library" "bytes" "folder" "stored" "copied from" >"$OUT/MANIFEST.txt"
  declare -A seen=()
  local cuda_needed=() missing=() bin soname path
  for bin in "${binaries[@]}"; do
    add_binary "$bin"
    while read -r soname path; do
      [ -z "${seen[$soname]:-}" ] || continue
      seen[$soname]=1
      if is_cuda_lib "$soname"; then cuda_needed+=("$soname"); continue; fi
      if [ "$path" = "not-found" ]; then missing+=("$soname"); continue; fi
      if is_base_lib "$soname"; then
        [[ "$soname" == linux-vdso* ]] || add_lib "$soname" "$path" lib/glibc
      elif is_compat_lib "$soname"; then
        add_lib "$soname" "$path" lib/compat
      else
        add_lib "$soname" "$path" lib
      fi
    done < <(resolved_libs "$bin")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-bundle: error: ldd finds no ${missing[*]} for the binaries here: cannot bundle them" >&2
    exit 1
  fi
  add_openmpi
  # libmvec is glibc's too, though only binaries using vector maths name it.
  [ -n "${seen[libmvec.so.1]:-}" ] || add_lib libmvec.so.1 /lib/x86_64-linux-gnu/libmvec.so.1 lib/glibc
  if [ -n "$(find "$PACK_DIR" -type f -print -quit)" ]; then
    # xz -9 for the bundle that travels; the CI test that only checks the bundle works asks for a
    # fast level (TRIPOD_BUNDLE_XZ_LEVEL=0) instead of half a minute of compression.
    local level=${TRIPOD_BUNDLE_XZ_LEVEL:-9}
    echo "== compressing the libraries over ${PACK_OVER_MIB} MiB (xz -$level)"
    tar -C "$PACK_DIR" -cf - . | xz "-$level" -T0 >"$OUT/lib-packed.tar.xz"
  fi
  rm -rf "$PACK_DIR"
  local glibc cuda_list
  glibc=$(objdump_all 2>/dev/null)
  glibc=$(echo "$glibc" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  cuda_list=$(printf '%s\n' "${cuda_needed[@]:-}" | grep . | sort -u | paste -sd, - || true)
  cat >"$OUT/bundle.json" <<EOF
{
  "built_from": "$BUILD_DIR",
  "git_commit": "$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)",
  "git_dirty": $( [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null | head -1)" ] && echo true || echo false ),
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "march": "$(grep -s '^TRIPOD_MARCH' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)",
  "binaries": [$(for bin in "${binaries[@]}"; do printf '"%s"\n' "$(basename "$bin")"; done | paste -sd, -)],
  "node_must_provide": {"glibc_required": "$glibc", "cuda_sonames": "$cuda_list"},
  "bytes": $(du -sb "$OUT" | cut -f1)
}
EOF
  echo "== bundle $OUT: $(du -sh "$OUT" | cut -f1) ($(du -sb "$OUT" | cut -f1) bytes; lib-packed.tar.xz" \
       "$(stat -c %s "$OUT/lib-packed.tar.xz" 2>/dev/null || echo 0) bytes)"
  cat "$OUT/MANIFEST.txt"
  echo "the node must provide: glibc >= ${glibc#GLIBC_} (else lib/glibc is used); CUDA: ${cuda_list:-none}"
}

# objdump -T of every bundled file outside lib/glibc, packed ones included: the highest GLIBC_
# version any of them asks for is what the node's glibc must have.
objdump_all() {
  local tmp f
  tmp=$(mktemp -d)
  cp -r "$OUT/bin" "$OUT/lib" "$tmp/"
  [ ! -f "$OUT/lib-packed.tar.xz" ] || tar -C "$tmp" -xJf "$OUT/lib-packed.tar.xz"
  find "$tmp/bin" "$tmp/lib" -path "$tmp/lib/glibc" -prune -o -type f -print | while read -r f; do objdump -T "$f"; done
  rm -rf "$tmp"
}

# ---- the proof: run from the bundle with every system library hidden ----

verify() {
  local bundle
  bundle=$(cd "$OUT" && pwd)
  if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
    echo "gpu-bundle --verify: needs root and unshare -m (a private mount namespace) to hide the system libraries" >&2
    exit 2
  fi
  local work chroot cuda_dir=""
  work=$(mktemp -d /tmp/gpu-bundle-verify.XXXXXX)
  chroot=$(command -v chroot)
  if [ -n "$(sed -n 's/.*"cuda_sonames": "\([^"]*\)".*/\1/p' "$bundle/bundle.json")" ]; then
    cuda_dir=/usr/local/cuda/lib64  # stands in for the node's CUDA libraries
  fi
  # The bundle as gpu-check.sh uses it: a copy, unpacked.
  mkdir -p "$work/b"
  cp -a "$bundle/." "$work/b/"
  [ ! -f "$work/b/lib-packed.tar.xz" ] || tar -C "$work/b" -xJf "$work/b/lib-packed.tar.xz"
  local r
  for r in with-glibc bare; do
    mkdir -p "$work/$r/bundle" "$work/$r/proc" "$work/$r/sys" "$work/$r/dev" "$work/$r/tmp" "$work/$r/work" \
             "$work/$r/src/reference"
    cp -r "$ROOT/reference/configs" "$work/$r/src/reference/configs"
    [ -z "$cuda_dir" ] || mkdir -p "$work/$r$cuda_dir"
  done
  # Root 1 holds what every node has: the loader and glibc (the bundle's own copies are this machine's).
  mkdir -p "$work/with-glibc/lib64" "$work/with-glibc/lib/x86_64-linux-gnu"
  cp "$work/b/lib/glibc/"* "$work/with-glibc/lib/x86_64-linux-gnu/"
  cp "$work/b/lib/glibc/ld-linux-x86-64.so.2" "$work/with-glibc/lib64/"
  mkdir -p "$work/with-glibc/bin"
  cp "$(readlink -f /bin/sh)" "$work/with-glibc/bin/sh"  # dash: needs only libc, as any node's shell
  local libs=/bundle/lib:/bundle/lib/compat${cuda_dir:+:$cuda_dir}
  cat >"$work/inside.sh" <<EOF
set -uo pipefail
for r in with-glibc bare; do
  mount --bind "$work/b" "$work/\$r/bundle"
  mount -t proc proc "$work/\$r/proc"
  mount --rbind /sys "$work/\$r/sys"
  mount --rbind /dev "$work/\$r/dev"
  [ -z "$cuda_dir" ] || mount --bind "$cuda_dir" "$work/\$r$cuda_dir"
done
status=0
run() { local r=\$1; shift; env -i HOME=/tmp OMP_NUM_THREADS=2 LD_LIBRARY_PATH="$libs" "$chroot" "$work/\$r" "\$@"; }
step() {
  echo "-- [\$1] \${*:2}"
  if run "\$@" >"$work/step.log" 2>&1; then tail -3 "$work/step.log" | sed 's/^/    /'
  else echo "FAIL (exit \$?):"; tail -20 "$work/step.log"; status=1; fi
}
echo "== 1. a root with only the loader and glibc + the bundle${cuda_dir:+ + $cuda_dir}"
for bin in "$work"/b/bin/*; do
  b=/bundle/bin/\$(basename "\$bin")
  list=\$(run with-glibc /lib64/ld-linux-x86-64.so.2 --list "\$b" 2>&1)
  echo "\$b, as the loader resolves it:"; echo "\$list" | sed 's/^/    /'
  bad=\$(echo "\$list" | awk '/=>/ && \$3 !~ /^\/(bundle|lib\/x86_64-linux-gnu|usr\/local\/cuda)\// { print }')
  [ -z "\$bad" ] || { echo "FAIL: resolved outside the bundle, glibc and CUDA:"; echo "\$bad"; status=1; }
done
step with-glibc /bundle/bin/tripod data synthetic --out /work/data --vocab-size 64 --order 1 --tokens 30000
step with-glibc /bundle/bin/tripod train --config /src/reference/configs/tiny.json --set data.dir=/work/data \
     --set train.steps=3 --set train.log_every=1 --set train.eval_every=0 --set train.metrics=/work/metrics.jsonl
step with-glibc /bundle/bin/tripod check-backend --backend emulated --against cpu --dtype fp64 --only layernorm
step with-glibc /bundle/bin/tripod bench gemm-rate --backend cpu --dtype fp32 --sizes 64 --repeat 2 --min-time-ms 0
if [ -x "$work/b/bin/tripod_gpu_tests" ]; then step with-glibc /bundle/bin/tripod_gpu_tests --gtest_brief=1; fi
step with-glibc /bin/sh -c 'TRIPOD_OPENMPI=/bundle/openmpi . /bundle/openmpi/env.sh && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     orterun --oversubscribe --mca btl self,vader -np 2 /bundle/bin/tripod bench comm all_reduce -b 8 -e 1K'
step with-glibc /bin/sh -c 'TRIPOD_OPENMPI=/bundle/openmpi . /bundle/openmpi/env.sh && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     orterun --oversubscribe --mca btl self,vader -np 2 /bundle/bin/tripod train \
     --config /src/reference/configs/tiny.json --set data.dir=/work/data --set train.steps=2 --set train.eval_every=0 \
     --set train.metrics=/work/metrics2.jsonl'
# A singleton (MPI started without a launcher, as tripod_gpu_tests' NCCL test does): Open MPI then
# starts its own orted, which it finds through env.sh too (gpu-check's gtest step sources it).
step with-glibc /bin/sh -c 'TRIPOD_OPENMPI=/bundle/openmpi . /bundle/openmpi/env.sh && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     /bundle/bin/tripod bench comm all_reduce -b 8 -e 1K'
echo "== 1b. control: without openmpi/env.sh, Open MPI finds no plugins and a 2-rank run fails"
if run with-glibc /bin/sh -c 'OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 /bundle/openmpi/bin/orterun \
     --oversubscribe -np 2 /bundle/bin/tripod bench comm all_reduce -b 8 -e 1K' >"$work/control-mpi.log" 2>&1; then
  echo "FAIL: the 2-rank run worked without openmpi/env.sh: this machine's Open MPI is visible"; status=1
else
  head -2 "$work/control-mpi.log" | sed 's/^/    /'
fi
echo "== 1c. control: without openmpi/env.sh, a singleton fails too"
if run with-glibc /bin/sh -c 'OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     /bundle/bin/tripod bench comm all_reduce -b 8 -e 1K' >"$work/control-singleton.log" 2>&1; then
  echo "FAIL: a singleton started without openmpi/env.sh: this machine's Open MPI is visible"; status=1
else
  tail -1 "$work/control-singleton.log" | sed 's/^/    /'
fi
echo "== 2. a root with no system library at all: through the bundle's own loader"
step bare /bundle/lib/glibc/ld-linux-x86-64.so.2 --library-path /bundle/lib/glibc:$libs \
     /bundle/bin/tripod data synthetic --out /work/data --vocab-size 64 --order 1 --tokens 30000
step bare /bundle/lib/glibc/ld-linux-x86-64.so.2 --library-path /bundle/lib/glibc:$libs \
     /bundle/bin/tripod train --config /src/reference/configs/tiny.json --set data.dir=/work/data \
     --set train.steps=3 --set train.log_every=1 --set train.eval_every=0 --set train.metrics=/work/metrics.jsonl
echo "== 3. control: without the bundle's lib/, tripod must not start"
if env -i LD_LIBRARY_PATH=/bundle/lib/compat "$chroot" "$work/with-glibc" /bundle/bin/tripod --help >"$work/control.log" 2>&1; then
  echo "FAIL: tripod started without the bundle's libraries: the fake root does not hide the system's"; status=1
else
  sed 's/^/    /' "$work/control.log" | head -3
fi
exit \$status
EOF
  local status=0
  unshare -m --propagation private bash "$work/inside.sh" || status=$?
  # The bind mounts lived in the private namespace only; never delete through one that leaked.
  if [ -z "$(find "$work/with-glibc/bundle" "$work/bare/bundle" -mindepth 1 -print -quit)" ]; then rm -rf "$work"; fi
  if [ $status -eq 0 ]; then
    echo "== verify: PASS - the bundle runs with nothing from this machine but glibc${cuda_dir:+ and CUDA}," \
         "and with no system library at all through lib/glibc; 2 ranks through the bundled Open MPI"
  else
    echo "== verify: FAIL" >&2
  fi
  return $status
}

if [ $VERIFY_ONLY = 1 ]; then
  verify
  exit
fi
[ -n "$BUILD_DIR" ] || build
bundle
[ "$NO_VERIFY" = 1 ] || verify
