#!/usr/bin/env bash
# One GPU session for kinds of step the built-in programs do not hold (issue: recording your own
# stack): vramfit-record for Qwen2.5-0.5B's architecture with LoRA dropout 0.05 and with SGD
# (momentum 0.9), while the held-out steps of those kinds (record_heldout_arms_2.json, each in a
# process of its own, four at a time) are measured; and, once the CLI is built (on the CPUs, in the
# background), the Trainer fit-check callback's runs (trainer_fit_check.json, under a memory
# fraction). Everything goes to $OUT; at most 8 files come back from the device, so tar the logs.
# Usage (on the GPU machine, from the repo root, .deps staged and carried):
#   OUT=... bash tests/validation/gpu_record_kinds.sh
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
root=$PWD
cfg=tests/data/configs/Qwen2.5-0.5B.json
bash tests/validation/gpu_build_cli.sh > "$OUT/build.log" 2>&1 &
build=$!
python3 tests/validation/hf_harness.py --arms tests/validation/record_heldout_arms_2.json --isolate 4 \
  --out "$OUT/heldout.jsonl" > "$OUT/heldout.log" 2>&1 &
heldout=$!
for kind in "dropout --lora-dropout 0.05" "sgd --optim sgd-momentum"; do
  set -- $kind
  name=$1; shift
  start=$SECONDS
  python3 tests/validation/vramfit_record.py --config "$cfg" --out "$OUT/qwen2.5-0.5b-$name.programs" \
    --keep-traces "$OUT/qwen2.5-0.5b-$name-traces.jsonl.gz" "$@" > "$OUT/record-$name.log" 2>&1
  echo "record $name rc=$? in $((SECONDS - start)) s" | tee -a "$OUT/record-$name.log"
done
wait $build
tail -2 "$OUT/build.log"
wait $heldout
echo "heldout rc=$? rows=$(grep -c '"kind": "step"' "$OUT/heldout.jsonl")"
if [ -x build-gpu/vramfit ]; then
  VRAMFIT=$root/build-gpu/vramfit timeout 300 python3 tests/validation/trainer_harness.py \
    --arms tests/validation/trainer_fit_check.json --out "$OUT/trainer_fit_check.jsonl" --jobs 2 \
    > "$OUT/fit_check.log" 2>&1
  echo "fit check rc=$?"
fi
