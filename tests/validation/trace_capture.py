#!/usr/bin/env python3
"""Record the CUDA caching allocator's event trace over the build and two training steps of HF +
PEFT arms (the same build and step as hf_harness.py), for replay against vramfit's model of the
allocator (include/vramfit/detail/allocator.hpp) and to see which tensor holds which block at the peak.

Usage: python3 trace_capture.py --out DIR [--frames] ARM_JSON [ARM_JSON ...]
  ARM_JSON is an arm as hf_harness.py takes it, e.g.
  '{"model":"SmolLM2-135M","mode":"lora","lora_rank":8,"lora_targets":"q_proj,v_proj","batch":1,"seq":1024}'
Writes DIR/trace-N.jsonl per arm, two lines:
  {"kind":"stack", ...}                    the stack record (as hf_harness.py writes it)
  {"kind":"trace", "arm", "baseline", "phases", "peak_allocated", "peak_requested", "events"}
  arm: the arm as hf_harness.py fills it in, lora_targets as the list of projection names.
  events: one integer per allocator event in order: a positive n is an allocation of n requested
  bytes, a negative -k frees the k-th allocation (1-based, counting allocations in order).
  baseline: bytes allocated before recording began (the cuBLAS workspaces), outside the events.
With --marks the row also has "marks": [position, label] pairs, the position being the number of
events before that point: each phase of each step, and each decoder layer's forward start and end
and backward start (the grad of its output arriving; "recompute" marks a checkpointed layer's
forward rerun inside the backward); and "trainable": the trainable parameters in order.
An arm with "trainer": true and "weights" (bf16 or fp32) runs transformers.Trainer's step instead of
the plain loop (--marks only; run_two_steps_trainer): bf16 autocast over weights of that dtype.
With --frames, also DIR/frames-N.json.gz: the Python frame of every allocation (for analysis).
Arms run in order in one process, as the harness runs a group.
"""
import argparse, contextlib, gzip, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_harness as H


def frame_of(entry):
    for f in entry.get("frames", []) or []:
        name = f.get("filename", "")
        if any(s in name for s in ("transformers", "peft", "torch/nn", "torch/optim", "torch/utils/checkpoint")):
            return "%s:%d:%s" % (name.split("site-packages/")[-1], f.get("line", 0), f.get("name", ""))
    fr = entry.get("frames") or []
    return "%s:%s" % (fr[0].get("filename", "?").split("/")[-1], fr[0].get("name", "?")) if fr else "?"


class Marks:
    """Positions in the event list (allocations plus frees so far) at named points of the step,
    read from the allocator's own counters, so marking allocates nothing on the GPU."""

    def __init__(self, torch):
        self.torch = torch
        self.items = []
        self.phase = "build"
        self.a0, self.f0 = self._counts()

    def _counts(self):
        st = self.torch.cuda.memory_stats()
        return int(st.get("allocation.all.allocated", 0)), int(st.get("allocation.all.freed", 0))

    def mark(self, label):
        a, f = self._counts()
        self.items.append([(a - self.a0) + (f - self.f0), label])


def decoder_layers(model):
    base = H.base_transformers_model(model)
    inner = getattr(base, "model", base)
    return list(inner.layers)


def hook_layers(model, marks):
    """Marks the start of each decoder layer's forward and of its backward (when the grad of its
    output arrives). Checkpointed recomputes in the backward are marked as such."""
    for idx, layer in enumerate(decoder_layers(model)):
        def pre(module, args, idx=idx):
            marks.mark("%s.%s%d" % (marks.phase, "recompute" if marks.phase.endswith("backward") else "layer", idx))

        def post(module, args, out, idx=idx):
            t = out[0] if isinstance(out, (tuple, list)) else out
            if marks.phase.endswith("forward"):
                marks.mark("%s.layer_end%d" % (marks.phase, idx))
                if getattr(t, "requires_grad", False):
                    t.register_hook(lambda g, idx=idx: marks.mark("%s.layer%d" % (marks.phase, idx)))
        layer.register_forward_pre_hook(pre)
        layer.register_forward_hook(post)


def run_two_steps_marked(model, arm, marks):
    """hf_harness.run_steps (two steps), with marks at every phase (same calls, same order)."""
    torch = H.torch
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = H.make_optimizer(params, arm)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    ids = torch.randint(0, arm["shape"]["vocab"], (arm["batch"], arm["seq"]), device="cuda", dtype=torch.long,
                        generator=gen)
    batch = {"input_ids": ids, "labels": ids.clone()}
    del ids, gen
    retained = arm["logits_retained"]
    phases = {}

    @contextlib.contextmanager
    def phase(step, name):
        begin = H._phase_begin()
        marks.phase = "step%d.%s" % (step, name)
        marks.mark(marks.phase)
        yield
        phases["step%d" % step][name] = H._phase_end(begin)

    for k in (1, 2):
        phases["step%d" % k] = {}
        if arm.get("step_file"):  # the user's own step (vramfit-record --step), its parts marked alike
            H.run_user_step(arm, model, batch, optimizer, lambda name, k=k: phase(k, name))
            continue
        with phase(k, "forward"):
            out = model(**batch)
            loss = out.loss
            if not retained:
                out = None
        with phase(k, "backward"):
            loss.backward()
        loss = None
        with phase(k, "optimizer"):
            optimizer.step()
        out = None
        with phase(k, "zero_grad"):
            optimizer.zero_grad(set_to_none=True)
    marks.phase = "end"
    marks.mark("end")
    trainable = [[n, list(p.shape), str(p.dtype)] for n, p in model.named_parameters() if p.requires_grad]
    del optimizer, params, batch
    return phases, trainable


# An arm of the Trainer's step (trace_capture.py --marks): "trainer": true, "weights": bf16 or fp32.
TRAINER_KEYS = ("trainer", "weights")


def run_two_steps_trainer(model, arm, marks):
    """Two optimizer steps of transformers.Trainer (bf16 autocast, the Trainer's default optimizer,
    gradient clipping at 1.0, accumulation 1), marked as run_two_steps_marked marks the plain loop:
    the forward at training_step's entry (the autocast forward and the loss), the backward at
    accelerator.backward, the optimizer at the gradient clipping (its norms belong to the
    optimizer's phase), zero_grad at on_optimizer_step (the scheduler, then model.zero_grad), the end
    at the second step's on_step_end. The data loader moves each batch to the GPU before
    training_step: step 1's lands in the build, step 2's in step 1's zero_grad phase, and no third
    is fetched before the end (a few small requests that steps after the second, run as the
    second, leave out). Returns (phases, trainable, optim)."""
    import tempfile
    from transformers import Trainer, TrainerCallback, TrainingArguments

    phases = {}
    at = {"step": 0, "name": None, "begin": None}

    def enter(step, name):
        """Closes the running phase and opens `name` of `step` ("end": none)."""
        if (at["step"], at["name"]) == (step, name):
            return
        if at["name"] is not None:
            phases["step%d" % at["step"]][at["name"]] = H._phase_end(at["begin"])
        if name == "end":
            at["name"] = None
            marks.phase = "end"
            marks.mark("end")
            return
        at.update(step=step, name=name)
        phases.setdefault("step%d" % step, {})
        at["begin"] = H._phase_begin()
        marks.phase = "step%d.%s" % (step, name)
        marks.mark(marks.phase)

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="trace-trainer-"), per_device_train_batch_size=arm["batch"],
        gradient_accumulation_steps=1, max_steps=2, learning_rate=1e-5, bf16=True, report_to=[],
        save_strategy="no", logging_strategy="no", eval_strategy="no", disable_tqdm=True, seed=0,
        dataloader_num_workers=0, max_grad_norm=1.0, gradient_checkpointing=arm["gradient_checkpointing"],
        gradient_checkpointing_kwargs={"use_reentrant": False} if arm["gradient_checkpointing"] else None)

    class Marker(TrainerCallback):
        def on_pre_optimizer_step(self, a, state, control, **kw):
            enter(at["step"], "optimizer")  # where no clipping ran (it marks the optimizer first)

        def on_optimizer_step(self, a, state, control, **kw):
            enter(at["step"], "zero_grad")

        def on_step_end(self, a, state, control, **kw):
            if state.global_step == 2:
                enter(None, "end")

    trainer = Trainer(model=model, args=args, train_dataset=H.random_ids_dataset(2 * arm["batch"], arm["seq"], arm["shape"]["vocab"]),
                      callbacks=[Marker()])
    training_step, acc = trainer.training_step, trainer.accelerator
    backward, clip = acc.backward, acc.clip_grad_norm_

    def marked_training_step(*a, **k):
        enter(at["step"] + 1, "forward")
        return training_step(*a, **k)

    def marked_backward(*a, **k):
        enter(at["step"], "backward")
        return backward(*a, **k)

    def marked_clip(*a, **k):
        enter(at["step"], "optimizer")
        return clip(*a, **k)

    trainer.training_step, acc.backward, acc.clip_grad_norm_ = marked_training_step, marked_backward, marked_clip
    trainer.train()
    if not marks.items or marks.items[-1][1] != "end":
        raise RuntimeError("the Trainer ran %d steps, not 2" % at["step"])
    opt = trainer.optimizer
    inner = getattr(opt, "optimizer", opt)
    optim = "%s %s (args.optim %s)" % (type(inner).__name__, {k: inner.defaults.get(k) for k in ("fused", "foreach")},
                                      args.optim)
    trainable = [[n, list(p.shape), str(p.dtype)] for n, p in model.named_parameters() if p.requires_grad]
    acc.free_memory()
    del trainer, opt, inner, acc
    return phases, trainable, optim


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--frames", action="store_true")
    p.add_argument("--marks", action="store_true",
                   help="mark phases and decoder layers (forward, backward) in the event list")
    p.add_argument("--addresses", action="store_true",
                   help="also record the address of every allocation and of every segment the "
                        "allocator opens (to check the allocator model's choice of block)")
    p.add_argument("arms", nargs="+")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    H._import_stack()
    torch = H.torch
    stack = H.collect_stack()
    steps = sorted({os.path.basename(json.loads(raw).get("step_file") or "") for raw in a.arms} - {""})
    if steps:  # the program file's software line names the user's step
        stack["step"] = ", ".join(steps)
    H.warmup_context()
    for n, raw in enumerate(a.arms):
        raw = json.loads(raw)
        trainer = {k: raw.pop(k) for k in TRAINER_KEYS if k in raw}
        if trainer and ("optim" in raw or not (a.marks and trainer.get("trainer") is True and
                                                trainer.get("weights") in ("bf16", "fp32"))):
            raise SystemExit("a Trainer arm needs --marks, \"trainer\": true and \"weights\": bf16 or fp32, and no "
                             "\"optim\" (it runs the Trainer's default)")
        arm = H.normalize_arm(raw)
        if trainer:
            arm.update(trainer)
        H.clean()
        baseline = int(torch.cuda.memory_allocated())
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc" if a.frames else None,
                                                 stacks="python", max_entries=4_000_000)
        torch.cuda.reset_peak_memory_stats()
        marks = Marks(torch) if a.marks else None
        optim = None
        if trainer:  # the Trainer turns checkpointing on itself, from TrainingArguments
            model, _ = H.build_model(dict(arm, gradient_checkpointing=False), arm["seq"],
                                     dtype=torch.float32 if arm["weights"] == "fp32" else torch.bfloat16)
        else:
            model, _ = H.build_model(arm, arm["seq"])
        res = {"phases": {}}
        trainable = None
        if trainer:
            hook_layers(model, marks)
            res["phases"], trainable, optim = run_two_steps_trainer(model, arm, marks)
        elif marks:
            hook_layers(model, marks)
            res["phases"], trainable = run_two_steps_marked(model, arm, marks)
        else:
            H.run_steps(model, arm, arm["shape"]["vocab"], 0, res)
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        ordinal = {}
        events, frames, addresses, segments = [], [], [], []
        count = 0
        foreign = []  # positions, counting every event, of frees of blocks made before recording
        for e in snap["device_traces"][torch.cuda.current_device()]:
            if e["action"] == "segment_alloc":
                segments.append([len(events), int(e["addr"]), int(e["size"])])
            if e["action"] == "alloc":
                count += 1
                ordinal[e["addr"]] = count
                events.append(int(e["size"]))
                addresses.append(int(e["addr"]))
                if a.frames:
                    frames.append(frame_of(e))
            elif e["action"] == "free_completed":
                if e["addr"] in ordinal:
                    events.append(-ordinal.pop(e["addr"]))
                else:  # made before recording began (an earlier arm's, collected late): not this arm's,
                    foreign.append(len(events) + len(foreign))  # but the marks counted it: see below
        # The harness resets the peak at every phase: the run's peak is the largest phase peak.
        phases = [ph for step in res["phases"].values() for ph in step.values()]
        row = {"kind": "trace", "arm": H.row_arm(arm), "baseline": baseline, "phases": res["phases"],
               "peak_allocated": max(ph["peak"] for ph in phases),
               "peak_requested": max(ph["requested_peak"] for ph in phases),
               "live_at_end": len(ordinal), "events": events}
        if foreign:
            row["foreign_frees"] = len(foreign)
        if optim:
            row["optimizer"] = optim
        if a.addresses:
            row["addresses"] = addresses
            row["segments"] = segments   # [events before it, address, bytes]
        if marks:
            # A mark's position counts every free the allocator completed, the foreign ones too:
            # less those before it, it indexes `events`.
            row["marks"] = [[p - sum(1 for f in foreign if f < p), label] for p, label in marks.items]
            row["trainable"] = trainable
        with open(os.path.join(a.out, "trace-%d.jsonl" % n), "w") as f:
            f.write(json.dumps({"kind": "stack", **stack}) + "\n")
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
        if a.frames:
            with gzip.open(os.path.join(a.out, "frames-%d.json.gz" % n), "wt") as f:
                json.dump(frames, f)
        print("arm %d: %s: %d events, baseline %d, peak allocated %d, requested %d"
              % (n, H.arm_summary(arm), len(events), baseline, row["peak_allocated"], row["peak_requested"]),
              flush=True)
        del model, res
        H.clean()


if __name__ == "__main__":
    main()
