#!/usr/bin/env bash
# One GPU session for the hf-trainer stack: the held-out Trainer arms (trainer_arms_2.json, each a
# real Trainer in a fresh process, five at a time) and, once the CLI is built (on the CPUs, in the
# background), the fit-check callback on mixed precision (trainer_fit_check_2.json: Qwen2.5-0.5B full
# fine-tuning, fp32 weights under bf16 autocast, under a 12 GiB memory fraction), where the plain
# loop's stack reads far under. Everything goes to $OUT, logs tarred (at most 8 files come back).
# Usage (on the GPU machine, from the repo root, .deps staged and carried):
#   OUT=... bash tests/validation/gpu_trainer_2.sh
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
root=$PWD
bash tests/validation/gpu_build_cli.sh > "$OUT/build.log" 2>&1 &
build=$!
start=$SECONDS
timeout 480 python3 tests/validation/trainer_harness.py --arms tests/validation/trainer_arms_2.json \
  --out "$OUT/trainer_steps_2.jsonl" --jobs 5 --share-gib 50 > "$OUT/heldout.log" 2>&1 &
heldout=$!
wait $build
tail -2 "$OUT/build.log"
if [ -x build-gpu/vramfit ]; then
  VRAMFIT=$root/build-gpu/vramfit timeout 240 python3 tests/validation/trainer_harness.py \
    --arms tests/validation/trainer_fit_check_2.json --out "$OUT/trainer_fit_check_2.jsonl" --jobs 1 \
    > "$OUT/fit_check.log" 2>&1
  echo "fit check rc=$? at $((SECONDS - start)) s"
fi
wait $heldout
echo "heldout rc=$? rows=$(grep -c '"kind": "trainer_step"' "$OUT/trainer_steps_2.jsonl") at $((SECONDS - start)) s"
tar czf "$OUT/logs.tgz" -C "$OUT" build.log heldout.log $( [ -f "$OUT/fit_check.log" ] && echo fit_check.log ) 2>/dev/null
rm -f "$OUT/build.log" "$OUT/heldout.log" "$OUT/fit_check.log"
