#!/usr/bin/env python3
"""Checks of hf_harness.py --trials that need no GPU and no torch: the trial file, the
out-of-memory message parser (on messages in PyTorch's format), the scheduler, the command line,
the parent's process handling (with a stand-in child) and the child's bookkeeping (with a stand-in
torch). Plain asserts: python3 tests/validation/test_trials.py
"""

import json
import os
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hf_harness as H  # noqa: E402  (imports no torch)
import trials_summary as S  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
TRIALS_13 = os.path.join(HERE, "trials_13.json")
EXP = "expandable_segments:True"


def format_size(size):
    """c10/cuda/CUDACachingAllocator.cpp's format_size: two decimals, bytes / KiB / MiB / GiB."""
    if size <= 1024:
        return "%d bytes" % size
    if size <= 1048576:
        return "%.2f KiB" % (size / 1024.0)
    if size <= 1073741824:
        return "%.2f MiB" % (size / 1048576.0)
    return "%.2f GiB" % (size / 1073741824.0)


def oom_message(alloc_size, total, free, allocated, reserved, allowed=None, procs="", private=0):
    """The message DeviceCachingAllocator::malloc raises, assembled as the C++ does."""
    return ("CUDA out of memory. Tried to allocate " + format_size(alloc_size) + ". GPU 0 has a total capacity of "
            + format_size(total) + " of which " + format_size(free) + " is free. " + procs
            + ("" if allowed is None else format_size(allowed) + " allowed; ")
            + "Of the allocated memory " + format_size(allocated + private) + " is allocated by PyTorch, "
            + ("with " + format_size(private) + " allocated in private pools (e.g., CUDA Graphs), " if private else "")
            + "and " + format_size(reserved - allocated - private) + " is reserved by PyTorch but unallocated."
            + " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
            " to avoid fragmentation.  See documentation for Memory Management "
            " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def close(parsed, exact, text_unit):
    """A parsed size is the printed one: within half of 0.01 of its unit."""
    return parsed is not None and abs(parsed - exact) <= 0.005 * text_unit + 1


# ---- the out-of-memory message -----------------------------------------------------------------

def test_parse_oom_message_literal():
    msg = ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 139.81 GiB of which "
           "96.31 GiB is free. Process 4242 has 13.50 GiB memory in use. Including non-PyTorch memory, this process "
           "has 24.51 GiB memory in use. 24.00 GiB allowed; Of the allocated memory 20.88 GiB is allocated by "
           "PyTorch, and 3.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
           "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
           "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-"
           "variables)")
    p = H.parse_oom_message(msg)
    assert p["message"] == msg
    assert p["tried_to_allocate_bytes"] == 20 * MIB
    assert p["allowed_bytes"] == 24 * GIB
    assert p["allocated_by_pytorch_bytes"] == round(20.88 * GIB)
    assert p["reserved_unallocated_bytes"] == round(3.10 * GIB)
    assert p["device_free_bytes"] == round(96.31 * GIB)
    assert p["device_total_bytes"] == round(139.81 * GIB)
    assert p["process_in_use_bytes"] == round(24.51 * GIB)  # this process's, not process 4242's
    assert p["cause"] == "budget"


def test_parse_oom_message_round_trip():
    total = 150_110_011_392
    cases = [
        dict(alloc_size=20 * MIB, total=total, free=100 * GIB + 12345, allocated=22_416_000_000,
             reserved=25_700_000_000, allowed=25769803776),
        dict(alloc_size=2 * MIB, total=total, free=3 * MIB, allocated=4_000_000_000, reserved=4_200_000_000,
             allowed=4 * GIB, procs="Process 11 has 60.00 GiB memory in use. Including non-PyTorch memory, this "
                                    "process has 4.50 GiB memory in use. "),
        dict(alloc_size=1_610_612_736, total=total, free=120 * GIB, allocated=700 * 1024, reserved=2 * MIB),
        dict(alloc_size=512 * MIB, total=total, free=50 * GIB, allocated=9 * GIB, reserved=14 * GIB,
             allowed=12 * GIB, private=3 * GIB),
    ]
    for c in cases:
        msg = oom_message(**c)
        p = H.parse_oom_message(msg)
        unit = lambda x: 1 if x <= 1024 else 1024 if x <= MIB else MIB if x <= GIB else GIB  # noqa: E731
        assert close(p["tried_to_allocate_bytes"], c["alloc_size"], unit(c["alloc_size"])), (p, c)
        alloc = c["allocated"] + c.get("private", 0)
        assert close(p["allocated_by_pytorch_bytes"], alloc, unit(alloc)), (p, c)
        unalloc = c["reserved"] - alloc
        assert close(p["reserved_unallocated_bytes"], unalloc, unit(unalloc)), (p, c)
        if c.get("allowed") is None:
            assert p["allowed_bytes"] is None
        else:
            assert close(p["allowed_bytes"], c["allowed"], unit(c["allowed"])), (p, c)
        assert close(p["device_free_bytes"], c["free"], unit(c["free"]))
        assert p["cause"] == ("budget" if c["free"] >= c["alloc_size"] else "device"), (p, c)
    # 700 KiB printed as "700.00 KiB", 2 MiB - 700 KiB as "1.32 MiB".
    p = H.parse_oom_message(oom_message(**cases[2]))
    assert p["allocated_by_pytorch_bytes"] == 700 * 1024
    assert p["reserved_unallocated_bytes"] == round(1.32 * MIB)
    assert p["process_in_use_bytes"] is None  # no NVML report in that one


def test_parse_oom_message_other_failures():
    # A cuBLAS workspace that could not be had, with a C++ trace after the first line.
    msg = ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
           "Exception raised from ... (most recent call first):\nframe #0: c10::Error::Error")
    p = H.parse_oom_message(msg)
    assert p["message"] == "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    for k, _ in H.OOM_FIELDS:
        assert p[k] is None
    assert p["cause"] is None
    p = H.parse_oom_message("\n  CUDA out of memory. Tried to allocate 512 bytes. GPU 0 has a total capacity of "
                            "79.19 GiB of which 0 bytes is free.\nmore")
    assert p["message"].startswith("CUDA out of memory. Tried to allocate 512 bytes.")
    assert p["tried_to_allocate_bytes"] == 512 and p["device_free_bytes"] == 0 and p["cause"] == "device"


# ---- phases and per-step peaks ------------------------------------------------------------------

def phase(peak, reserved):
    return {"before": 0, "peak": peak, "after": 0, "reserved_peak": reserved, "requested_peak": 0, "seconds": 0.1}


def full_step(base):
    return {"forward": phase(base + 1, base + 10), "backward": phase(base + 3, base + 12),
            "optimizer": phase(base + 2, base + 12), "zero_grad": phase(base, base + 12)}


def test_parse_failed_phase():
    assert H.parse_failed_phase("step2.backward") == ("backward", 2)
    assert H.parse_failed_phase("step1.forward") == ("forward", 1)
    assert H.parse_failed_phase("build") == ("build", None)
    assert H.parse_failed_phase("input") == ("input", None)
    assert H.parse_failed_phase("warmup") == ("warmup", None)
    assert H.parse_failed_phase(None) == (None, None)


def test_step_peaks():
    phases = {"step1": full_step(100), "step2": full_step(200), "step3": full_step(150)}
    s = H.step_peaks(phases, 3)
    assert [x["allocated_peak"] for x in s] == [103, 203, 153]
    assert [x["reserved_peak"] for x in s] == [112, 212, 162]
    assert all(x["complete"] for x in s) and [x["step"] for x in s] == [1, 2, 3]
    # Out of memory in step 2's backward: step 2 has its forward and the peaks read at the error.
    phases = {"step1": full_step(100), "step2": {"forward": phase(201, 210)}}
    s = H.step_peaks(phases, 3, "step2.backward", (260, 300))
    assert len(s) == 2 and s[0]["complete"] and not s[1]["complete"]
    assert s[1]["allocated_peak"] == 260 and s[1]["reserved_peak"] == 300
    # Out of memory in step 1's forward: an empty phase dict, only the error's peaks.
    s = H.step_peaks({"step1": {}}, 3, "step1.forward", (50, 60))
    assert s == [{"step": 1, "allocated_peak": 50, "reserved_peak": 60, "complete": False}]
    assert H.step_peaks({}, 3, "build", (5, 6)) == []
    assert H.step_peaks({}, 3, "input", (5, 6)) == []


def test_finish_trial_row():
    t = H.normalize_trial({"model": "SmolLM2-135M", "batch": 2, "seq": 256, "budget_bytes": 4 * GIB}, 0)
    row = H.trial_row(t)
    row["outcome"] = "ok"
    res = {"phases": {"step1": full_step(100), "step2": full_step(200), "step3": full_step(150)},
           "realised_seq": 256, "loss_step1": 11.0, "loss_step2": 10.9, "loss_step3": 10.8}
    H.finish_trial_row(row, res, None)
    assert row["steps_completed"] == 3 and row["allocated_peak"] == 203 and row["reserved_peak"] == 212
    assert row["losses"] == [11.0, 10.9, 10.8] and row["outcome"] == "ok"
    row = H.trial_row(t)
    row["outcome"] = "ok"
    H.finish_trial_row(row, dict(res, realised_seq=255), None)
    assert row["outcome"] == "error" and "realised seq 255" in row["error"]


# ---- trials and the file -------------------------------------------------------------------------

def test_normalize_trial():
    t = H.normalize_trial({"model": "Llama-3.2-1B", "mode": "full", "gradient_checkpointing": True, "batch": 10,
                           "seq": 2048, "budget_bytes": 40 * GIB, "alloc_conf": EXP, "reported": "ok"}, 3)
    assert t["index"] == 3 and t["budget_bytes"] == 40 * GIB and t["alloc_conf"] == EXP and t["reported"] == "ok"
    assert t["case"] == "Llama-3.2-1B full gc s2048 40GiB expandable_segments:True"
    assert t["arm"]["batch"] == 10 and t["arm"]["lora_target_modules"] is None
    t = H.normalize_trial({"model": "SmolLM2-135M", "lora_targets": "attention", "budget_bytes": 24e9}, 0)
    assert t["budget_bytes"] == 24_000_000_000 and t["alloc_conf"] is None
    assert t["case"] == "SmolLM2-135M lora r8 q_proj,k_proj,v_proj,o_proj s1024 24.00GB default"
    row = H.trial_row(t)
    assert row["lora_targets"] == ["q_proj", "k_proj", "v_proj", "o_proj"]  # the schema's list form
    assert row["kind"] == "trial" and row["budget_bytes"] == 24_000_000_000 and row["outcome"] is None
    bad = [
        ({"model": "SmolLM2-135M"}, "budget_bytes"),
        ({"model": "SmolLM2-135M", "budget_bytes": 0}, "budget_bytes"),
        ({"model": "SmolLM2-135M", "budget_bytes": 1.5e9 + 0.5}, "budget_bytes"),
        ({"model": "SmolLM2-135M", "budget_bytes": GIB, "alloc_conf": "expandable_segments: True"}, "alloc_conf"),
        ({"model": "SmolLM2-135M", "budget_bytes": GIB, "alloc_conf": ""}, "alloc_conf"),
        ({"model": "SmolLM2-135M", "budget_bytes": GIB, "alloc_conf": True}, "alloc_conf"),
        ({"model": "SmolLM2-135M", "budget_bytes": GIB, "reported": "OOM"}, "reported"),
        ({"model": "SmolLM2-135M", "budget_bytes": GIB, "case": ""}, "case"),
        ({"model": "SmolLM2-135M", "budget_bytes": GIB, "cap_bytes": GIB}, "unknown arm field"),
        ({"model": "SmolLM2-135M", "budget_bytes": GIB, "mode": "full", "lora_rank": 8}, "lora_rank"),
        ({"model": "Nope-1B", "budget_bytes": GIB}, "unknown model preset"),
        ("SmolLM2-135M", "JSON object"),
    ]
    for raw, words in bad:
        try:
            H.normalize_trial(raw, 7)
        except H.ArmSpecError as e:
            assert str(e).startswith("trial 7: ") and words in str(e), (raw, str(e))
        else:
            raise AssertionError("accepted %r" % (raw,))


def test_budget_fraction_and_env():
    assert H.budget_fraction(24 * GIB, 150_110_011_392) == 24 * GIB / 150_110_011_392
    assert H.budget_fraction(200 * GIB, 150_110_011_392) == 1.0
    base = {"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "x:1"}
    assert H.trial_env(base, None) == {"PATH": "/bin"}
    assert H.trial_env(base, "max_split_size_mb:128") == {"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    assert base["PYTORCH_ALLOC_CONF"] == "x:1"  # the parent's own environment is left alone
    assert H.budget_text(24 * GIB) == "24GiB" and H.budget_text(int(120e9)) == "120.00GB"


def test_trials_13_file():
    trials = H.load_trials_file(TRIALS_13)
    assert 48 <= len(trials) <= 70, len(trials)
    cases = {}
    for t in trials:
        cases.setdefault(t["case"], []).append(t)
    assert len(cases) >= 12
    assert len({t["arm"]["model"] for t in trials}) >= 4
    assert {t["arm"]["mode"] for t in trials} == {"lora", "full"}
    assert {t["arm"]["gradient_checkpointing"] for t in trials} == {True, False}
    assert {t["alloc_conf"] for t in trials} == {None, EXP}
    budgets = {t["budget_bytes"] for t in trials}
    assert min(budgets) == 4 * GIB and max(budgets) == 80 * GIB
    for case, members in cases.items():
        arms = [dict(m["arm"], batch=None, note=None) for m in members]
        assert all(a == arms[0] for a in arms), case  # one configuration per case, batches vary
        assert len({(m["budget_bytes"], m["alloc_conf"]) for m in members}) == 1, case
        batches = sorted(m["arm"]["batch"] for m in members)
        assert len(batches) >= 2 and len(set(batches)) == len(batches), case
        assert any(b + 1 in batches for b in batches), case  # neighbours: a boundary can be seen

    def find(model, mode, gc, seq, budget, conf, targets=None):
        return sorted(t["arm"]["batch"] for t in trials if t["arm"]["model"] == model and t["arm"]["mode"] == mode
                      and t["arm"]["gradient_checkpointing"] == gc and t["arm"]["seq"] == seq
                      and t["budget_bytes"] == budget * GIB and t["alloc_conf"] == conf
                      and (targets is None or t["arm"]["lora_target_modules"] == targets))

    qkvo = ["q_proj", "k_proj", "v_proj", "o_proj"]
    for conf in (None, EXP):  # the four cases issue 13 reports
        assert {8, 9, 10} <= set(find("SmolLM2-135M", "lora", True, 4096, 24, conf, qkvo))
        assert {4, 5} <= set(find("Llama-3.2-1B", "full", True, 2048, 24, conf))
        assert {7, 8} <= set(find("SmolLM2-135M", "full", False, 1024, 12, conf))
        assert {9, 10, 11} <= set(find("Llama-3.2-1B", "full", True, 2048, 40, conf))
    reported = {(t["case"], t["arm"]["batch"]): t["reported"] for t in trials if t["reported"]}
    smol = [t for t in trials if t["arm"]["model"] == "SmolLM2-135M" and t["arm"]["seq"] == 4096
            and t["arm"]["mode"] == "lora" and t["arm"]["lora_rank"] == 8]
    got = {(t["alloc_conf"], t["arm"]["batch"]): t["reported"] for t in smol}
    assert got[(None, 8)] == "ok" and got[(None, 9)] == "oom" and got[(EXP, 9)] == "ok" and got[(EXP, 10)] == "oom"
    assert len(reported) == 7
    # Scheduling: within the GPU share and the rough duration model, under ~6 minutes at -j 8.
    plan = H.trials_plan(trials, 8, H.DEFAULT_GPU_SHARE_BYTES)
    assert plan["estimated_makespan_s"] < 300, plan
    assert max(budgets) <= H.DEFAULT_GPU_SHARE_BYTES


# ---- the scheduler -------------------------------------------------------------------------------

def test_pick_next():
    cap = 120e9
    assert H.pick_next([], [], 8, cap) is None
    assert H.pick_next([86e9, 26e9], [], 8, cap) == 0
    assert H.pick_next([86e9, 26e9], [86e9], 8, cap) == 1  # 112 GB
    assert H.pick_next([86e9, 26e9], [86e9, 26e9], 8, cap) is None  # 138 GB
    assert H.pick_next([4e9], [4e9] * 8, 8, cap) is None  # eight running
    assert H.pick_next([130e9], [], 8, cap) == 0  # over the cap alone: runs alone
    assert H.pick_next([130e9], [1e9], 8, cap) is None
    assert H.pick_next([120e9], [], 8, cap) == 0 and H.pick_next([60e9], [60e9], 8, cap) == 0


def check_schedule(budgets, durations, jobs, cap):
    makespan, starts = H.simulate_schedule(budgets, durations, jobs, cap)
    assert all(s is not None for s in starts)
    ends = [s + d for s, d in zip(starts, durations)]
    assert abs(makespan - max(ends)) < 1e-9
    for i, s in enumerate(starts):  # at every start: the running set is within the limits
        live = [j for j in range(len(budgets)) if starts[j] <= s < ends[j]]
        assert len(live) <= jobs
        assert sum(budgets[j] for j in live) <= cap or len(live) == 1, (s, live)
    return makespan, starts


def test_simulate_schedule():
    g = float(GIB)
    m, starts = check_schedule([10 * g] * 4, [10.0] * 4, 2, 120e9)
    assert m == 20.0
    m, _ = check_schedule([80 * g, 80 * g, 4 * g, 4 * g], [10.0, 10.0, 5.0, 5.0], 8, 120e9)
    assert m == 20.0  # the two 80 GiB ones cannot overlap; the small ones fit beside the first
    m, starts = check_schedule([130e9, 1e9, 1e9], [10.0, 1.0, 1.0], 8, 120e9)
    assert starts[1] == starts[2] == 0.0 and starts[0] == 1.0 and m == 11.0  # over the cap: once alone
    trials = H.load_trials_file(TRIALS_13)
    est = [H.estimate_trial_seconds(t)[0] for t in trials]
    for jobs in (1, 3, 8):
        check_schedule([t["budget_bytes"] for t in trials], est, jobs, H.DEFAULT_GPU_SHARE_BYTES)
    assert H.schedule_order([1, 5, 5, 3]) == [1, 2, 3, 0]


# ---- the command line ----------------------------------------------------------------------------

def harness(*argv):
    return subprocess.run([sys.executable, os.path.join(HERE, "hf_harness.py")] + list(argv),
                          capture_output=True, text=True, timeout=60)


def test_command_line():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "x.jsonl")
        p = harness("--trials", TRIALS_13, "-j", "8", "--out", out, "--list")
        assert p.returncode == 0, p.stderr
        listed = json.loads(p.stdout)
        assert len(listed["trials"]) == len(H.load_trials_file(TRIALS_13)) and listed["plan"]["jobs"] == 8
        assert not os.path.exists(out)
        for bad in (["--isolate", "2"], ["--max-batch"], ["-j", "0"], ["--gpu-share-bytes", "0"],
                    ["--trial-timeout-s", "-1"], ["--arms", TRIALS_13], ["--repeats", "2"]):
            p = harness("--trials", TRIALS_13, "--out", out, "--list", *bad)
            assert p.returncode == 2, (bad, p.stderr)
        p = harness("--out", out, "--trial-index", "0", "--list")
        assert p.returncode == 2 and "--trial-index needs --trials" in p.stderr
        bad_file = os.path.join(d, "bad.json")
        with open(bad_file, "w") as f:
            json.dump([{"model": "SmolLM2-135M", "budget_bytes": GIB}, {"model": "SmolLM2-135M"}], f)
        p = harness("--trials", bad_file, "--out", out, "--list")
        assert p.returncode == 2 and "trial 1: a trial needs budget_bytes" in p.stderr, p.stderr
        p = harness("--trials", bad_file, "--out", out, "--trial-index", "5")
        assert p.returncode == 2
        p = harness("--help")
        assert p.returncode == 0 and "--trials" in p.stdout and "--gpu-share-bytes" in p.stdout
        p = harness("--out", out, "--plan", "smoke", "--list")  # the other modes are untouched
        assert p.returncode == 0 and len(json.loads(p.stdout)["arms"]) == 3


# ---- the parent, with a stand-in child -----------------------------------------------------------

FAKE_CHILD = r'''
import json, os, sys, time
sys.path.insert(0, HERE)
import hf_harness as H
path, i, out, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t = H.load_trials_file(path)[i]
t0 = time.time()
with open(log, "a") as f:
    f.write(json.dumps({"i": i, "event": "start", "t": t0, "budget": t["budget_bytes"]}) + "\n")
behaviour = t["case"]
row = H.trial_row(t)
row["alloc_conf_env"] = {k: os.environ.get(k) for k in H.ALLOC_CONF_ENV}
if behaviour == "crash":
    sys.stderr.write("Traceback ...\nRuntimeError: CUDA driver initialization failed\n")
    sys.exit(1)
if behaviour == "hang":
    time.sleep(30)
time.sleep(0.3)
row["outcome"] = "oom" if behaviour == "oom" else "ok"
row["wall_seconds"] = round(time.time() - t0, 3)
with open(log, "a") as f:
    f.write(json.dumps({"i": i, "event": "end", "t": time.time()}) + "\n")
with open(out, "w") as f:
    f.write(json.dumps(row) + "\n")
'''


def run_parent(trials_raw, jobs, cap, budget_s=0.0, timeout_s=10.0):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trials.json")
        with open(path, "w") as f:
            json.dump(trials_raw, f)
        child = os.path.join(d, "child.py")
        with open(child, "w") as f:
            f.write("HERE = %r\n" % HERE + FAKE_CHILD)
        log = os.path.join(d, "events.jsonl")
        out = os.path.join(d, "out.jsonl")
        args, _ = H.parse_args(["--trials", path, "--out", out, "-j", str(jobs), "--gpu-share-bytes", str(cap),
                                "--budget-s", str(budget_s), "--trial-timeout-s", str(timeout_s)])
        trials = H.load_trials_file(path)
        saved = dict(os.environ)
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.6"  # must not reach a child
        try:
            rc = H.run_trials(args, trials, child_cmd=lambda i, o: [sys.executable, child, path, str(i), o, log])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        assert rc == 0
        with open(out) as f:
            rows = [json.loads(line) for line in f]
        events = []
        if os.path.exists(log):
            with open(log) as f:
                events = [json.loads(line) for line in f]
        return rows, events


def test_run_trials_with_stand_in_child():
    def trial(case, budget_gib, conf=None, batch=1):
        d = {"model": "SmolLM2-135M", "batch": batch, "seq": 128, "budget_bytes": budget_gib * GIB, "case": case}
        if conf:
            d["alloc_conf"] = conf
        return d

    raw = [trial("ok", 40), trial("oom", 40, EXP), trial("crash", 10), trial("ok", 60), trial("ok", 20, EXP),
           trial("hang", 5), trial("ok", 30), trial("ok", 4)]
    cap = 100 * GIB
    rows, events = run_parent(raw, 3, cap, timeout_s=3.0)
    assert rows[0]["kind"] == "trials" and rows[0]["trials"] == len(raw) and rows[-1]["kind"] == "end"
    trial_rows = {r["trial_index"]: r for r in rows if r["kind"] == "trial"}
    assert sorted(trial_rows) == list(range(len(raw)))
    assert rows[-1]["ok"] == 5 and rows[-1]["oom"] == 1 and rows[-1]["error"] == 2 and rows[-1]["skipped"] == 0
    assert trial_rows[1]["outcome"] == "oom"
    assert trial_rows[2]["outcome"] == "error" and "child exited 1" in trial_rows[2]["error"] \
        and "CUDA driver initialization failed" in trial_rows[2]["error"]
    assert trial_rows[5]["outcome"] == "error" and "timed out after 3s" in trial_rows[5]["error"]
    for i, r in trial_rows.items():
        assert r["lora_targets"] == ["q_proj", "v_proj"] and r["budget_bytes"] == raw[i]["budget_bytes"]
        assert "process_exit" in r and "gpu_share_at_start_bytes" in r
        if r["alloc_conf_env"] is not None:  # written by the stand-in: exactly the trial's setting
            assert r["alloc_conf_env"] == {"PYTORCH_CUDA_ALLOC_CONF": raw[i].get("alloc_conf"),
                                           "PYTORCH_ALLOC_CONF": None}, r["alloc_conf_env"]
    # Never more than 3 at a time, never more than the cap between them (the parent's clock: a trial runs
    # from started_s until the parent saw it end, ended_s); the largest budget (60 GiB) starts first.
    for i, r in trial_rows.items():
        live = [j for j, q in trial_rows.items() if q["started_s"] <= r["started_s"] < q["ended_s"]]
        assert len(live) <= 3, live
        assert sum(raw[j]["budget_bytes"] for j in live) <= cap, live
        assert r["gpu_share_at_start_bytes"] <= cap and r["peers_at_start"] <= 2
    assert min(trial_rows.values(), key=lambda q: q["started_s"])["trial_index"] == 3
    assert {e["i"] for e in events if e["event"] == "start"} == set(range(len(raw)))


def test_run_trials_budget_s():
    raw = [{"model": "SmolLM2-135M", "batch": 1, "seq": 128, "budget_bytes": 10 * GIB, "case": "ok"}
           for _ in range(4)]
    rows, _ = run_parent(raw, 1, 120e9, budget_s=0.2)
    trial_rows = [r for r in rows if r["kind"] == "trial"]
    assert len(trial_rows) == 4 and rows[-1]["ok"] == 1 and rows[-1]["skipped"] == 3
    assert all(r["error"] == "skipped: --budget-s exceeded" for r in trial_rows if r["outcome"] == "skipped")


# ---- the child, with a stand-in torch ------------------------------------------------------------

class FakeOOM(RuntimeError):
    pass


class FakeCuda:
    OutOfMemoryError = FakeOOM

    def __init__(self, expandable):
        self.expandable = expandable
        self.fraction = None
        self.calls = []

    def is_available(self):
        return True

    def set_device(self, d):
        self.calls.append("set_device")

    def get_device_properties(self, d):
        return types.SimpleNamespace(total_memory=150_000_000_000)

    def set_per_process_memory_fraction(self, f, d):
        assert "warmup" not in self.calls  # before anything is allocated
        self.fraction = (f, d)
        self.calls.append("fraction")

    def synchronize(self):
        pass

    def max_memory_allocated(self):
        return 7_000

    def max_memory_reserved(self):
        return 9_000

    def memory_allocated(self):
        return 5_000

    def memory_reserved(self):
        return 8_000

    def memory_stats(self):
        return {"num_alloc_retries": 3, "num_ooms": 1}

    def memory_snapshot(self):
        return [{"is_expandable": self.expandable}, {"is_expandable": self.expandable}]


def run_child(trial_raw, behaviour):
    """trial_child_main with torch, the warm-up, the build and run_steps stood in for."""
    cuda = FakeCuda("expandable_segments:True" in (trial_raw.get("alloc_conf") or ""))
    fake_torch = types.SimpleNamespace(cuda=cuda, OutOfMemoryError=FakeOOM)
    oom_text = oom_message(20 * MIB, 150_000_000_000, 100 * GIB, 20 * GIB, 24 * GIB - 30 * MIB, allowed=24 * GIB)

    def fake_import():
        H.torch = fake_torch

    def fake_warmup():
        cuda.calls.append("warmup")
        return 0, 1_000, 2_000

    def fake_build(arm, max_seq):
        if behaviour == "build-oom":
            raise FakeOOM(oom_text)
        return object(), {"build_seconds": 0.5}

    def fake_run_steps(model, arm, vocab, seed, res, steps=2, lengths=None):
        assert steps == (len(lengths) if lengths else 3) and res["current"] == "input"
        res["realised_seq"] = lengths[0] if lengths else arm["seq"]
        if lengths:
            res["realised_lengths"] = list(lengths)
        res["batch_bytes"] = 16 * arm["batch"] * arm["seq"]
        for k in range(1, steps + 1):
            res["phases"]["step%d" % k] = ph = {}
            for name in ("forward", "backward", "optimizer", "zero_grad"):
                res["current"] = "step%d.%s" % (k, name)
                if behaviour == "oom" and k == 2 and name == "backward":
                    raise FakeOOM(oom_text)
                if behaviour == "error" and k == 1 and name == "optimizer":
                    raise ValueError("something else broke")
                ph[name] = phase(1000 * k + 1, 1000 * k + 5)
            res["loss_step%d" % k] = 10.0 - k
        res["current"] = None

    saved = {n: getattr(H, n) for n in ("_import_stack", "collect_stack", "warmup_context", "build_model",
                                        "param_summary", "run_steps", "torch", "STACK", "CONTEXT_ALLOCATED")}
    H._import_stack = fake_import
    H.collect_stack = lambda: {"gpu_name": "stand-in"}
    H.warmup_context = fake_warmup
    H.build_model = fake_build
    H.param_summary = lambda model: {"trainable_params": 1}
    H.run_steps = fake_run_steps
    try:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "t.jsonl")
            t = H.normalize_trial(trial_raw, 4)
            args = types.SimpleNamespace(out=out)
            assert H.trial_child_main(args, t) == 0
            with open(out) as f:
                rows = [json.loads(line) for line in f]
    finally:
        for n, v in saved.items():
            setattr(H, n, v)
    assert len(rows) == 1 and rows[0]["kind"] == "trial"
    assert cuda.fraction == (t["budget_bytes"] / 150_000_000_000, 0)
    assert cuda.calls.index("fraction") < cuda.calls.index("warmup")
    return rows[0]


def test_trial_child():
    base = {"model": "Llama-3.2-1B", "mode": "full", "gradient_checkpointing": True, "batch": 9, "seq": 2048,
            "budget_bytes": 40 * GIB, "reported": "oom"}
    r = run_child(base, "ok")
    assert r["outcome"] == "ok" and r["error"] is None and r["steps_completed"] == 3
    assert [s["allocated_peak"] for s in r["steps"]] == [1001, 2001, 3001] and r["allocated_peak"] == 3001
    assert r["reserved_peak"] == 3005 and r["losses"] == [9.0, 8.0, 7.0] and r["realised_seq"] == 2048
    assert r["num_alloc_retries"] == 3 and r["num_ooms"] == 1 and r["context_allocated"] == 1_000
    assert r["allowed_bytes"] == int(40 * GIB / 150_000_000_000 * 150_000_000_000)
    assert r["stack"] == {"gpu_name": "stand-in"} and r["build"] == {"build_seconds": 0.5}
    assert r["segments"] == 2 and r["expandable_segments_seen"] is False and r["warning"] is None
    assert r["reported"] == "oom" and r["lora_targets"] is None and r["batch"] == 9
    assert r["batch_bytes"] == 16 * 9 * 2048 and r["grad_bytes"] is None and "optimizer" in r

    r = run_child(dict(base, alloc_conf=EXP), "oom")
    assert r["outcome"] == "oom" and r["oom_phase"] == "backward" and r["oom_step"] == 2
    assert r["failed_phase"] == "step2.backward" and r["error"].startswith("OOM: FakeOOM: CUDA out of memory.")
    assert r["oom_message"].startswith("CUDA out of memory. Tried to allocate 20.00 MiB.")
    assert r["oom_tried_to_allocate_bytes"] == 20 * MIB and r["oom_allowed_bytes"] == 24 * GIB
    assert r["oom_allocated_by_pytorch_bytes"] == 20 * GIB and r["oom_cause"] == "budget"
    assert close(r["oom_reserved_unallocated_bytes"], 4 * GIB - 30 * MIB, GIB)
    assert r["steps_completed"] == 1 and len(r["steps"]) == 2 and not r["steps"][1]["complete"]
    assert r["steps"][1]["allocated_peak"] == 7_000 and r["peak_at_error"] == 7_000
    assert r["expandable_segments_seen"] is True and r["warning"] is None and r["alloc_conf"] == EXP

    r = run_child(base, "build-oom")
    assert r["outcome"] == "oom" and r["oom_phase"] == "build" and r["oom_step"] is None and r["steps"] == []

    r = run_child(base, "error")
    assert r["outcome"] == "error" and r["error"] == "ValueError: something else broke"
    assert r["oom_phase"] is None and r["failed_phase"] == "step1.optimizer" and r["oom_message"] is None


# ---- the summary ---------------------------------------------------------------------------------

def test_loop_trial():
    """A loop of varied lengths: one step per length, the realised lengths checked, bad lengths refused."""
    base = {"model": "SmolLM2-135M", "mode": "full", "batch": 4, "seq": 2048, "budget_bytes": 40 * GIB,
            "lengths": [512, 2048, 1024, 64]}
    r = run_child(base, "ok")
    assert r["outcome"] == "ok" and r["steps_run"] == 4 and r["steps_completed"] == 4
    assert r["realised_lengths"] == [512, 2048, 1024, 64] and len(r["losses"]) == 4
    for bad in ([], [0], [4096], [True], "512", [1] * (H.MAX_LOOP_STEPS + 1)):
        try:
            H.normalize_trial(dict(base, lengths=bad), 0)
        except H.ArmSpecError as e:
            assert "lengths" in str(e), e
        else:
            raise AssertionError("lengths %r accepted" % (bad,))
    try:
        H.normalize_trial(dict(base, stack="libtorch"), 0)
    except H.ArmSpecError as e:
        assert "hf-peft" in str(e), e
    else:
        raise AssertionError("a libtorch loop accepted")


def test_summary_helpers():
    assert S.agreement("ok", True) == "yes" and S.agreement("oom", False) == "yes"
    assert S.agreement("oom", True) == "NO: fit, OOM" and S.agreement("ok", False) == "NO: no fit, ran"
    assert S.agreement("error", True) == "-" and S.agreement("ok", None) == "-"
    assert S.agreement("oom", True, "device") == "-" and S.agreement("oom", True, "budget") == "NO: fit, OOM"
    assert S.conf_text(None) == "default" and S.conf_text(EXP) == "expandable"
    t = H.normalize_trial({"model": "SmolLM2-135M", "lora_targets": "attention", "gradient_checkpointing": True,
                           "batch": 9, "seq": 4096, "budget_bytes": 24 * GIB}, 0)
    row = H.trial_row(t)
    args = S.vramfit_args(row, "/nonexistent", "predict")
    assert args == ["predict", "--model", "SmolLM2-135M", "--batch", "9", "--seq", "4096", "--mode", "lora",
                    "--lora-rank", "8", "--lora-targets", "q_proj,k_proj,v_proj,o_proj", "--grad-ckpt",
                    "--budget", "25769803776B", "--json"], args
    args = S.vramfit_args(row, "/nonexistent", "max-batch")
    assert "--batch" not in args and args[:3] == ["max-batch", "--model", "SmolLM2-135M"]
    rows = [dict(row, batch=8, outcome="ok"), dict(row, batch=9, outcome="oom"), dict(row, batch=10, outcome="ok"),
            dict(row, batch=11, outcome="error")]
    assert S.case_bounds(rows) == (10, 9)
    assert S.outcome_text(dict(row, outcome="oom", oom_phase="backward", oom_step=2)) == "oom s2.backward"
    assert S.outcome_text(dict(row, outcome="oom", oom_phase="build", oom_step=None)) == "oom build"
    assert S.outcome_text(dict(row, outcome="oom", oom_phase="forward", oom_step=3, oom_cause="device")) == \
        "oom(device) s3.forward"


def test_summary_end_to_end():
    """trials_summary.py on a small file: with the CLI when this checkout has built it, else without."""
    t = H.normalize_trial({"model": "SmolLM2-135M", "lora_targets": "attention", "gradient_checkpointing": True,
                           "batch": 9, "seq": 4096, "budget_bytes": 24 * GIB, "case": "c"}, 0)
    ok = dict(H.trial_row(t), outcome="oom", oom_phase="backward", oom_step=1, allocated_peak=21 * GIB,
              reserved_peak=24 * GIB)
    ran = dict(ok, trial_index=1, batch=8, outcome="ok", oom_phase=None, oom_step=None)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.jsonl")
        with open(path, "w") as f:
            for r in ({"kind": "trials"}, ok, ran, {"kind": "end"}):
                f.write(json.dumps(r) + "\n")
        p = subprocess.run([sys.executable, os.path.join(HERE, "trials_summary.py"), path], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "largest batch that ran: 8, smallest that ran out of memory: 9" in p.stdout, p.stdout
        exe = os.path.join(HERE, "..", "..", "build", "vramfit")
        if os.path.exists(exe):  # vramfit predicts batch 9 fits 24 GiB: a dangerous disagreement if it OOMs
            assert "NO: fit, OOM" in p.stdout and "vramfit max-batch: 9" in p.stdout, p.stdout
        p = subprocess.run([sys.executable, os.path.join(HERE, "trials_summary.py"), path, "--vramfit",
                            os.path.join(d, "none")], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "verdicts left out" in p.stdout


if __name__ == "__main__":
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    for name, fn in tests:
        fn()
        print("ok", name)
    print("%d tests passed" % len(tests))
