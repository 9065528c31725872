#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each from its committed
# seed corpus, FUZZ_JOBS at once (default: the cores), and prints one line per
# target: executions, exec/s, coverage (libFuzzer's cov: and ft:), corpus
# size, and crashes.
#
#     bash tests/fuzz/run.sh SECONDS [fuzz_safetensors fuzz_idx ...]
#
# The corpus is copied to a scratch folder first, so runs never change the
# repository. A crash, hang (-timeout=10 s per input), leak or out-of-memory
# (-rss_limit_mb=2048) fails the run; the input that caused it is kept in
# $FUZZ_ARTIFACTS (default build-fuzz/artifacts) with the log beside it: fix
# the reader, then add the input to tests/fuzz/corpus/<target>/ as
# regress-<what>. $FUZZ_BUILD names the build folder (default build-fuzz).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SECONDS_EACH=${1:?usage: run.sh SECONDS [target...]}
shift
BUILD=$(cd "${FUZZ_BUILD:-$ROOT/build-fuzz}" 2>/dev/null && pwd) || { echo "fuzz: no build folder ${FUZZ_BUILD:-build-fuzz} (make fuzz builds it)" >&2; exit 1; }
ART=${FUZZ_ARTIFACTS:-$BUILD/artifacts}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_safetensors fuzz_checkpoint fuzz_idx fuzz_options fuzz_image fuzz_http fuzz_shard fuzz_cifar fuzz_tokens fuzz_metrics)
mkdir -p "$ART" && ART=$(cd "$ART" && pwd) || exit 1
S=$(mktemp -d /tmp/kiln_fuzz.XXXXXX) || exit 1
trap 'rm -rf "$S"' EXIT
# the library logs nothing and reads or writes no autotune cache
export KILN_CACHE_DIR= OMP_NUM_THREADS=1

# one target: its report line in $S/NAME.result, its status as the exit code
fuzz_one() {
    local name=$1 bin="$BUILD/fuzz_$1"
    [ -x "$bin" ] || { echo "fuzz: $bin is not built (make fuzz builds it)" >"$S/$name.result"; return 1; }
    mkdir -p "$S/$name"
    cp "$ROOT/tests/fuzz/corpus/$name/"* "$S/$name/"
    local dict=()
    [ -f "$ROOT/tests/fuzz/$name.dict" ] && dict=(-dict="$ROOT/tests/fuzz/$name.dict")
    local log="$S/$name.log"
    (cd "$S" && "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$ART/$name-" "${dict[@]}" "$S/$name") >"$log" 2>&1
    local rc=$? runs eps last cov ft files
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)' "$log" | tail -n 1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    files=$(find "$S/$name" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "fuzz_$name: ${runs:-?} runs in ${SECONDS_EACH} s (${eps:-?} exec/s), cov ${cov:-?} ft ${ft:-?}, corpus $files inputs, 0 crashes" >"$S/$name.result"
        return 0
    fi
    cp "$log" "$ART/$name.log"
    { echo "fuzz_$name: FAILED (exit $rc) after ${runs:-?} runs; input and log in $ART/:"
      grep -E 'ERROR|SUMMARY|^fuzz:|Test unit written' "$log" | head -n 8 | sed 's/^/    /'; } >"$S/$name.result"
    return 1
}

# FUZZ_JOBS targets at once (default: the cores; libFuzzer runs one thread),
# reported in the order given
jobs_max=${FUZZ_JOBS:-$(nproc)}
failed=0
running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$jobs_max" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    fuzz_one "${t#fuzz_}" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
for t in "${targets[@]}"; do
    name=${t#fuzz_}
    if grep -q 'FAILED\|not built' "$S/$name.result"; then cat "$S/$name.result" >&2; else cat "$S/$name.result"; fi
done
exit $failed
