#!/usr/bin/env python3
"""Writes loops_13.json: training loops with dynamic padding (issue 13, varied lengths) for
hf_harness.py --trials. Each loop runs STEPS steps; step k's length is drawn from
random.Random(seed) as a multiple of 64 in [S/8, S] (pad_to_multiple_of=64), and one step (the
sixth) runs at S, so every loop reaches the length the prediction is for."""
import json
import random
import sys

GIB = 1 << 30
STEPS = 20
QWEN15 = {"shape": {"vocab": 151936, "hidden": 1536, "intermediate": 8960, "layers": 28, "heads": 12,
                    "kv_heads": 2, "head_dim": 128, "tied_embeddings": True, "qkv_bias": True},
          "arch": "qwen2", "name": "Qwen2.5-1.5B"}
NO_LIMIT = 140 * GIB  # above the H200's memory: the fraction is clamped to 1.0
EXP = "expandable_segments:True"
# (arm fields, budget, alloc_conf, seed)
LOOPS = [
    ({"model": "TinyLlama-1.1B", "mode": "full", "batch": 1, "seq": 4096}, NO_LIMIT, None, 1),
    ({"model": "SmolLM2-135M", "mode": "lora", "lora_targets": "all-linear", "batch": 4, "seq": 2048},
     NO_LIMIT, None, 2),
    (dict(QWEN15, mode="lora", batch=4, seq=4096), NO_LIMIT, None, 3),
    (dict(QWEN15, mode="lora", batch=4, seq=4096), NO_LIMIT, EXP, 3),
    # Under a limit near the fixed-shape prediction at S (vramfit predict at 98c3fa8: required
    # 75.4 GB, 30.2 GB, 30.6 GB, 16.9 GB), both allocator settings.
    (dict(QWEN15, mode="lora", batch=4, seq=4096), 80 * GIB, None, 4),
    (dict(QWEN15, mode="lora", batch=4, seq=4096), 80 * GIB, EXP, 4),
    (dict(QWEN15, mode="lora", batch=4, seq=4096), 72 * GIB, None, 4),
    ({"model": "Llama-3.2-1B", "mode": "lora", "gradient_checkpointing": True, "batch": 8, "seq": 2048},
     30 * GIB, None, 5),
    ({"model": "Llama-3.2-1B", "mode": "lora", "gradient_checkpointing": True, "batch": 8, "seq": 2048},
     30 * GIB, EXP, 5),
    ({"model": "Llama-3.2-1B", "mode": "lora", "gradient_checkpointing": True, "batch": 8, "seq": 2048},
     28 * GIB, None, 5),
    ({"model": "Qwen2.5-0.5B", "mode": "full", "batch": 4, "seq": 2048}, 30 * GIB, None, 6),
    ({"model": "Qwen2.5-0.5B", "mode": "full", "batch": 4, "seq": 2048}, 30 * GIB, EXP, 6),
    ({"model": "Qwen2.5-0.5B", "mode": "full", "batch": 4, "seq": 2048}, 28 * GIB, None, 6),
    ({"model": "TinyLlama-1.1B", "mode": "full", "batch": 1, "seq": 4096}, 16 * GIB, None, 7),
    ({"model": "TinyLlama-1.1B", "mode": "full", "batch": 1, "seq": 4096}, 16 * GIB, EXP, 7),
]


def lengths(seq, seed):
    rng = random.Random(seed)
    out = [64 * rng.randint(max(1, seq // 512), seq // 64) for _ in range(STEPS)]
    out[5] = seq
    return out


def loops():
    rows = []
    for arm, budget, conf, seed in LOOPS:
        rows.append(dict(arm, budget_bytes=budget, alloc_conf=conf, lengths=lengths(arm["seq"], seed),
                         note="lengths: make_loops.py seed %d" % seed))
    return rows


if __name__ == "__main__":
    json.dump(loops(), sys.stdout, indent=1)
    print()
