#!/usr/bin/env bash
# Packs what a lent GPU machine (the workplace's device tool) needs to run
# kiln's GPU checks and benches, for scripts/gpu_session.sh to unpack there.
# That machine cannot build kiln (no oneDNN, jansson, libjpeg-turbo, ... and
# no package installs), so the binaries built here travel with every shared
# library they load apart from the C runtime and CUDA's driver, and with
# Fashion-MNIST: one xz tarball, gpu-bundle.tar.xz (carry it, and nothing
# else, under the device tool's 64 MiB limit).
#
#   bash scripts/gpu_bundle.sh [BUILD_DIR]   (default build: a release build with the CUDA backend)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
BINS=(kiln test_cuda test_ops test_gpt test_models test_attention_tc test_conv_half test_mma_gpu)
die() { echo "gpu_bundle: $*" >&2; exit 1; }
for b in "${BINS[@]}"; do [ -x "$BUILD/$b" ] || die "$BUILD/$b not found: build first (make)"; done
grep -q "^KILN_CUDA:BOOL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null || die "$BUILD has no CUDA backend (KILN_CUDA=ON in its CMakeCache.txt)"
[ -d "$DATA" ] || die "$DATA not found (Debian's dataset-fashion-mnist)"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/fashion-mnist"
for b in "${BINS[@]}"; do strip -o "$STAGE/bin/$b" "$BUILD/$b"; done
# every library the binaries load, but the C runtime (the machine's own must serve its kernel) and CUDA's
# (the machine's driver and toolkit match its GPU)
for b in "${BINS[@]}"; do ldd "$BUILD/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnss_[^/]*|ld-linux[^/]*|libcuda|libcudart|libcudnn[^/]*|libcublas[^/]*|libnvrtc[^/]*)\.so' |
    while read -r l; do cp -L "$l" "$STAGE/lib/"; done
cp "$DATA"/*.gz "$STAGE/fashion-mnist/"
tar -C "$STAGE" -cJf gpu-bundle.tar.xz bin lib fashion-mnist
echo "gpu_bundle: gpu-bundle.tar.xz, $(du -h gpu-bundle.tar.xz | cut -f1) ($(ls "$STAGE/lib" | wc -l) libraries)"
