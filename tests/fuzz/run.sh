#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each from its committed
# seed corpus, and prints one line per target: executions, exec/s, coverage
# (libFuzzer's cov: and ft:), corpus size, and crashes.
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

failed=0
for t in "${targets[@]}"; do
    name=${t#fuzz_}
    bin="$BUILD/fuzz_$name"
    [ -x "$bin" ] || { echo "fuzz: $bin is not built (make fuzz builds it)" >&2; failed=1; continue; }
    mkdir -p "$S/$name"
    cp "$ROOT/tests/fuzz/corpus/$name/"* "$S/$name/"
    dict=()
    [ -f "$ROOT/tests/fuzz/$name.dict" ] && dict=(-dict="$ROOT/tests/fuzz/$name.dict")
    log="$S/$name.log"
    (cd "$S" && "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$ART/$name-" "${dict[@]}" "$S/$name") >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)' "$log" | tail -n 1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    files=$(find "$S/$name" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "fuzz_$name: ${runs:-?} runs in ${SECONDS_EACH} s (${eps:-?} exec/s), cov ${cov:-?} ft ${ft:-?}, corpus $files inputs, 0 crashes"
    else
        failed=1
        cp "$log" "$ART/$name.log"
        echo "fuzz_$name: FAILED (exit $rc) after ${runs:-?} runs; input and log in $ART/:" >&2
        grep -E 'ERROR|SUMMARY|^fuzz:|Test unit written' "$log" | head -n 8 | sed 's/^/    /' >&2
    fi
done
exit $failed
