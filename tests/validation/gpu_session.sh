#!/usr/bin/env bash
# One GPU session: builds the probe against the machine's LibTorch (in the background, on the
# CPUs) while the HF harness measures on the GPU; then runs the GPU tests, the instruments and a
# libtorch sweep. Writes everything under $OUT (at most 8 files come back).
# Usage (on the GPU machine, .deps staged by ../shared/device/stage-deps.sh and carried):
#   bash tests/validation/gpu_session.sh [hf-plan-args...]
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
HF_BUDGET_S=${HF_BUDGET_S:-300}
LT_ARMS=${LT_ARMS:-quick}
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
(
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMFIT_BUILD_BENCHMARKS=OFF \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" &&
  cmake --build build-gpu --target vramfit_cli vramfit_gpu_tests
  echo "build rc=$?"
) > "$OUT/build.log" 2>&1 &
build=$!
if [ "${SKIP_HF:-0}" != 1 ]; then
  timeout $((HF_BUDGET_S + 60)) python3 tests/validation/hf_harness.py --out "$OUT/hf_steps.jsonl" \
    --budget-s "$HF_BUDGET_S" "$@" 2> "$OUT/hf.log"
  echo "hf harness rc=$?" >> "$OUT/hf.log"
fi
wait $build
tail -3 "$OUT/build.log"
[ -x build-gpu/vramfit ] || { echo "no probe build"; exit 1; }
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
  timeout 150 build-gpu/tests/gpu/vramfit_gpu_tests > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?" | tee -a "$OUT/gpu_tests.log"
  timeout 60 build-gpu/vramfit probe --instruments > "$OUT/instruments.jsonl" 2>> "$OUT/gpu_tests.log"
  echo "instruments rc=$?" | tee -a "$OUT/gpu_tests.log"
fi
probe() { timeout "${LT_TIMEOUT:-60}" build-gpu/vramfit probe --stack libtorch --json "$@" >> "$OUT/libtorch_steps.jsonl" 2>> "$OUT/libtorch.log"; }
for model in SmolLM2-135M Qwen2.5-0.5B TinyLlama-1.1B; do
  for ck in "" --grad-ckpt; do
    if [ "$LT_ARMS" = quick ]; then seqs=1024,3000; batches=1; else seqs=1024,3000,8192; batches=1,4; fi
    probe --model $model --seq $seqs --batch $batches --lora-targets q_proj,k_proj,v_proj,o_proj $ck
    probe --model $model --seq $seqs --batch $batches --lora-targets all-linear --lora-rank 16 $ck
    probe --model $model --seq $seqs --batch $batches --mode full $ck
  done
done
echo "libtorch rows: $(wc -l < "$OUT/libtorch_steps.jsonl" 2>/dev/null)"
