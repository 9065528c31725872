# Sourced by the benches (loader.sh, shards.sh, train_data.sh, http.sh, checkpoint.sh):
# what each one repeated before. Set NAME first (for messages and the make target).
#
#   bench_init                 cd to the repository; PY, KILN, REPEAT, BATCHES checked
#   peer_init FILE             PEER: ../shared/bench/peers/FILE (or under $KILN_SHARED), checked; STEPS checked
#   jpeg_folder DIR SIZE C     Fashion-MNIST packed once as SIZExSIZE JPEGs with C channels into DIR
#                              (SIZE 0: 28x28 as stored); a half-written folder (no marker) is made again

die() { echo "$NAME: $*" >&2; exit 1; }

. "$(dirname "${BASH_SOURCE[0]}")/openblas.sh" # OPENBLAS_CORETYPE from this CPU's flags

bench_init() {
    ROOT="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
    cd "$ROOT"
    PY=/usr/bin/python3
    KILN="${KILN:-build/kiln}"
    [ -x "$KILN" ] || die "$KILN not found: run 'make' (or 'make bench-$NAME', which builds it first)"
    [[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer (got '$REPEAT')"
    [[ "${BATCHES:-1}" =~ ^[1-9][0-9]*$ ]] || die "BATCHES must be a positive integer (got '$BATCHES')"
}

peer_init() {
    SHARED="${KILN_SHARED:-$ROOT/../shared}"
    PEER="$SHARED/bench/peers/$1"
    [ -f "$PEER" ] || die "$PEER not found (set KILN_SHARED)"
    [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "STEPS must be a positive integer (got '$STEPS')"
}

jpeg_folder() {
    local dir=$1 size=$2 channels=$3 sizeopt=()
    [ -f "$dir/.complete" ] && return 0
    [ "$size" -gt 0 ] && sizeopt=(--size "$size")
    echo "$NAME: packing Fashion-MNIST as JPEGs (${sizeopt[*]:-28x28 as stored}, $channels channels) into $dir ..." >&2
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    "$KILN" pack --from fashion-mnist --to "$dir" --format jpeg "${sizeopt[@]}" --channels "$channels" || die "kiln pack failed"
    touch "$dir/.complete"
}
