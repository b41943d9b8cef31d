#!/usr/bin/env python3
"""Summarise an `hf_harness.py --trials` run: one line per trial (case, budget, allocator setting,
batch, outcome, allocated and reserved peaks) and whether `vramfit predict --budget` gives the same
verdict, disagreements marked; under each case, the largest batch that ran, the smallest that ran
out of memory and `vramfit max-batch`'s answer. Needs no GPU and no torch.

    python3 tests/validation/trials_summary.py trials.jsonl --vramfit build/vramfit

A verdict "fits" agrees with outcome ok and "does not fit" with oom. "NO: fit, OOM" is the
dangerous disagreement (vramfit said it fits and it ran out of memory), "NO: no fit, ran" the
conservative one. Trials that failed for another reason or were skipped are not compared. Exit
status 0, or 2 for a bad input.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hf_harness as H  # noqa: E402  (imports no torch)
from vramfit_flags import step_flags  # noqa: E402

GIB = float(1 << 30)


def gib(x):
    return "-" if x is None else "%.2f" % (x / GIB)


def read_trials(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: not JSON (%s)" % (path, n, e))
            if row.get("kind") == "trial":
                rows.append(row)
    rows.sort(key=lambda r: r.get("trial_index", 0))
    return rows


def model_flags(row, config_dir):
    """--model for the harness's presets (vramfit has them all), else a config.json of the shape."""
    if row["model"] in H.PRESETS:
        return ["--model", row["model"]]
    s = row["shape"]
    cfg = {"model_type": row["arch"], "vocab_size": s["vocab"], "hidden_size": s["hidden"],
           "intermediate_size": s["intermediate"], "num_hidden_layers": s["layers"],
           "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"],
           "tie_word_embeddings": s["tied_embeddings"], "hidden_act": "silu"}
    if row["arch"] == "llama":
        cfg["attention_bias"] = s["qkv_bias"]
    path = os.path.join(config_dir, "trial-%d.json" % row.get("trial_index", 0))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    return ["--config", path]


def vramfit_args(row, config_dir, command):
    """The vramfit command line (after the program) for a trial row: predict or max-batch."""
    arm = dict(row, lora_targets=H.targets_text(row["lora_targets"]))
    flags = step_flags(arm)
    if command == "max-batch":
        i = flags.index("--batch")
        del flags[i:i + 2]
    return [command] + model_flags(row, config_dir) + flags + ["--budget", "%dB" % row["budget_bytes"], "--json"]


def run_vramfit(exe, args):
    """vramfit's JSON answer, or {"error": text}; exit 3 (does not fit) is an answer."""
    try:
        p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if p.returncode not in (0, 3):
        return {"error": (p.stderr or p.stdout).strip()[:200]}
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": "not JSON: " + p.stdout[:200]}


def conf_text(conf):
    if conf is None:
        return "default"
    return "expandable" if conf == "expandable_segments:True" else conf


def agreement(outcome, fits, oom_cause=None):
    """'yes', 'NO: fit, OOM', 'NO: no fit, ran', or '-' when there is nothing to compare (an error,
    a skipped trial, no verdict, or an OOM because the device itself was full: not the budget's)."""
    if fits is None or outcome not in ("ok", "oom") or (outcome == "oom" and oom_cause == "device"):
        return "-"
    if fits == (outcome == "ok"):
        return "yes"
    return "NO: fit, OOM" if fits else "NO: no fit, ran"


def outcome_text(row):
    o = row.get("outcome") or "?"
    if o == "oom":
        where = row.get("oom_phase") or "?"
        if row.get("oom_step"):
            where = "s%d.%s" % (row["oom_step"], where)
        return ("oom(device) " if row.get("oom_cause") == "device" else "oom ") + where
    return o


def case_bounds(rows):
    """(largest batch that ran, smallest batch that ran out of memory) among a case's rows."""
    ok = [r["batch"] for r in rows if r.get("outcome") == "ok"]
    oom = [r["batch"] for r in rows if r.get("outcome") == "oom"]
    return (max(ok) if ok else None), (min(oom) if oom else None)


def main(argv=None):
    p = argparse.ArgumentParser(description="Summarise hf_harness.py --trials rows against vramfit's verdicts.")
    p.add_argument("file", help="the JSONL file hf_harness.py --trials wrote")
    p.add_argument("--vramfit", default=os.path.join(HERE, "..", "..", "build", "vramfit"),
                   help="the vramfit CLI (default: build/vramfit of this checkout); verdicts are left out "
                        "when it is missing")
    args = p.parse_args(argv)
    try:
        rows = read_trials(args.file)
    except (OSError, ValueError) as e:
        p.error(str(e))
    if not rows:
        p.error("%s has no trial rows" % args.file)
    exe = os.path.abspath(args.vramfit)
    have_vramfit = os.path.isfile(exe) and os.access(exe, os.X_OK)
    if not have_vramfit:
        print("(no vramfit at %s: verdicts left out)" % exe)

    cases = []
    by_case = {}
    for r in rows:
        if r["case"] not in by_case:
            by_case[r["case"]] = []
            cases.append(r["case"])
        by_case[r["case"]].append(r)

    counts = {"yes": 0, "NO: fit, OOM": 0, "NO: no fit, ran": 0, "-": 0}
    reported_mismatch = []
    head = "%7s  %-10s %5s  %-22s %9s %9s  %-8s %-17s %s" % (
        "budget", "alloc_conf", "batch", "outcome", "alloc GiB", "resv GiB", "reported", "vramfit", "agrees")
    with tempfile.TemporaryDirectory(prefix="trials-summary-") as config_dir:
        for case in cases:
            members = sorted(by_case[case], key=lambda r: (r["batch"], r.get("trial_index", 0)))
            ran, oom = case_bounds(members)
            predicted = None
            if have_vramfit:
                mb = run_vramfit(exe, vramfit_args(members[0], config_dir, "max-batch"))
                predicted = mb.get("max_batch", "error: " + mb.get("error", "?"))
            print("")
            print("%s\n  largest batch that ran: %s, smallest that ran out of memory: %s%s" % (
                case, "-" if ran is None else ran, "-" if oom is None else oom,
                "" if predicted is None else "; vramfit max-batch: %s" % predicted))
            print("  " + head)
            for r in members:
                fits = None
                verdict = "-"
                if have_vramfit:
                    pr = run_vramfit(exe, vramfit_args(r, config_dir, "predict"))
                    if "error" in pr:
                        verdict = "error"
                        print("  (vramfit: %s)" % pr["error"])
                    else:
                        fits = bool(pr["fits"])
                        verdict = "%s %s" % ("fits" if fits else "no fit", gib(pr["required_bytes"]))
                agrees = agreement(r.get("outcome"), fits, r.get("oom_cause"))
                counts[agrees] += 1
                rep = r.get("reported")
                if rep and r.get("outcome") in ("ok", "oom") and rep != r["outcome"]:
                    reported_mismatch.append(r)
                print("  %7s  %-10s %5d  %-22s %9s %9s  %-8s %-17s %s%s" % (
                    H.budget_text(r["budget_bytes"]), conf_text(r.get("alloc_conf")), r["batch"], outcome_text(r), gib(r.get("allocated_peak")), gib(r.get("reserved_peak")),
                    rep or "-", verdict, agrees,
                    ("  " + str(r.get("error"))[:100]) if r.get("outcome") == "error" else ""))
    print("")
    print("%d trials: %d agree, %d vramfit said fits and it ran out of memory, %d vramfit said no fit and it "
          "ran, %d not compared (error, skipped, no verdict, or an OOM of a full device)" % (
              len(rows), counts["yes"], counts["NO: fit, OOM"], counts["NO: no fit, ran"], counts["-"]))
    outcomes = {}
    for r in rows:
        outcomes[r.get("outcome")] = outcomes.get(r.get("outcome"), 0) + 1
    print("outcomes: " + ", ".join("%s %d" % (k, v) for k, v in sorted(outcomes.items(), key=lambda kv: str(kv[0]))))
    if reported_mismatch:
        print("differs from what issue 13 reports: " + "; ".join(
            "%s b=%d: %s, reported %s" % (r["case"], r["batch"], r["outcome"], r["reported"]) for r in reported_mismatch))
    print("GiB = 2^30 bytes; vramfit: predict --budget's verdict and its required bytes (peak plus the "
          "allocator's margin); alloc and resv: the largest per-step max_memory_allocated and max_memory_reserved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
