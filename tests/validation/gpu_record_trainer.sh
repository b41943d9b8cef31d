#!/usr/bin/env bash
# One GPU session for the Trainer's step programs: marked allocator traces of transformers.Trainer
# (trace_capture.py --marks, "trainer" arms) for every kind program_arms.py --trainer lists (in
# four processes side by side), and of four real models
# (trainer_check_arms.json) that trace_program.py --check compares with the programs. Writes
# $OUT/trainer_traces.jsonl.gz, $OUT/trainer_real_traces.jsonl.gz and the logs (tarred).
# Usage (on the GPU machine, from the repo root): OUT=... bash tests/validation/gpu_record_trainer.sh
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
v=tests/validation
start=$SECONDS
# Four processes of the kinds' arms (each weights' dtype, even and odd arms), one of the real models.
for w in bf16 fp32; do
  for half in 0 1; do
    mapfile -t ARMS < <(python3 $v/program_arms.py --trainer | grep "\"weights\":\"$w\"" | awk "NR % 2 == $half")
    timeout 330 python3 $v/trace_capture.py --marks --out "$OUT/t-$w-$half" "${ARMS[@]}" \
      > "$OUT/capture-$w-$half.log" 2>&1 &
  done
done
mapfile -t REAL < <(python3 -c "import json,sys; [print(json.dumps(a)) for a in json.load(open('$v/trainer_check_arms.json'))]")
timeout 330 python3 $v/trace_capture.py --marks --out "$OUT/t-real" "${REAL[@]}" > "$OUT/capture-real.log" 2>&1 &
wait
echo "captured in $((SECONDS - start)) s: $(ls "$OUT"/t-bf16-* "$OUT"/t-fp32-* 2>/dev/null | grep -c trace-) kinds' traces, $(ls "$OUT"/t-real 2>/dev/null | grep -c trace-) real"
python3 - "$OUT" <<'PY'
import gzip, json, os, sys
out = sys.argv[1]
def join(dirs, path):
    stack = False
    with gzip.open(path, "wt") as f:
        for d in dirs:
            names = sorted((n for n in os.listdir(d) if n.startswith("trace-")), key=lambda n: int(n[6:-6])) if os.path.isdir(d) else []
            for n in names:
                for line in open(os.path.join(d, n)):
                    row = json.loads(line)
                    if row.get("kind") == "stack":
                        if stack: continue
                        stack = True
                    f.write(json.dumps(row, separators=(",", ":")) + "\n")
join([os.path.join(out, "t-%s-%d" % (w, h)) for w in ("bf16", "fp32") for h in (0, 1)],
     os.path.join(out, "trainer_traces.jsonl.gz"))
join([os.path.join(out, "t-real")], os.path.join(out, "trainer_real_traces.jsonl.gz"))
PY
rm -rf "$OUT"/t-bf16-* "$OUT"/t-fp32-* "$OUT"/t-real
timeout 120 python3 $v/trace_program.py "$OUT/trainer_traces.jsonl.gz" --stack hf_trainer \
  --programs "$OUT/hf-trainer.programs" --check "$OUT/trainer_real_traces.jsonl.gz" > "$OUT/convert.log" 2>&1
echo "convert rc=$? at $((SECONDS - start)) s"
tail -5 "$OUT/convert.log"; tail -3 "$OUT"/capture-*.log
(cd "$OUT" && tar czf logs.tgz capture-*.log convert.log)
rm -f "$OUT"/capture-*.log "$OUT/convert.log"
