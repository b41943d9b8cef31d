#!/usr/bin/env bash
# One GPU session for Qwen3 (q_norm and k_norm): the plain loop's steps of qwen3_arms.json (each
# in a process of its own, four at a time) and the Trainer's steps of trainer_arms_qwen3.json
# (fresh processes, three at a time), side by side. Everything goes to $OUT, logs tarred.
# Usage (on the GPU machine, from the repo root):
#   OUT=... bash tests/validation/gpu_qwen3.sh
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
start=$SECONDS
timeout 540 python3 tests/validation/hf_harness.py --arms "${ARMS:-tests/validation/qwen3_arms.json}" --isolate 4 \
  --out "$OUT/${HF_OUT:-qwen3_h100.jsonl}" > "$OUT/hf.log" 2>&1 &
hf=$!
timeout 540 python3 tests/validation/trainer_harness.py --arms tests/validation/trainer_arms_qwen3.json \
  --out "$OUT/trainer_steps_qwen3_h100.jsonl" --jobs 3 --share-gib 30 > "$OUT/trainer.log" 2>&1 &
trainer=$!
wait $hf
echo "hf rc=$? rows=$(grep -c '"kind": "step"' "$OUT/qwen3_h100.jsonl") at $((SECONDS - start)) s"
wait $trainer
echo "trainer rc=$? rows=$(grep -c '"kind": "trainer_step"' "$OUT/trainer_steps_qwen3_h100.jsonl") at $((SECONDS - start)) s"
tar czf "$OUT/logs.tgz" -C "$OUT" hf.log trainer.log
rm -f "$OUT/hf.log" "$OUT/trainer.log"
