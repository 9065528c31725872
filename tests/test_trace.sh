#!/usr/bin/env bash
# --trace with --trace-steps: a bounded window of a run as a Chrome trace.
# 12 steps of mnist-cnn recorded from 5 to 8: four "step" spans on the
# training thread, each holding forward, backward and optimizer; every
# kernel a span named as `kiln inspect` names the plan's steps; the loader
# workers' tracks; a flow from each window batch's loading (its first
# sample) to the step that trains on it, ending inside that step; no span of
# a step outside the window. Bad windows exit 2 naming the flag.
#
# Needs $KILN_BIN, python3 and Debian's fashion-mnist.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_trace
export KILN_CACHE_DIR=
Q=(--model mnist-cnn --data fashion-mnist --batch-size 32 --no-test --quiet)

expect 0 "12 steps, steps 5-8 traced" -- "$KILN" train "${Q[@]}" --max-steps 12 --workers 2 --trace "$T/t.json" --trace-steps 5-8
expect 0 "the plan's step names" -- "$KILN" inspect --model mnist-cnn --batch-size 32 --json
tail -1 "$T/out" >"$T/inspect.json"
check "the window: steps, kernels, workers, flows" "$PY" - "$T/t.json" "$T/inspect.json" <<'PYEOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
plan = [s["name"] for s in json.load(open(sys.argv[2]))["steps"]]
threads = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M"}
train = [e for e in ev if e["ph"] == "X" and threads[e["tid"]] == "train"]
steps = [e for e in train if e["name"] == "step"]
assert len(steps) == 4, len(steps)
assert sum(e["name"] == "optimizer" for e in train) == 4
assert sum(e["name"] == "forward" for e in train) == 4 and sum(e["name"] == "backward" for e in train) == 4
kernels = [e["name"] for e in train if e["cat"] == "kernel"]
assert kernels == plan * 4, (kernels[:30], plan)
assert any(t.startswith("loader worker") for t in threads.values())
inside = lambda t, s: s["ts"] <= t <= s["ts"] + s["dur"]
# every span of the training thread lies within one of the four steps (none from outside the window)
assert all(any(inside(e["ts"], s) for s in steps) for e in train if e["name"] != "data-wait"), "a span outside the window"
starts = {e["id"]: e for e in ev if e["ph"] == "s"}
ends = [e for e in ev if e["ph"] == "f"]
assert len(ends) == 4 and all(e["id"] in starts for e in ends), (len(ends), sorted(starts))
assert all(any(inside(e["ts"], s) for s in steps) and starts[e["id"]]["ts"] <= e["ts"] for e in ends)
assert all(threads[starts[e["id"]]["tid"]].startswith("loader worker") for e in ends)
print(f"{len(ev)} events: 4 steps, {len(kernels)} kernel spans, {len(ends)} flows from the loader workers")
PYEOF
expect 2 "--trace-steps backwards" "--trace-steps 8-5" -- "$KILN" train "${Q[@]}" --max-steps 2 --trace "$T/x.json" --trace-steps 8-5
expect 2 "--trace-steps without --trace" "--trace-steps" "--trace FILE" -- "$KILN" train "${Q[@]}" --max-steps 2 --trace-steps 1-2
harness_finish
