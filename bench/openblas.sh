# Sourced by every bench that runs a PyTorch peer (through common.sh, or
# directly). Debian's PyTorch takes its BLAS from OpenBLAS (BLAS_INFO=generic),
# which may misdetect the CPU in a VM; the benches name its kernels from the
# CPU's own flags: SkylakeX's AVX-512 kernels where the CPU has AVX-512, and
# Haswell's AVX2 ones (what OpenBLAS's Zen target runs) where it has only
# AVX2. A hard-coded SkylakeX killed the peers with an illegal instruction on
# an AMD Zen 3. Exported before any peer starts, so the peers' own
# setdefault (common2.py, pytorch_mnist.py) keeps it; a value already in the
# environment wins.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    if grep -q -w avx512f /proc/cpuinfo; then
        export OPENBLAS_CORETYPE=SkylakeX
    elif grep -q -w avx2 /proc/cpuinfo; then
        export OPENBLAS_CORETYPE=Haswell
    fi
fi
