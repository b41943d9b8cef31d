#!/usr/bin/env python3
"""What the CUDA driver holds on a card that torch's allocator statistics do not count.

Each measurement runs in a fresh process (this script re-runs itself with --child), as a trainer
starts: `cudaMemGetInfo` (torch.cuda.mem_get_info) after the context is created, after the first
bf16 matmul (cuBLAS / cuBLASLt handles and their workspaces), after a backward through SDPA and a
fused AdamW step (the kernels' modules loaded), each with torch's own allocated and reserved bytes.
`driver_held = (total - free) - reserved` is memory the card has lost before the caching allocator
asks for any: what `vramfit --gpu NAME` subtracts from a card's total. One JSON line per process.

    python3 tests/validation/cuda_context.py --repeats 3 > cuda_context.jsonl
"""
import argparse
import json
import os
import subprocess
import sys


def child():
    import torch
    torch.cuda.init()
    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(0)
    row = {"kind": "cuda_context", "gpu_name": props.name, "total_memory": int(props.total_memory),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "points": []}

    def point(label):
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info(0)
        reserved = int(torch.cuda.memory_reserved(0))
        row["points"].append({"label": label, "free": int(free), "total": int(total),
                              "allocated": int(torch.cuda.memory_allocated(0)), "reserved": reserved,
                              "driver_held": int(total - free) - reserved})

    torch.zeros(1, device=dev)  # creates the primary context
    point("context")
    a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    (a @ a).sum().item()
    point("matmul")
    q = torch.randn(2, 8, 512, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16))
    opt = torch.optim.AdamW([w], fused=True)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum() + (a @ w).float().sum()
    out.backward()
    opt.step()
    point("train_kernels")
    del a, q, w, opt, out
    torch.cuda.empty_cache()
    point("after_empty_cache")
    print(json.dumps(row), flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per allocator setting (default 3)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child()
    for conf in (None, "expandable_segments:True"):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        for _ in range(args.repeats):
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env,
                               capture_output=True, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                sys.stderr.write(r.stderr[-2000:])
                return r.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
