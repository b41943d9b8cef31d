#!/usr/bin/env bash
# One GPU session for a user's own training step (vramfit-record --step): records Qwen2.5-0.5B's
# architecture with tests/validation/steps/fused_adamw_clip.py while ten held-out steps running the
# same step (record_heldout_arms_3.json, each in a process of its own, four at a time) are measured.
# Usage (on the GPU machine, from the repo root): OUT=... bash tests/validation/gpu_record_step.sh
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
python3 tests/validation/hf_harness.py --arms tests/validation/record_heldout_arms_3.json --isolate 4 \
  --out "$OUT/heldout-3.jsonl" > "$OUT/heldout-3.log" 2>&1 &
heldout=$!
start=$SECONDS
python3 tests/validation/vramfit_record.py --config tests/data/configs/Qwen2.5-0.5B.json \
  --step tests/validation/steps/fused_adamw_clip.py --out "$OUT/qwen2.5-0.5b-h100-fused-clip.programs" \
  --keep-traces "$OUT/qwen2.5-0.5b-h100-fused-clip-traces.jsonl.gz" > "$OUT/record-step.log" 2>&1
echo "record rc=$? in $((SECONDS - start)) s" | tee -a "$OUT/record-step.log"
wait $heldout
echo "heldout rc=$? rows=$(grep -c '"kind": "step"' "$OUT/heldout-3.jsonl")" | tee -a "$OUT/heldout-3.log"
tail -4 "$OUT/record-step.log"; tail -3 "$OUT/heldout-3.log"
