#!/usr/bin/env bash
# Installs what kiln needs from Debian's packages. Idempotent and quiet when
# everything is present. --test adds clang and its runtime (libFuzzer, the
# sanitizers) for the fuzz targets; the PyTorch peer comes with --bench/--oracle.
set -euo pipefail
need=(cmake make gcc pkg-config libdnnl-dev zlib1g-dev libjansson-dev libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev libcurl4-openssl-dev libcairo2-dev dataset-fashion-mnist fortunes python3 openmpi-bin libopenmpi-dev libnuma-dev)  # python3: test_cli reads JSON; cairo: kiln plot; libnuma-dev: --bind numa; fortunes: the gpt's English text; Open MPI: mpirun and the headers kiln's MPI plugin builds against
case "${1:-}" in
  # fixtures are committed: the suite needs no PyTorch; tests/fuzz is built with clang's libFuzzer
  --test) need+=(clang libclang-rt-14-dev nginx-light iproute2) ;;  # nginx: test_http serves shards on loopback; iproute2: test_dist_netns's namespaces
  # the PyTorch peer at its best: without an optimised BLAS, Debian's python3-torch
  # falls back to the reference BLAS (libblas3) and its linear layers run ~40x slower;
  # OpenBLAS's OpenMP build shares torch's thread team instead of adding a second pool
  --bench|--oracle) need+=(python3-torch python3-torchvision python3-pil python3-numpy libopenblas0-openmp) ;;
esac
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if [[ " ${missing[*]} " == *" libopenblas0-openmp "* ]]; then
  $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 >/dev/null 2>&1 || true
fi
