#!/usr/bin/env python3
"""The arms recorded for the HF + PEFT step programs, one JSON object a line, for
trace_capture.py --marks. Every kind (architecture and head, LoRA targets or full fine-tuning,
checkpointing, kept logits) at 4 and 6 layers and head_dim 64, and some at head_dim 128, at
dimensions where no request size can be read as two different products of them (B 7, S 416,
hidden 345, intermediate 872, heads 15, kv_heads 3, vocab 3001, rank 11). Full fine-tuning is
recorded at hidden 360: its backward sums the norm weights' grads over the tokens, and at an odd
hidden that reduction does not split across thread blocks (no staging buffer is requested, so the
recording would not show where one goes); at 360 it does, as at every real model's hidden.

On the GPU machine:
  mapfile -t ARMS < <(python3 program_arms.py)
  python3 trace_capture.py --marks --out OUT "${ARMS[@]}"     # then join OUT/trace-*.jsonl
The Trainer's step (transformers.Trainer, bf16 autocast, bf16 or fp32 weights): --trainer.
The same arms for the Probe's LibTorch step (config files written to DIR, one line of flags an arm):
  python3 program_arms.py --probe-configs DIR | while read -r f; do
    vramfit probe $f --json --trace-out OUT.jsonl; done
"""
import json, os, sys

from vramfit_flags import step_flags

SHAPE = {"vocab": 3001, "hidden": 345, "intermediate": 872, "heads": 15, "kv_heads": 3}
KINDS = (("llama", False), ("llama", True), ("qwen2", True), ("qwen2", False))
MODES = (("lora", "q_proj,k_proj,v_proj,o_proj"), ("lora", "q_proj,v_proj"), ("lora", "all-linear"), ("full", None))
# (checkpointing, kept logits): plain, kept logits, checkpointing.
VARIANTS = ((False, False), (False, True), (True, False))


FULL_HIDDEN = 360


def arm(arch, tied, mode, targets, layers, head_dim, gc, ret, optim="adamw", lora_dropout=0.0):
    """One recording arm; `optim` and `lora_dropout` (LoRA only) as hf_harness.py takes them."""
    shape = dict(SHAPE, layers=layers, head_dim=head_dim, tied_embeddings=tied)
    if mode == "full":
        shape["hidden"] = FULL_HIDDEN
    a = {"shape": shape, "arch": arch,
         "name": "probe-%s-%s-L%d%s" % (arch, "tied" if tied else "untied", layers, "" if head_dim == 64 else "-d%d" % head_dim),
         "mode": mode, "gradient_checkpointing": gc, "logits_retained": ret, "batch": 7, "seq": 416}
    if mode == "lora":
        a["lora_rank"] = 11
        a["lora_targets"] = targets
        if lora_dropout:
            a["lora_dropout"] = lora_dropout
    if optim != "adamw":
        a["optim"] = optim
    return a


def arms():
    out = []
    for layers in (4, 6):
        for arch, tied in KINDS:
            for mode, targets in MODES:
                for gc, ret in VARIANTS:
                    out.append(arm(arch, tied, mode, targets, layers, 64, gc, ret))
    for arch, tied in (("llama", False), ("qwen2", True)):
        for mode, targets in MODES:
            for gc in (False, True):
                out.append(arm(arch, tied, mode, targets, 4, 128, gc, False))
    return out


def trainer_arms():
    """The arms of the Trainer's step (trace_capture.py --marks, "trainer": true): every kind the
    plain loop's programs hold but kept logits (the Trainer keeps none), with bf16 weights and with
    fp32 weights under bf16 autocast (mixed precision)."""
    out = []
    for weights in ("bf16", "fp32"):
        for layers in (4, 6):
            for arch, tied in KINDS:
                for mode, targets in MODES:
                    for gc in (False, True):
                        out.append(dict(arm(arch, tied, mode, targets, layers, 64, gc, False), trainer=True,
                                        weights=weights))
        for arch, tied in (("llama", False), ("qwen2", True)):
            for mode, targets in MODES:
                for gc in (False, True):
                    out.append(dict(arm(arch, tied, mode, targets, 4, 128, gc, False), trainer=True, weights=weights))
    return out


def probe_flags(a, config_dir):
    """The same arm for the Probe's LibTorch reference step (`vramfit probe --stack libtorch`):
    writes its config.json into config_dir and returns the flags."""
    s = a["shape"]
    name = "%s-%s-L%d-h%d-d%d" % (a["arch"], "tied" if s["tied_embeddings"] else "untied", s["layers"], s["hidden"],
                                  s["head_dim"])
    cfg = {"model_type": a["arch"], "vocab_size": s["vocab"], "hidden_size": s["hidden"],
           "intermediate_size": s["intermediate"], "num_hidden_layers": s["layers"],
           "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"],
           "tie_word_embeddings": s["tied_embeddings"], "hidden_act": "silu"}
    path = os.path.join(config_dir, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return ["--config", path, "--stack", "libtorch"] + step_flags(a)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe-configs":
        # One line of `vramfit probe` flags per arm (configs written to the folder given).
        os.makedirs(sys.argv[2], exist_ok=True)
        for a in arms():
            print(" ".join(probe_flags(a, sys.argv[2])))
    elif sys.argv[1:] == ["--trainer"]:  # the Trainer's step (trace_capture.py runs it for these)
        for a in trainer_arms():
            print(json.dumps(a, separators=(",", ":")))
    else:
        for a in arms():
            print(json.dumps(a, separators=(",", ":")))
