#!/usr/bin/env bash
# One GPU session for the fit trials (issue: will it OOM?): builds the probe, measures what the CUDA
# driver holds (cuda_context.py), then runs the trials files given, each trial a fresh process under
# a memory fraction (hf_harness.py --trials; libtorch trials through `vramfit probe --budget`).
# Usage (on the GPU machine, .deps staged and carried): bash tests/validation/gpu_trials.sh FILE.json...
# Env: CONTEXT=0 / GPU_TESTS=0 skip those parts; JOBS (8); GPU_SHARE (bytes the running trials'
# budgets may sum to; the harness default: 120 GB, at most 70% of the card); TRIALS_TIMEOUT per file (400 s).
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONUNBUFFERED=1
JOBS=${JOBS:-8}
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMFIT_BUILD_BENCHMARKS=OFF \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" > "$OUT/build.log" 2>&1 &&
  cmake --build build-gpu --target vramfit_cli $([ "${GPU_TESTS:-1}" = 1 ] && echo vramfit_gpu_tests) >> "$OUT/build.log" 2>&1
echo "build rc=$?"; tail -3 "$OUT/build.log"
[ -x build-gpu/vramfit ] || exit 1
if [ "${CONTEXT:-1}" = 1 ]; then
  python3 tests/validation/cuda_context.py --repeats 3 > "$OUT/cuda_context.jsonl" 2> "$OUT/cuda_context.log"
  echo "cuda_context rc=$? rows=$(wc -l < "$OUT/cuda_context.jsonl")"
fi
for f in "$@"; do
  name=$(basename "$f" .json)
  timeout "${TRIALS_TIMEOUT:-400}" python3 tests/validation/hf_harness.py --trials "$f" -j "$JOBS" \
    --trial-timeout-s 150 ${GPU_SHARE:+--gpu-share-bytes "$GPU_SHARE"} --vramfit build-gpu/vramfit \
    --out "$OUT/$name.jsonl" 2> "$OUT/$name.log"
  echo "$name rc=$? $(tail -1 "$OUT/$name.log")"
done
if [ "${GPU_TESTS:-1}" = 1 ]; then
  timeout 150 build-gpu/tests/gpu/vramfit_gpu_tests > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? $(tail -2 "$OUT/gpu_tests.log" | tr '\n' ' ')"
fi
