#!/usr/bin/env bash
# One GPU session for the Trainer's built-in programs: the held-out Trainer arms of the kinds that
# convert (trainer_arms_3.json, a real Trainer per arm in a fresh process, six at a time) and marked
# allocator traces of seven real models (trainer_check_arms_2.json: five of built-in kinds, and the
# two kinds left out, to find their mebibyte), which trace_program.py --check compares with the programs, and vramfit-record --step trainer for
# Qwen2.5-0.5B's architecture. Logs are tarred (at most 8 files come back).
# Usage (on the GPU machine, from the repo root): OUT=... bash tests/validation/gpu_trainer_3.sh
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
v=tests/validation
start=$SECONDS
timeout 420 python3 $v/trainer_harness.py --arms $v/trainer_arms_3.json \
  --out "$OUT/trainer_steps_3.jsonl" --jobs 6 --share-gib 60 > "$OUT/heldout.log" 2>&1 &
heldout=$!
# vramfit-record --step trainer end to end (16 small models of Qwen2.5-0.5B's architecture).
(time python3 $v/vramfit_record.py --config tests/data/configs/Qwen2.5-0.5B.json --step trainer --weights bf16 \
  --out "$OUT/qwen2.5-0.5b-trainer-bf16.programs" --keep-traces "$OUT/qwen2.5-0.5b-trainer-bf16-traces.jsonl.gz") \
  > "$OUT/record.log" 2>&1 &
record=$!
mapfile -t REAL < <(python3 -c "import json; [print(json.dumps(a)) for a in json.load(open('$v/trainer_check_arms_2.json'))]")
timeout 300 python3 $v/trace_capture.py --marks --out "$OUT/t-real" "${REAL[@]}" > "$OUT/capture-real.log" 2>&1
echo "real traces rc=$? at $((SECONDS - start)) s: $(ls "$OUT"/t-real 2>/dev/null | grep -c trace-)"
python3 - "$OUT" <<'PY'
import gzip, json, os, sys
d = os.path.join(sys.argv[1], "t-real")
names = sorted((n for n in os.listdir(d) if n.startswith("trace-")), key=lambda n: int(n[6:-6])) if os.path.isdir(d) else []
with gzip.open(os.path.join(sys.argv[1], "trainer_real_traces_2.jsonl.gz"), "wt") as f:
    stack = False
    for n in names:
        for line in open(os.path.join(d, n)):
            row = json.loads(line)
            if row.get("kind") == "stack":
                if stack: continue
                stack = True
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
PY
rm -rf "$OUT/t-real"
wait $record
echo "record rc=$? at $((SECONDS - start)) s"
wait $heldout
echo "heldout rc=$? rows=$(grep -c '"kind": "trainer_step"' "$OUT/trainer_steps_3.jsonl") at $((SECONDS - start)) s"
tail -n 3 "$OUT/heldout.log" "$OUT/capture-real.log" "$OUT/record.log"
(cd "$OUT" && tar czf logs.tgz heldout.log capture-real.log record.log)
rm -f "$OUT/heldout.log" "$OUT/capture-real.log" "$OUT/record.log"
