#!/usr/bin/env python3
"""Record the CUDA caching allocator's event trace over the build and two training steps of HF +
PEFT arms (the same build and step as hf_harness.py), for replay against vramfit's model of the
allocator (include/vramfit/allocator.hpp) and to see which tensor holds which block at the peak.

Usage: python3 trace_capture.py --out DIR [--frames] ARM_JSON [ARM_JSON ...]
  ARM_JSON is an arm as hf_harness.py takes it, e.g.
  '{"model":"SmolLM2-135M","mode":"lora","lora_rank":8,"lora_targets":"q_proj,v_proj","batch":1,"seq":1024}'
Writes DIR/trace-N.jsonl per arm, two lines:
  {"kind":"stack", ...}                    the stack record (as hf_harness.py writes it)
  {"kind":"trace", "arm", "baseline", "phases", "peak_allocated", "peak_requested", "events"}
  events: one integer per allocator event in order: a positive n is an allocation of n requested
  bytes, a negative -k frees the k-th allocation (1-based, counting allocations in order).
  baseline: bytes allocated before recording began (the cuBLAS workspaces), outside the events.
With --frames, also DIR/frames-N.json.gz: the Python frame of every allocation (for analysis).
Arms run in order in one process, as the harness runs a group.
"""
import argparse, gzip, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_harness as H


def frame_of(entry):
    for f in entry.get("frames", []) or []:
        name = f.get("filename", "")
        if any(s in name for s in ("transformers", "peft", "torch/nn", "torch/optim", "torch/utils/checkpoint")):
            return "%s:%d:%s" % (name.split("site-packages/")[-1], f.get("line", 0), f.get("name", ""))
    fr = entry.get("frames") or []
    return "%s:%s" % (fr[0].get("filename", "?").split("/")[-1], fr[0].get("name", "?")) if fr else "?"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--frames", action="store_true")
    p.add_argument("arms", nargs="+")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    H._import_stack()
    torch = H.torch
    stack = H.collect_stack()
    H.warmup_context()
    for n, raw in enumerate(a.arms):
        arm = H.normalize_arm(json.loads(raw))
        H.clean()
        baseline = int(torch.cuda.memory_allocated())
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc" if a.frames else None,
                                                 stacks="python", max_entries=4_000_000)
        torch.cuda.reset_peak_memory_stats()
        model, _ = H.build_model(arm, arm["seq"])
        res = {"phases": {}}
        H.run_two_steps(model, arm, arm["shape"]["vocab"], 0, res)
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        ordinal = {}
        events, frames = [], []
        count = 0
        for e in snap["device_traces"][torch.cuda.current_device()]:
            if e["action"] == "alloc":
                count += 1
                ordinal[e["addr"]] = count
                events.append(int(e["size"]))
                if a.frames:
                    frames.append(frame_of(e))
            elif e["action"] == "free_completed":
                events.append(-ordinal.pop(e["addr"]))
        # The harness resets the peak at every phase: the run's peak is the largest phase peak.
        phases = [ph for step in res["phases"].values() for ph in step.values()]
        row = {"kind": "trace", "arm": arm, "baseline": baseline, "phases": res["phases"],
               "peak_allocated": max(ph["peak"] for ph in phases),
               "peak_requested": max(ph["requested_peak"] for ph in phases),
               "live_at_end": len(ordinal), "events": events}
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
