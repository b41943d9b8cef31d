#!/usr/bin/env python3
"""Measure the step users run: `transformers.Trainer` (+ PEFT) on one CUDA GPU, per optimizer step.

Each arm is a model (hf_harness.py's presets), LoRA or full fine-tuning, and the TrainingArguments
that move memory: optim (None: the Trainer's default, recorded as resolved), gradient accumulation,
the weights' dtype (fp32 weights: mixed precision under autocast), the autocast precision (bf16, or
fp16 with the grad scaler), gradient checkpointing, batch and sequence length. Every arm runs in a
process of its own (this script re-runs itself with --child), as a user's training run does: the
model is built from its config with random weights (no downloads) straight on the GPU, the dataset
is fixed-length random ids, report_to=[], nothing saved.

A TrainerCallback reads the allocator's statistics at the Trainer's own hooks, so the figures are
the Trainer's step as it runs: peaks are reset at on_train_begin and after each phase;
"forward_backward" ends at on_pre_optimizer_step (every micro-batch's forward and backward, the
loss scaling and gradient clipping), "optimizer" at on_optimizer_step, "zero_grad" (the scheduler
and zero_grad) at on_step_end. A step's peak is the largest of its phases.

Rows (JSON Lines, flushed each line): "stack" once, then per arm one "trainer_step" per optimizer
step (or one "error" row), then "end". Usage:
  python3 trainer_harness.py --arms tests/validation/trainer_arms.json --out OUT.jsonl [--jobs 3]
Only the standard library is imported before the arguments are parsed (--help needs no torch).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_harness as H  # noqa: E402  (presets, configs, the stack record)

TRAINER_KEYS = {"grad_accum", "weights", "precision", "optim", "steps", "max_grad_norm", "budget_gib", "fit_check"}
OPTIMS = ("adamw_torch_fused", "adamw_torch", "adafactor", "sgd")


def normalize(raw):
    """An arm as hf_harness.normalize_arm fills it in, plus the Trainer's fields. Raises ArmSpecError."""
    if not isinstance(raw, dict):
        raise H.ArmSpecError("an arm must be a JSON object, got %r" % (raw,))
    arm = H.normalize_arm({k: v for k, v in raw.items() if k not in TRAINER_KEYS})
    if arm["logits_retained"]:
        raise H.ArmSpecError("the Trainer keeps no logits: logits_retained must be false")
    arm["grad_accum"] = H._as_int(raw.get("grad_accum", 1), "grad_accum", 1)
    arm["weights"] = raw.get("weights", "bf16")
    if arm["weights"] not in ("bf16", "fp32"):
        raise H.ArmSpecError("weights must be bf16 or fp32, got %r" % (arm["weights"],))
    arm["precision"] = raw.get("precision", "bf16")
    if arm["precision"] not in ("bf16", "fp16"):
        raise H.ArmSpecError("precision must be bf16 or fp16, got %r" % (arm["precision"],))
    if arm["precision"] == "fp16" and arm["weights"] == "bf16" and arm["mode"] == "full":
        raise H.ArmSpecError("fp16 autocast with bf16 weights trains bf16 grads the scaler cannot unscale "
                             "in the usual way; use fp32 weights or LoRA")
    arm["optim"] = raw.get("optim")
    if arm["optim"] is not None and arm["optim"] not in OPTIMS:
        raise H.ArmSpecError("optim must be one of %s, got %r" % (", ".join(OPTIMS), arm["optim"]))
    arm["steps"] = H._as_int(raw.get("steps", 3), "steps", 1)
    arm["max_grad_norm"] = float(raw.get("max_grad_norm", 1.0))
    # A trial: the process runs under set_per_process_memory_fraction(budget / total), as c10 limits
    # what the caching allocator may reserve; fit_check adds examples/python/vramfit_trainer.py's
    # callback with that budget (VRAMFIT names the executable).
    budget = raw.get("budget_gib")
    if budget is not None and (not isinstance(budget, (int, float)) or not 0 < budget <= 1024):
        raise H.ArmSpecError("budget_gib must be a number of GiB in (0, 1024], got %r" % (budget,))
    arm["budget_gib"] = budget
    arm["fit_check"] = H._as_bool(raw.get("fit_check", False), "fit_check")
    if arm["fit_check"] and budget is None:
        raise H.ArmSpecError("fit_check needs budget_gib")
    return arm


def summary(arm):
    return "%s ga%d w%s %s %s" % (H.arm_summary(arm), arm["grad_accum"], arm["weights"], arm["precision"],
                                  arm["optim"] or "default")


def param_bytes(arm):
    """A rough size of the arm on the GPU (for scheduling side-by-side processes only)."""
    s = arm["shape"]
    n = H.compute_params(s) + (0 if s["tied_embeddings"] else s["vocab"] * s["hidden"])  # + the embedding
    w = 4 if arm["weights"] == "fp32" else 2
    state = (w + 4 + 8) if arm["mode"] == "full" else w
    tokens = arm["batch"] * arm["seq"]
    act = tokens * s["hidden"] * s["layers"] * (4 if arm["gradient_checkpointing"] else 40)
    return n * state + act + tokens * s["vocab"] * 12 + (2 << 30)


# --------------------------------------------------------------------------
# The child: one arm, one process
# --------------------------------------------------------------------------

def child_main(arm_json, out_path):
    arm = normalize(json.loads(arm_json))
    H._import_stack()
    torch = H.torch
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments

    rows = []

    def emit(row):
        rows.append(row)
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    class Peaks(TrainerCallback):
        """Per-phase allocator figures at the Trainer's own hooks."""

        def __init__(self):
            self.phases = []
            self.steps = []
            self.micro = 0

        def _read(self, name):
            torch.cuda.synchronize()
            self.phases.append({"phase": name, "peak": int(torch.cuda.max_memory_allocated()),
                                "reserved_peak": int(torch.cuda.max_memory_reserved()),
                                "after": int(torch.cuda.memory_allocated()),
                                "reserved": int(torch.cuda.memory_reserved())})
            torch.cuda.reset_peak_memory_stats()

        def on_train_begin(self, args, state, control, **kw):
            torch.cuda.synchronize()
            self.before_train = {"allocated": int(torch.cuda.memory_allocated()),
                                 "reserved": int(torch.cuda.memory_reserved()),
                                 "build_peak": int(torch.cuda.max_memory_allocated())}
            torch.cuda.reset_peak_memory_stats()

        def on_substep_end(self, args, state, control, **kw):
            self.micro += 1

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self._read("forward_backward")

        def on_optimizer_step(self, args, state, control, **kw):
            self._read("optimizer")

        def on_step_end(self, args, state, control, **kw):
            self._read("zero_grad")
            self.steps.append(self.phases)
            self.phases = []

    t0 = time.time()
    budget_bytes = None
    if arm["budget_gib"] is not None:
        budget_bytes = int(arm["budget_gib"] * (1 << 30))
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(H.budget_fraction(budget_bytes, total))
    callbacks = [Peaks()]
    if arm["fit_check"]:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
        import vramfit_trainer
        callbacks.append(vramfit_trainer.fit_check_callback(seq=arm["seq"], budget="%dB" % budget_bytes))
    # Checkpointing comes from TrainingArguments, as the Trainer turns it on, not from the build.
    model, info = H.build_model(dict(arm, gradient_checkpointing=False), arm["seq"],
                                dtype=torch.float32 if arm["weights"] == "fp32" else torch.bfloat16)
    built = dict(info, allocated=int(torch.cuda.memory_allocated()), params=H.param_summary(model))
    n = arm["batch"] * arm["grad_accum"] * arm["steps"]
    kwargs = dict(output_dir=tempfile.mkdtemp(prefix="trainer-arm-"), per_device_train_batch_size=arm["batch"],
                  gradient_accumulation_steps=arm["grad_accum"], max_steps=arm["steps"], learning_rate=1e-5,
                  bf16=arm["precision"] == "bf16", fp16=arm["precision"] == "fp16", report_to=[],
                  save_strategy="no", logging_strategy="no", eval_strategy="no", disable_tqdm=True, seed=0,
                  dataloader_num_workers=0, max_grad_norm=arm["max_grad_norm"],
                  gradient_checkpointing=arm["gradient_checkpointing"])
    if arm["gradient_checkpointing"]:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if arm["optim"] is not None:
        kwargs["optim"] = arm["optim"]
    args = TrainingArguments(**kwargs)
    peaks = callbacks[0]
    trainer = Trainer(model=model, args=args, train_dataset=H.random_ids_dataset(n, arm["seq"], arm["shape"]["vocab"]),
                      callbacks=callbacks)
    base = {"kind": "trainer_step", "arm": dict(H.row_arm(arm)), "optim_resolved": str(args.optim),
            "optim_default": arm["optim"] is None, "built": built}
    error = error_type = None
    oom = False
    try:
        trainer.train()
    except Exception as e:  # an OOM, the fit check's refusal or anything else: recorded
        error, error_type, oom = H.err_text(e), type(e).__name__, H.is_oom(e)
        H.drop_exception(e)
    base["budget_bytes"] = budget_bytes
    base["oom"] = oom
    opt = getattr(trainer, "optimizer", None)
    inner = getattr(opt, "optimizer", opt)
    base["optimizer"] = {"class": type(inner).__name__ if inner is not None else None,
                         "defaults": {k: (v if isinstance(v, (int, float, bool, type(None))) else str(v))
                                      for k, v in (getattr(inner, "defaults", {}) or {}).items()}}
    base["scaler"] = type(getattr(getattr(trainer, "accelerator", None), "scaler", None)).__name__
    base["before_train"] = getattr(peaks, "before_train", None)
    base["micro_steps"] = peaks.micro
    base["seconds"] = round(time.time() - t0, 2)
    for k, phases in enumerate(peaks.steps, 1):
        emit(dict(base, step=k, phases=phases, peak=max(p["peak"] for p in phases),
                  reserved_peak=max(p["reserved_peak"] for p in phases)))
    if error is not None or not peaks.steps:
        emit(dict(base, kind="error", error=error or "no step ran", error_type=error_type, steps_done=len(peaks.steps),
                  partial_phases=peaks.phases))
    return 0


# --------------------------------------------------------------------------
# The parent: arms side by side, each in a fresh process
# --------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", help="a JSON file: a list of arms")
    p.add_argument("--out", required=True, help="output JSONL (overwritten)")
    p.add_argument("--jobs", type=int, default=3, help="arms running side by side (default 3)")
    p.add_argument("--share-gib", type=float, default=60.0,
                   help="what the running arms' rough sizes may sum to, GiB (default 60)")
    p.add_argument("--timeout-s", type=float, default=240.0, help="per arm (default 240)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child_main(a.child, a.out)
    if not a.arms:
        p.error("--arms is required")
    with open(a.arms) as f:
        raw = json.load(f)
    try:
        arms = [normalize(x) for x in raw]
    except H.ArmSpecError as e:
        p.error("%s: %s" % (a.arms, e))
    H._import_stack()
    stack = H.collect_stack()
    import transformers
    stack["trainer_default_optim"] = str(transformers.TrainingArguments(output_dir=tempfile.mkdtemp(),
                                                                         report_to=[]).optim)
    with open(a.out, "w") as f:
        f.write(json.dumps({"kind": "stack", **stack}) + "\n")
    parts = tempfile.mkdtemp(prefix="trainer-parts-")
    sizes = [param_bytes(arm) for arm in arms]
    pending = H.schedule_order(sizes)  # largest first, packed under the share as --trials packs budgets
    running = {}  # index -> (process, start, size, part path)
    share = a.share_gib * (1 << 30)
    done = 0
    while pending or running:
        while True:
            pos = H.pick_next([sizes[i] for i in pending], [r[2] for r in running.values()], a.jobs, share)
            if pos is None:
                break
            i = pending.pop(pos)
            part = os.path.join(parts, "arm-%03d.jsonl" % i)
            cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(raw[i]), "--out", part]
            log = open(part + ".log", "w")
            running[i] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.time(), sizes[i], part)
        time.sleep(0.5)
        for i, (proc, start, size, part) in list(running.items()):
            timed_out = time.time() - start > a.timeout_s
            if proc.poll() is None and not timed_out:
                continue
            if timed_out and proc.poll() is None:
                proc.kill()
                proc.wait()
            del running[i]
            done += 1
            rows = []
            if os.path.exists(part):
                with open(part) as f:
                    rows = [json.loads(line) for line in f if line.strip()]
            if proc.returncode != 0 and not any(r["kind"] == "error" for r in rows):
                with open(part + ".log") as f:
                    tail = f.read()[-1500:]
                rows.append({"kind": "error", "arm": H.row_arm(arms[i]),
                             "error": "timed out" if timed_out else "exit %s" % proc.returncode, "log_tail": tail})
            with open(a.out, "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
            ok = sum(r["kind"] == "trainer_step" for r in rows)
            H.log("[%d/%d] %s: %d steps%s (%.0f s)" % (done, len(arms), summary(arms[i]), ok,
                                                      "" if ok else " ERROR", time.time() - start))
    with open(a.out, "a") as f:
        f.write(json.dumps({"kind": "end", "arms": len(arms)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
