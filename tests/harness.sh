# The shell tests' shared harness (sourced by tests/test_*.sh): counters, a
# scratch folder removed at exit, and `expect`, which runs a command and checks
# its exit code, that stderr names every needle, that nothing crashed and that
# nothing hung. Needs $KILN_BIN (ctest sets it).
#
#   . "$(dirname "$0")/harness.sh"; harness_init test_name
#   expect CODE NAME [NEEDLE...] -- COMMAND...   (EXPECT_TIMEOUT seconds, default 300: longer is a hang)
#   check NAME COMMAND...                        (a plain condition)
#   harness_finish                               (prints the counts; the exit status)

harness_init() {
    HARNESS_NAME=$1
    KILN=${KILN_BIN:?KILN_BIN must name the kiln binary}
    DATA=/usr/share/datasets/fashion-mnist
    PY=${PYTHON:-python3}
    pass=0
    fail=0
    T=$(mktemp -d "/tmp/kiln_$1.XXXXXX") || exit 1
    trap 'rm -rf "$T"' EXIT
}

ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "$HARNESS_NAME: FAIL: $*" >&2
}

expect() {
    local code=$1 name=$2
    shift 2
    local needles=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        needles+=("$1")
        shift
    done
    shift
    local t0=$EPOCHREALTIME
    timeout "${EXPECT_TIMEOUT:-300}" "$@" >"$T/out" 2>"$T/err"
    local rc=$? good=1
    # KILN_TEST_TIMES=1: each command's seconds, to find what makes a test slow
    [ -z "${KILN_TEST_TIMES:-}" ] || awk -v a="$EPOCHREALTIME" -v b="$t0" -v n="$name" 'BEGIN { printf "time: %7.2f s  %s\n", a - b, n }' >&2
    if [ $rc -eq 124 ]; then
        bad "$name: hung (killed after ${EXPECT_TIMEOUT:-300} s)"
        return
    fi
    if [ $rc -ne "$code" ]; then
        bad "$name: exit code $rc, expected $code ($*)"
        good=0
    fi
    # a signal's exit code is a crash unless it was the one expected (130 after SIGINT)
    if { [ $rc -ge 128 ] && [ $rc -ne "$code" ]; } || grep -qE 'Sanitizer|runtime error:|Segmentation|Aborted' "$T/err"; then
        bad "$name: crashed (exit $rc)"
        good=0
    fi
    local n
    for n in ${needles[@]+"${needles[@]}"}; do
        if ! grep -qF -- "$n" "$T/err"; then
            bad "$name: stderr does not mention '$n'"
            good=0
        fi
    done
    if [ $good -eq 0 ]; then sed 's/^/    stderr: /' "$T/err" | tail -n 8 >&2; else ok; fi
}

check() {
    local name=$1
    shift
    if "$@"; then ok; else bad "$name"; fi
}

# small_idx DIR NTRAIN NTEST: an IDX folder of Fashion-MNIST's first NTRAIN
# training and NTEST test samples (at most 65535 each), for quick packs
small_idx() {
    local f hdr n kind skip size
    mkdir -p "$1"
    for f in train-images-idx3:$2:3 train-labels-idx1:$2:1 t10k-images-idx3:$3:3 t10k-labels-idx1:$3:1; do
        n=${f#*:} && n=${n%:*} && kind=${f##*:} && f=${f%%:*}
        if [ "$kind" = 3 ]; then hdr=$(printf '\\x00\\x00\\x08\\x03\\x00\\x00\\x%02x\\x%02x\\x00\\x00\\x00\\x1c\\x00\\x00\\x00\\x1c' $((n >> 8)) $((n & 255)))
        else hdr=$(printf '\\x00\\x00\\x08\\x01\\x00\\x00\\x%02x\\x%02x' $((n >> 8)) $((n & 255))); fi
        skip=$((4 + 4 * kind)) size=$((n * (kind == 3 ? 784 : 1)))
        { printf "$hdr"; gzip -dc "$DATA/$f-ubyte.gz" | tail -c +$((skip + 1)) | head -c "$size"; } >"$1/$f-ubyte"
    done
}

# harness_mpi: Open MPI's environment (as root, oversubscribed), or exit 77
# (skipped, saying why) without mpirun or kiln's MPI plugin. Open MPI's own
# allocations are not ours to chase under LeakSanitizer.
harness_mpi() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
    if ! command -v mpirun >/dev/null; then echo "$HARNESS_NAME: skipped: mpirun is not installed (Debian: openmpi-bin)"; exit 77; fi
    if [ ! -e "$(dirname "$KILN")/libkiln_mpi.so" ]; then echo "$HARNESS_NAME: skipped: kiln was built without MPI (libkiln_mpi.so)"; exit 77; fi
}

# rank_pid MPIRUN_PID RANK: the pid of that rank among mpirun's children (empty until it started)
rank_pid() {
    local p
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
    done
}

harness_finish() {
    echo "$HARNESS_NAME: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
