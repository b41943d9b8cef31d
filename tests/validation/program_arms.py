#!/usr/bin/env python3
"""The arms recorded for the HF + PEFT step programs, one JSON object a line, for
trace_capture.py --marks. Every kind (architecture and head, LoRA targets or full fine-tuning,
checkpointing, kept logits) at 4 and 6 layers and head_dim 64, and some at head_dim 128, at
dimensions where no request size can be read as two different products of them (B 7, S 416,
hidden 345, intermediate 872, heads 15, kv_heads 3, vocab 3001, rank 11).

On the GPU machine:
  mapfile -t ARMS < <(python3 program_arms.py)
  python3 trace_capture.py --marks --out OUT "${ARMS[@]}"     # then join OUT/trace-*.jsonl
"""
import json

SHAPE = {"vocab": 3001, "hidden": 345, "intermediate": 872, "heads": 15, "kv_heads": 3}
KINDS = (("llama", False), ("llama", True), ("qwen2", True), ("qwen2", False))
MODES = (("lora", "q_proj,k_proj,v_proj,o_proj"), ("lora", "q_proj,v_proj"), ("lora", "all-linear"), ("full", None))


def arm(arch, tied, mode, targets, layers, head_dim, gc, ret):
    a = {"shape": dict(SHAPE, layers=layers, head_dim=head_dim, tied_embeddings=tied), "arch": arch,
         "name": "probe-%s-%s-L%d%s" % (arch, "tied" if tied else "untied", layers, "" if head_dim == 64 else "-d%d" % head_dim),
         "mode": mode, "gradient_checkpointing": gc, "logits_retained": ret, "batch": 7, "seq": 416}
    if mode == "lora":
        a["lora_rank"] = 11
        a["lora_targets"] = targets
    return a


def arms():
    out = []
    for layers in (4, 6):
        for arch, tied in KINDS:
            for mode, targets in MODES:
                for gc, ret in ((False, False), (False, True), (True, False)):
                    out.append(arm(arch, tied, mode, targets, layers, 64, gc, ret))
    for arch, tied in (("llama", False), ("qwen2", True)):
        for mode, targets in MODES:
            for gc in (False, True):
                out.append(arm(arch, tied, mode, targets, 4, 128, gc, False))
    return out


if __name__ == "__main__":
    for a in arms():
        print(json.dumps(a, separators=(",", ":")))
