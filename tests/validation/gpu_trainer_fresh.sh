#!/usr/bin/env bash
# One GPU session: marked traces of the Trainer's step for the two kinds left out of the built-in
# file (TRAINER_LEFT_OUT), each arm alone in a fresh process (trace_capture.py runs its arms in one
# process, where an earlier arm's workspaces are already held). Prints each trace's requests never
# freed (the process's own workspaces) with the phase they fall in.
# Usage (on the GPU machine, from the repo root): OUT=... bash tests/validation/gpu_trainer_fresh.sh
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
v=tests/validation
timeout 200 python3 $v/trace_capture.py --marks --out "$OUT/t-tiny" \
  '{"model": "TinyLlama-1.1B", "mode": "full", "batch": 2, "seq": 1024, "gradient_checkpointing": true, "trainer": true, "weights": "fp32"}' \
  > "$OUT/tiny.log" 2>&1 &
timeout 200 python3 $v/trace_capture.py --marks --out "$OUT/t-qwen" \
  '{"model": "Qwen2.5-0.5B", "mode": "full", "batch": 1, "seq": 1024, "trainer": true, "weights": "fp32"}' \
  > "$OUT/qwen.log" 2>&1 &
wait
python3 - "$OUT" <<'PY'
import gzip, json, os, sys
out = sys.argv[1]
with gzip.open(os.path.join(out, "hf_trainer_fresh_traces.jsonl.gz"), "wt") as f:
    for d in ("t-tiny", "t-qwen"):
        p = os.path.join(out, d, "trace-0.jsonl")
        if not os.path.exists(p):
            print(d, "no trace"); continue
        for line in open(p):
            row = json.loads(line)
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
            if row.get("kind") != "trace":
                continue
            ev, marks = row["events"], sorted(row["marks"])
            freed = {-e for e in ev if e < 0}
            k = 0
            for i, e in enumerate(ev):
                if e > 0:
                    k += 1
                    if k not in freed and e in (1 << 20, 4 << 20, 8 << 20, 32 << 20):  # workspace sizes
                        phase = max((m for m in marks if m[0] <= i), default=(0, "build"))[1]
                        print(d, "baseline", row["baseline"], "kept request", e, "at event", i, "in", phase)
PY
rm -rf "$OUT/t-tiny" "$OUT/t-qwen"
tail -n 2 "$OUT/tiny.log" "$OUT/qwen.log"
