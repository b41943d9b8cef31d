#!/usr/bin/env python3
"""The Trainer's measured steps (tests/data/trainer_steps_h100.jsonl: trainer_harness.py with
trainer_arms.json on an H100, a fresh process per arm; trainer_steps_2_h100.jsonl: the held-out
trainer_arms_2.json, measured after the hf-trainer stack was written), replayed on the CPU: what the
records cover, that they are the Trainer as users run it (the default optimizer resolved to fused
AdamW, fp16 bringing the grad scaler), and, with the built CLI (environment variable VRAMFIT), the
hf-trainer stack's prediction of every step (never under, printed by setup) and the hf-peft stack's
(the plain loop: far under with fp32 weights). The fit-check callback's runs are asserted too.
  VRAMFIT=build/vramfit python3 tests/validation/test_trainer_data.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from vramfit_flags import step_flags  # noqa: E402

DATA = os.path.join(HERE, "..", "data", "trainer_steps_h100.jsonl")
HELD_OUT = os.path.join(HERE, "..", "data", "trainer_steps_2_h100.jsonl")
QWEN3 = os.path.join(HERE, "..", "data", "trainer_steps_qwen3_h100.jsonl")  # trainer_arms_qwen3.json, gpu_qwen3.sh
# trainer_arms_3.json (gpu_trainer_3.sh), measured after the Trainer's programs were built in: every
# arm of a built-in kind.
HELD_OUT_3 = os.path.join(HERE, "..", "data", "trainer_steps_3_h100.jsonl")
EXE = os.environ.get("VRAMFIT")
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# The Trainer's optimizer as it resolved it (OptimizerNames.X), and vramfit's --optim word for it.
OPTIM = {"ADAMW_TORCH_FUSED": "adamw-fused", "ADAMW_TORCH": "adamw", "ADAFACTOR": "adafactor", "SGD": "sgd"}


def load(path=DATA):
    with open(path) as f:
        return [json.loads(l) for l in f]


def config_of(shape):
    qwen3 = shape.get("qk_norm", False)
    return {"model_type": "qwen3" if qwen3 else "qwen2" if shape["qkv_bias"] else "llama", "vocab_size": shape["vocab"],
            "hidden_size": shape["hidden"], "intermediate_size": shape["intermediate"],
            "num_hidden_layers": shape["layers"], "num_attention_heads": shape["heads"],
            "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"],
            "tie_word_embeddings": shape["tied_embeddings"]}


def arm_flags(arm):
    targets = arm["lora_targets"]
    return step_flags(dict(arm, lora_targets=None if targets is None else
                           "all-linear" if targets == ALL_LINEAR else ",".join(targets)))


def trainer_flags(row):
    """hf-trainer's flags for a measured step: the arm's settings and the optimizer the Trainer resolved."""
    a = row["arm"]
    return arm_flags(a) + ["--stack", "hf-trainer", "--precision", a["precision"], "--weights", a["weights"],
                           "--grad-accum", str(a["grad_accum"]),
                           "--optim", OPTIM[row["optim_resolved"].split(".")[1]]]


class Predictions:
    """`vramfit predict --json` of a config and flags, each asked once."""

    def __init__(self, test):
        self.test, self.cache = test, {}
        self.dir = tempfile.TemporaryDirectory()
        test.addCleanup(self.dir.cleanup)

    def __call__(self, config, flags):
        key = json.dumps([config, flags])
        if key not in self.cache:
            path = os.path.join(self.dir.name, "config.json")
            with open(path, "w") as f:
                json.dump(config, f)
            p = subprocess.run([EXE, "predict", "--config", path, *flags, "--json"], capture_output=True, text=True)
            self.test.assertEqual(p.returncode, 0, p.stderr)
            self.cache[key] = json.loads(p.stdout)
        return self.cache[key]


def setup(arm):
    """An arm's Trainer settings, as the gap table groups them."""
    return "%s w%s %s ga%d" % (arm["mode"], arm["weights"], arm["precision"], arm["grad_accum"])


class Coverage(unittest.TestCase):
    def test_the_record(self):
        rows = load()
        stack = rows[0]
        self.assertEqual(stack["kind"], "stack")
        self.assertEqual(stack["gpu_name"], "NVIDIA H100 80GB HBM3")
        self.assertEqual((stack["torch"], stack["transformers"], stack["peft"]), ("2.11.0+cu130", "5.17.0", "0.21.0"))
        self.assertEqual(stack["trainer_default_optim"], "OptimizerNames.ADAMW_TORCH_FUSED")
        self.assertEqual(rows[-1], {"kind": "end", "arms": 38})
        steps = [r for r in rows if r["kind"] == "trainer_step"]
        self.assertEqual(len(steps), 114)
        self.assertFalse([r for r in rows if r["kind"] == "error"])
        arms = {json.dumps(r["arm"], sort_keys=True) for r in steps}
        self.assertEqual(len(arms), 38)
        a = [r["arm"] for r in steps]
        self.assertGreaterEqual(len({x["model"] for x in a}), 4)
        self.assertEqual({x["mode"] for x in a}, {"lora", "full"})
        self.assertEqual({x["weights"] for x in a}, {"bf16", "fp32"})
        self.assertEqual({x["precision"] for x in a}, {"bf16", "fp16"})
        self.assertTrue({1, 4} <= {x["grad_accum"] for x in a})
        self.assertEqual({x["gradient_checkpointing"] for x in a}, {True, False})
        self.assertGreaterEqual(len({json.dumps(x["lora_targets"]) for x in a if x["mode"] == "lora"}), 2)
        self.assertEqual({r["optim_resolved"] for r in steps},
                         {"OptimizerNames." + o for o in ("ADAMW_TORCH_FUSED", "ADAMW_TORCH", "ADAFACTOR", "SGD")})

    def test_the_held_out_record(self):
        rows = load(HELD_OUT)
        self.assertEqual(rows[0]["kind"], "stack")
        self.assertEqual(rows[0]["gpu_name"], "NVIDIA H100 80GB HBM3")
        self.assertEqual((rows[0]["torch"], rows[0]["transformers"], rows[0]["peft"]), ("2.11.0+cu130", "5.17.0", "0.21.0"))
        self.assertEqual(rows[-1], {"kind": "end", "arms": 36})
        steps = [r for r in rows if r["kind"] == "trainer_step"]
        self.assertEqual(len(steps), 108)
        self.assertFalse([r for r in rows if r["kind"] == "error"])
        with open(os.path.join(HERE, "trainer_arms_2.json")) as f:
            self.assertEqual(len(json.load(f)), 36)
        a = [r["arm"] for r in steps]
        self.assertEqual(len({x["model"] for x in a}), 4)
        self.assertEqual({x["grad_accum"] for x in a}, {1, 2, 4})
        self.assertEqual({x["lora_dropout"] or 0 for x in a}, {0, 0.05, 0.1})
        self.assertEqual({r["optim_resolved"] for r in steps},
                         {"OptimizerNames." + o for o in ("ADAMW_TORCH_FUSED", "ADAMW_TORCH", "ADAFACTOR", "SGD")})

    def test_the_qwen3_record(self):
        rows = load(QWEN3)
        self.assertEqual(rows[0]["gpu_name"], "NVIDIA H100 80GB HBM3")
        self.assertEqual(rows[-1], {"kind": "end", "arms": 6})
        steps = [r for r in rows if r["kind"] == "trainer_step"]
        self.assertEqual(len(steps), 18)
        self.assertTrue(all(r["arm"]["shape"]["qk_norm"] for r in steps))
        self.assertEqual({r["built"]["model_class"] for r in steps}, {"Qwen3ForCausalLM"})

    def test_as_users_run_it(self):
        for r in (r for r in load() + load(HELD_OUT) + load(QWEN3) if r["kind"] == "trainer_step"):
            with self.subTest(arm=r["arm"]["model"], step=r["step"]):
                if r["optim_default"]:
                    self.assertEqual(r["optim_resolved"], "OptimizerNames.ADAMW_TORCH_FUSED")
                    self.assertEqual((r["optimizer"]["class"], r["optimizer"]["defaults"]["fused"]), ("AdamW", True))
                self.assertEqual(r["scaler"], "GradScaler" if r["arm"]["precision"] == "fp16" else "NoneType")
                self.assertEqual([p["phase"] for p in r["phases"]], ["forward_backward", "optimizer", "zero_grad"])
                self.assertEqual(r["peak"], max(p["peak"] for p in r["phases"]))
                self.assertGreaterEqual(r["reserved_peak"], r["peak"])
                self.assertEqual(r["micro_steps"], 3 * (r["arm"]["grad_accum"] - 1))


class HfPeftGap(unittest.TestCase):
    """hf-peft (the plain loop) against the Trainer's steady steps (2 and 3)."""

    def test_gap(self):
        if not EXE:
            self.skipTest("VRAMFIT (the built CLI) not set")
        ratios = {}
        predict = Predictions(self)
        for r in (r for r in load() if r["kind"] == "trainer_step" and r["step"] >= 2):
            a = r["arm"]
            peak = predict(config_of(a["shape"]), arm_flags(a))["peak_bytes"]
            ratios.setdefault(setup(a) + (" " + a["optim"] if a["optim"] else ""), []).append(peak / r["peak"])
        print("\nhf-peft's peak / the Trainer's steady peak, by setup (steps 2 and 3):")
        for k in sorted(ratios):
            print("  %-40s %3d steps  %.3f to %.3f" % (k, len(ratios[k]), min(ratios[k]), max(ratios[k])))
        # The gap the hf-trainer stack must close: fp32 weights under autocast read far under (fp32
        # grads, fp32 moments and autocast's bf16 weight copies are not in the plain loop).
        for k, v in ratios.items():
            if " wfp32 " in k:
                self.assertLess(max(v), 0.9, k)


class HfTrainer(unittest.TestCase):
    """The hf-trainer stack against every measured Trainer step: the first step against its first-step
    figure (--phase first), the later ones against the steady figure. Where a built-in program of
    the Trainer's step covers the kind (tests/data/programs/hf-trainer.programs: accumulation 1,
    fused AdamW, the kinds the conversion verifies), the allocator simulation, in [1.00, 1.03];
    elsewhere the closed form, an upper bound, never under, as loose as the table prints."""

    # The measured kinds the built-in programs cover: (model, mode, weights, checkpointing). Every
    # measured kind but two: TinyLlama-1.1B full fp32 checkpointed and Qwen2.5-0.5B full fp32 read
    # under (by up to 1.3 MB), and their kinds are left out of the file (tests/CMakeLists.txt).
    SIMULATED = {("Llama-3.2-1B", "full", "bf16", False), ("TinyLlama-1.1B", "full", "bf16", False),
                 ("Qwen2.5-0.5B", "full", "bf16", False), ("SmolLM2-135M", "full", "bf16", False),
                 ("Llama-3.2-1B", "full", "fp32", False), ("TinyLlama-1.1B", "full", "fp32", False),
                 ("SmolLM2-135M", "full", "fp32", False), ("Llama-3.2-1B", "full", "fp32", True),
                 ("SmolLM2-135M", "full", "fp32", True), ("Qwen2.5-0.5B", "full", "fp32", True),
                 ("TinyLlama-1.1B", "lora", "bf16", False), ("Llama-3.2-1B", "lora", "bf16", False),
                 ("SmolLM2-135M", "lora", "bf16", False), ("Qwen2.5-0.5B", "lora", "bf16", False)}

    def test_never_under(self):
        if not EXE:
            self.skipTest("VRAMFIT (the built CLI) not set")
        predict = Predictions(self)
        simulated = set()
        for name, path, widest in (("trainer_arms.json", DATA, 1.26), ("trainer_arms_2.json (held out)", HELD_OUT, 1.56),
                                   ("trainer_arms_qwen3.json", QWEN3, 1.25),
                                   ("trainer_arms_3.json (held out, built-in kinds)", HELD_OUT_3, None)):
            ratios = {}
            for r in (r for r in load(path) if r["kind"] == "trainer_step"):
                a = r["arm"]
                flags = trainer_flags(r) + ["--phase", "first" if r["step"] == 1 else "steady"]
                e = predict(config_of(a["shape"]), flags)
                self.assertEqual(e["stack"], "hf-trainer")
                step = e["step"]
                self.assertEqual((step["weights"], step["precision"], step["grad_accum"]),
                                 (a["weights"], a["precision"], a["grad_accum"]))
                ratio = e["peak_bytes"] / r["peak"]
                with self.subTest(arm=a["model"], setup=setup(a), step=r["step"]):
                    self.assertGreaterEqual(ratio, 1.0, flags)
                    if e["method"] == "allocator simulation":
                        self.assertLessEqual(ratio, 1.03, flags)
                        if path != HELD_OUT_3:
                            simulated.add((a["model"], a["mode"], a["weights"], a["gradient_checkpointing"]))
                    else:
                        self.assertEqual(e["method"], "closed form")
                        self.assertNotEqual(path, HELD_OUT_3, "an arm of a built-in kind")
                key = "%s%s%s %s%s" % (setup(a), " ckpt" if a["gradient_checkpointing"] else "",
                                       " dropout" if a["lora_dropout"] else "", flags[flags.index("--optim") + 1],
                                       " (simulated)" if e["method"] == "allocator simulation" else "")
                ratios.setdefault(key, []).append(ratio)
            every = [x for k, v in ratios.items() if "(simulated)" not in k for x in v]
            print("\nhf-trainer's peak / the Trainer's peak, %s, by setup (all steps):" % name)
            for k in sorted(ratios):
                print("  %-56s %3d steps  %.4f to %.4f" % (k, len(ratios[k]), min(ratios[k]), max(ratios[k])))
            if widest is None:
                self.assertEqual(sum(len(v) for v in ratios.values()), 60)  # 20 arms, all simulated
                continue
            print("  closed form: %d steps, %.3f to %.3f" % (len(every), min(every), max(every)))
            self.assertLessEqual(max(every), widest)  # as loose as the README says, not looser
        self.assertEqual(simulated, self.SIMULATED)


class FitCheckCallback(unittest.TestCase):
    """tests/data/trainer_fit_check_h100.jsonl: trainer_harness.py --arms trainer_fit_check.json on an
    H100 (gpu_record_kinds.sh), each arm a real Trainer in a fresh process under
    set_per_process_memory_fraction(12 GiB / total), with examples/python/vramfit_trainer.py's
    fit_check_callback (the CLI built on that machine) where fit_check is set."""
    PATH = os.path.join(HERE, "..", "data", "trainer_fit_check_h100.jsonl")

    def test_the_callback_stops_a_run_that_would_run_out_before_its_first_step(self):
        with open(self.PATH) as f:
            rows = [json.loads(l) for l in f]
        self.assertEqual(rows[0]["kind"], "stack")
        self.assertEqual(rows[0]["trainer_default_optim"], "OptimizerNames.ADAMW_TORCH_FUSED")
        runs = {}
        for r in rows[1:]:
            if r["kind"] in ("error", "trainer_step"):
                runs.setdefault((r["arm"]["batch"], r["arm"]["fit_check"]), []).append(r)
        self.assertEqual(sorted(runs), [(1, True), (2, False), (4, False), (4, True)])
        for (batch, _), rs in runs.items():
            self.assertEqual({r["budget_bytes"] for r in rs}, {12 << 30})
            self.assertEqual({r["arm"]["seq"] for r in rs}, {2048})
        # Batch 4 with the callback: refused before the first step, naming the largest batch that fits.
        stopped = runs[(4, True)]
        self.assertEqual(len(stopped), 1)
        self.assertEqual(stopped[0]["error_type"], "DoesNotFit")
        self.assertEqual(stopped[0]["steps_done"], 0)
        self.assertEqual(stopped[0]["micro_steps"], 0)
        self.assertIn("the largest batch that fits is 1", stopped[0]["error"])
        # Without it, batch 4 and batch 2 run out of memory in their first step: the refusal was right.
        for batch in (4, 2):
            self.assertEqual([(r["kind"], r["oom"], r["error_type"]) for r in runs[(batch, False)]],
                             [("error", True, "OutOfMemoryError")])
        # Batch 1, the answer, passes the callback and runs its three steps under the budget.
        ran = runs[(1, True)]
        self.assertEqual([r["step"] for r in ran], [1, 2, 3])
        self.assertTrue(all(r["kind"] == "trainer_step" and not r["oom"] and r["reserved_peak"] < 12 << 30 for r in ran))


class FitCheckCallbackMixedPrecision(unittest.TestCase):
    """tests/data/trainer_fit_check_2_h100.jsonl: trainer_harness.py --arms trainer_fit_check_2.json on an
    H100 (gpu_trainer_2.sh, the CLI built there): Qwen2.5-0.5B full fine-tuning, fp32 weights under
    bf16 autocast, checkpointing, seq 1024, under a 12 GiB memory fraction, the callback predicting with
    hf-trainer. The plain loop's stack read this setup at 0.59 to 0.69 of its peak."""
    PATH = os.path.join(HERE, "..", "data", "trainer_fit_check_2_h100.jsonl")

    def test_the_callback_refuses_what_runs_out_and_passes_what_it_says_fits(self):
        with open(self.PATH) as f:
            rows = [json.loads(l) for l in f]
        self.assertEqual(rows[0]["kind"], "stack")
        self.assertEqual(rows[-1], {"kind": "end", "arms": 5})
        runs = {}
        for r in rows[1:-1]:
            self.assertEqual((r["arm"]["weights"], r["arm"]["precision"], r["arm"]["seq"]), ("fp32", "bf16", 1024))
            runs.setdefault((r["arm"]["batch"], r["arm"]["fit_check"]), []).append(r)
        self.assertEqual(sorted(runs), [(1, True), (2, False), (3, False), (4, False), (4, True)])
        stopped = runs[(4, True)]
        self.assertEqual([(r["kind"], r["error_type"], r["steps_done"], r["micro_steps"]) for r in stopped],
                         [("error", "DoesNotFit", 0, 0)])
        self.assertIn("the largest batch that fits is 1", stopped[0]["error"])
        self.assertIn("hf-trainer", stopped[0]["error"])
        # Without the callback batches 4 and 3 ran out of memory (in step 1 and step 2); batch 2 ran:
        # the answer, 1, is on the safe side by one batch; batch 1 passed the callback and ran.
        for batch in (4, 3):
            self.assertEqual(runs[(batch, False)][-1]["error_type"], "OutOfMemoryError")
        for key in ((2, False), (1, True)):
            self.assertEqual([(r["kind"], r["step"], r["oom"]) for r in runs[key]],
                             [("trainer_step", k, False) for k in (1, 2, 3)])
            self.assertTrue(all(r["reserved_peak"] < 12 << 30 for r in runs[key]))
        if not EXE:
            return
        # The CLI agrees with the record: no batch that ran out of memory is said to fit.
        flags = ["--model", "Qwen2.5-0.5B", "--mode", "full", "--seq", "1024", "--grad-ckpt", "--stack", "hf-trainer",
                 "--weights", "fp32", "--budget", "12GiB", "--json"]
        p = subprocess.run([EXE, "max-batch", *flags], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["max_batch"], 1)


if __name__ == "__main__":
    unittest.main()
