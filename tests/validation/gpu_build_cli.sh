#!/usr/bin/env bash
# Builds the vramfit CLI (no Probe, no tests) into build-gpu/ on the GPU machine, for the session
# scripts that run it beside their measurements; its last line says "build rc=N".
# Usage (from the repo root, .deps staged and carried): bash tests/validation/gpu_build_cli.sh
root=$PWD
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMFIT_BUILD_TESTS=OFF \
  -DVRAMFIT_BUILD_BENCHMARKS=OFF -DVRAMFIT_PROBE=OFF -DCMAKE_PREFIX_PATH="$root/.deps/usr" &&
  cmake --build build-gpu --target vramfit_cli
echo "build rc=$?"
