#!/usr/bin/env python3
"""Tests of examples/python/vramfit_trainer.py against the built CLI, standard library only (no
transformers, no torch). The executable: argv[1], else the environment variable VRAMFIT.
  VRAMFIT=build/vramfit python3 tests/python/test_vramfit_trainer.py
"""
import importlib.util
import json
import os
import stat
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
import vramfit_trainer as vt  # noqa: E402

EXE = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else os.environ.get("VRAMFIT")

# SmolLM2-135M's shape, written as a config.json: not a preset path.
CONFIG = {"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
          "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
          "tie_word_embeddings": True, "torch_dtype": "bfloat16", "hidden_act": "silu"}


def cli(*argv):
    """The CLI run by hand: (exit status, parsed stdout)."""
    r = subprocess.run([EXE, *argv, "--json"], capture_output=True, text=True)
    return r.returncode, json.loads(r.stdout)


def fake_model(dtype="torch.bfloat16", peft=None):
    config = types.SimpleNamespace(to_dict=lambda: dict(CONFIG), _attn_implementation="sdpa")
    model = types.SimpleNamespace(config=config, dtype=dtype)
    if peft is not None:
        model.peft_config = {"default": peft}
    return model


def fake_args(**kw):
    args = dict(per_device_train_batch_size=4, gradient_checkpointing=False, gradient_checkpointing_kwargs=None,
                gradient_accumulation_steps=1, optim="adamw_torch_fused", bf16=True, fp16=False)
    args.update(kw)
    return types.SimpleNamespace(**args)


LORA = types.SimpleNamespace(r=16, target_modules={"v_proj", "q_proj"}, peft_type="LORA", use_dora=False,
                             modules_to_save=None, layers_to_transform=None, rank_pattern={})


@unittest.skipIf(not EXE, "give the vramfit executable as argv[1] or VRAMFIT")
class Cli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.config = os.path.join(cls.dir.name, "config.json")
        with open(cls.config, "w") as f:
            json.dump(CONFIG, f)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_predict_is_the_cli_by_hand(self):
        e = vt.predict(config=self.config, batch=2, seq=1024, budget="4GiB", vramfit=EXE)
        rc, by_hand = cli("predict", "--config", self.config, "--batch", "2", "--seq", "1024", "--budget", "4GiB")
        self.assertEqual(rc, 0)
        self.assertIs(e["fits"], True)
        for key in ("fits", "required_bytes", "peak_bytes", "method", "budget_bytes"):
            self.assertEqual(e[key], by_hand[key], key)
        self.assertEqual(e["budget_bytes"], 4 << 30)
        self.assertEqual((e["model"]["layers"], e["model"]["kv_heads"], e["step"]["batch"]), (30, 3, 2))
        # a config object (anything with to_dict) goes through a temporary config.json: same answer
        obj = types.SimpleNamespace(to_dict=lambda: dict(CONFIG))
        self.assertEqual(vt.predict(config=obj, batch=2, seq=1024, vramfit=EXE)["required_bytes"], e["required_bytes"])
        # an int budget is bytes; a step that does not fit is an answer here, not an exception
        small = vt.predict(config=self.config, batch=2, seq=1024, budget=1 << 30, vramfit=EXE)
        self.assertEqual((small["fits"], small["budget_bytes"]), (False, 1 << 30))

    def test_max_batch_is_the_cli_by_hand(self):
        m = vt.max_batch(config=self.config, seq=1024, budget="4GiB", vramfit=EXE)
        rc, by_hand = cli("max-batch", "--config", self.config, "--seq", "1024", "--budget", "4GiB")
        self.assertEqual((rc, m["max_batch"]), (0, by_hand["max_batch"]))
        self.assertGreaterEqual(m["max_batch"], 1)

    def test_does_not_fit_names_the_largest_batch(self):
        best = vt.max_batch(config=self.config, seq=1024, budget="4GiB", vramfit=EXE)["max_batch"]
        with self.assertRaises(vt.DoesNotFit) as cm:
            vt.check_fit(config=self.config, batch=best + 2, seq=1024, budget="4GiB", vramfit=EXE)
        err = cm.exception
        self.assertEqual(err.max_batch, best)
        self.assertIsInstance(err, RuntimeError)
        text = str(err)
        self.assertIn("batch %d x seq 1024 does not fit" % (best + 2), text)
        self.assertIn("the largest batch that fits is %d" % best, text)
        self.assertIn("%.2f GB" % (err.required_bytes / 1e9), text)
        self.assertIn("the budget is %.2f GB" % ((4 << 30) / 1e9), text)
        self.assertGreater(err.required_bytes, err.budget_bytes)
        self.assertIn("basis: allocator simulation; hf-peft as recorded on", text)
        # and one that fits returns its estimate
        self.assertIs(vt.check_fit(config=self.config, batch=best, seq=1024, budget="4GiB", vramfit=EXE)["fits"], True)

    def test_not_even_batch_one(self):
        with self.assertRaises(vt.DoesNotFit) as cm:
            vt.check_fit(config=self.config, batch=1, seq=1024, gpu=None, budget="100MiB", vramfit=EXE)
        self.assertEqual(cm.exception.max_batch, 0)
        self.assertIn("not even batch 1 fits", str(cm.exception))
        with self.assertRaises(ValueError):  # a fit check needs a budget
            vt.check_fit(config=self.config, batch=1, vramfit=EXE)

    def test_bad_input_names_the_field(self):
        cases = [({"batch": 0}, "--batch", "at least 1"),
                 ({"lora_targets": "lm_head,q_proj"}, "--lora-targets", "lm_head"),
                 ({"budget": "4"}, "--budget", "unit"),
                 ({"gpu": "H200", "budget": "4GiB"}, "--gpu", "not both")]
        for flags, field, words in cases:
            with self.subTest(flags=flags):
                args = dict(config=self.config, seq=1024, vramfit=EXE)
                args.update(flags)
                with self.assertRaises(vt.BadInput) as cm:
                    vt.predict(**args)
                self.assertEqual(cm.exception.field, field)
                self.assertIn(words, cm.exception.message)
                self.assertIn(field, str(cm.exception))
        with self.assertRaises(vt.BadInput) as cm:  # a config the CLI refuses names its key
            vt.predict(config=dict(CONFIG, quantization_config={"load_in_4bit": True}), vramfit=EXE)
        self.assertTrue(cm.exception.field.endswith("quantization_config"), cm.exception.field)
        with self.assertRaises(vt.BadInput) as cm:  # max-batch refuses --batch
            vt.max_batch(config=self.config, batch=2, budget="4GiB", vramfit=EXE)
        self.assertEqual(cm.exception.field, "--batch")

    def test_executable_missing_or_odd(self):
        with self.assertRaises(vt.VramfitError) as cm:
            vt.predict(config=self.config, vramfit="/nonexistent/vramfit")
        self.assertIn("/nonexistent/vramfit", str(cm.exception))
        self.assertIn("VRAMFIT", str(cm.exception))
        with mock.patch.dict(os.environ, {"VRAMFIT": "/nonexistent/from-env"}):
            with self.assertRaises(vt.VramfitError) as cm:
                vt.predict(config=self.config)
            self.assertIn("/nonexistent/from-env", str(cm.exception))
        with mock.patch.dict(os.environ, {"VRAMFIT": EXE}):  # the environment variable is used
            self.assertIn("required_bytes", vt.predict(config=self.config, seq=512))
        for body, words in (("echo not json", "not json"), ("echo '{\"x\": 1}'", "exit status 0"),
                            ("echo broken >&2; exit 1", "broken")):
            with self.subTest(body=body), tempfile.TemporaryDirectory() as d:
                fake = os.path.join(d, "vramfit")
                with open(fake, "w") as f:
                    f.write("#!/bin/sh\n%s\n" % body)
                os.chmod(fake, stat.S_IRWXU)
                with self.assertRaises(vt.VramfitError) as cm:
                    vt.predict(config=self.config, vramfit=fake)
                self.assertIn(words, str(cm.exception))

    def test_trainer_flags_run_through_the_cli(self):
        flags, caveats = vt.flags_from_trainer(fake_model(peft=LORA), fake_args(gradient_checkpointing=True), 1024)
        e = vt.predict(vramfit=EXE, **flags)
        step = e["step"]
        self.assertEqual(e["stack"], "hf-trainer")
        self.assertEqual((step["mode"], step["lora_rank"], step["lora_targets"]), ("lora", 16, ["q_proj", "v_proj"]))
        self.assertEqual((step["batch"], step["seq"], step["gradient_checkpointing"]), (4, 1024, True))
        self.assertEqual((step["optim"], step["precision"], step["weights"]), ("adamw-fused", "bf16", "bf16"))
        lora = types.SimpleNamespace(**dict(vars(LORA), lora_dropout=1e-05))  # str() writes 1e-05
        flags, _ = vt.flags_from_trainer(fake_model(peft=lora), fake_args(optim="sgd"), 1024)
        step = vt.predict(vramfit=EXE, **flags)["step"]
        self.assertEqual((step["lora_dropout"], step["optim"]), (1e-05, "sgd"))
        # fp32 weights without autocast: no mixed precision, and SDPA's flash kernel takes no fp32.
        flags, _ = vt.flags_from_trainer(fake_model("torch.float32"), fake_args(bf16=False), 512)
        step = vt.predict(vramfit=EXE, **flags)["step"]
        self.assertEqual((step["mode"], step["precision"], step["weights"], step["attention"]),
                         ("full", "fp32", "fp32", "mem-efficient"))
        # fp32 weights under bf16 autocast with accumulation: the Trainer's mixed precision, above the
        # plain loop's bf16 figure (fp32 grads and moments, autocast's bf16 weight copies, held grads).
        flags, caveats = vt.flags_from_trainer(fake_model("torch.float32"),
                                               fake_args(gradient_accumulation_steps=4, optim="adamw_torch"), 512)
        e = vt.predict(vramfit=EXE, **flags)
        step = e["step"]
        self.assertEqual((step["precision"], step["weights"], step["grad_accum"], step["optim"], caveats),
                         ("bf16", "fp32", 4, "adamw", []))
        plain = vt.predict(vramfit=EXE, config=dict(CONFIG), batch=4, seq=512, mode="full")
        self.assertEqual(plain["stack"], "hf-peft")
        self.assertGreater(e["peak_bytes"], 1.5 * plain["peak_bytes"])


@mock.patch.dict(os.environ, {"PYTORCH_CUDA_ALLOC_CONF": "", "PYTORCH_ALLOC_CONF": ""})
class TrainerFlags(unittest.TestCase):
    def test_lora_with_accumulation_and_fused_adamw(self):
        args = fake_args(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False},
                         gradient_accumulation_steps=4, optim="adamw_torch_fused")
        model = fake_model(peft=LORA)
        flags, caveats = vt.flags_from_trainer(model, args, 2048)
        self.assertEqual(flags, {"config": model.config, "batch": 4, "seq": 2048, "stack": "hf-trainer",
                                 "lora_rank": 16, "lora_targets": ["q_proj", "v_proj"], "grad_ckpt": True,
                                 "weights": "bf16", "precision": "bf16", "grad_accum": 4, "optim": "adamw-fused"})
        self.assertEqual(caveats, [])
        self.assertEqual(vt._argv({k: v for k, v in flags.items() if k != "config"}),
                         ["--batch", "4", "--seq", "2048", "--stack", "hf-trainer", "--lora-rank", "16",
                          "--lora-targets", "q_proj,v_proj", "--grad-ckpt", "--weights", "bf16", "--precision", "bf16",
                          "--grad-accum", "4",
                          "--optim", "adamw-fused"])
        # Each optimizer the Trainer names and vramfit models; another one is a caveat (fused AdamW predicted).
        for name, word in vt.TRAINER_OPTIMS.items():
            self.assertEqual(vt.flags_from_trainer(model, fake_args(optim=name), 2048)[0]["optim"], word)
        flags, caveats = vt.flags_from_trainer(model, fake_args(optim="adamw_bnb_8bit"), 2048)
        self.assertNotIn("optim", flags)
        self.assertEqual(len(caveats), 1, caveats)
        self.assertIn("optim=adamw_bnb_8bit is not modelled", caveats[0])

    def test_lora_dropout_and_sgd_are_flags(self):
        lora = types.SimpleNamespace(**dict(vars(LORA), lora_dropout=0.05))
        flags, caveats = vt.flags_from_trainer(fake_model(peft=lora), fake_args(optim="sgd"), 1024)
        self.assertEqual((flags["lora_dropout"], flags["optim"], caveats), (0.05, "sgd", []))
        flags, _ = vt.flags_from_trainer(fake_model(peft=types.SimpleNamespace(**dict(vars(LORA), lora_dropout=0.0))),
                                         fake_args(), 1024)
        self.assertNotIn("lora_dropout", flags)  # 0: PEFT's identity

    def test_plain_adamw_full_fine_tuning_has_no_caveats(self):
        optim = types.SimpleNamespace(value="adamw_torch")  # OptimizerNames is a str enum
        flags, caveats = vt.flags_from_trainer(fake_model(), fake_args(optim=optim), 1024)
        self.assertEqual(caveats, [])
        self.assertEqual((flags["mode"], flags["precision"], flags["batch"]), ("full", "bf16", 4))
        self.assertNotIn("grad_ckpt", flags)
        self.assertNotIn("lora_rank", flags)

    def test_fp32_weights_under_autocast(self):
        flags, caveats = vt.flags_from_trainer(fake_model("torch.float32"), fake_args(bf16=True), 1024)
        self.assertEqual((flags["precision"], flags["weights"], caveats), ("bf16", "fp32", []))
        flags, caveats = vt.flags_from_trainer(fake_model("torch.float32"), fake_args(bf16=False, fp16=True), 1024)
        self.assertEqual((flags["precision"], flags["weights"], caveats), ("fp16", "fp32", []))
        # bf16 weights under fp16 autocast: autocast casts every weight at each call; not modelled.
        with self.assertRaisesRegex(ValueError, "bfloat16 weights under fp16 autocast are not modelled"):
            vt.flags_from_trainer(fake_model(), fake_args(bf16=False, fp16=True), 1024)
        # fp16 weights without autocast: no grad scaler; hf-trainer's bf16 has the same sizes.
        flags, caveats = vt.flags_from_trainer(fake_model("torch.float16"), fake_args(bf16=False), 1024)
        self.assertEqual((flags["precision"], flags["weights"], len(caveats)), ("bf16", "bf16", 1), caveats)
        # bf16 weights without autocast: hf-trainer counts LoRA's input copies as under autocast; said.
        flags, caveats = vt.flags_from_trainer(fake_model(), fake_args(bf16=False), 1024)
        self.assertEqual((flags["precision"], flags["weights"], len(caveats)), ("bf16", "bf16", 1), caveats)
        self.assertIn("without autocast", caveats[0])

    def test_all_linear_kept_and_reentrant_checkpointing_flagged(self):
        lora = types.SimpleNamespace(r=8, target_modules="all-linear", use_dora=True)
        flags, caveats = vt.flags_from_trainer(fake_model(peft=lora), fake_args(gradient_checkpointing=True), 1024)
        self.assertEqual((flags["lora_rank"], flags["lora_targets"], flags["grad_ckpt"]), (8, "all-linear", True))
        self.assertEqual(vt._argv({"lora_targets": flags["lora_targets"]}), ["--lora-targets", "all-linear"])
        self.assertEqual(vt._argv({"lora_targets": {"v_proj", "q_proj", "k_proj"}, "budget": 1 << 30, "grad_ckpt": False}),
                         ["--lora-targets", "k_proj,q_proj,v_proj", "--budget", "1073741824B"])
        self.assertEqual(len(caveats), 2, caveats)
        self.assertIn("use_dora", caveats[0])
        self.assertIn("use_reentrant", caveats[1])
        none = types.SimpleNamespace(r=8, target_modules=None)  # PEFT's default: left to vramfit's, the same
        self.assertNotIn("lora_targets", vt.flags_from_trainer(fake_model(peft=none), fake_args(), 1024)[0])
        with self.assertRaises(ValueError):
            vt.flags_from_trainer(fake_model(peft=types.SimpleNamespace(r=8, peft_type="IA3")), fake_args(), 1024)

    def test_attention_implementation(self):
        model = fake_model()
        model.config._attn_implementation = "eager"  # builds the (seq x seq) scores: vramfit's math kernel
        flags, caveats = vt.flags_from_trainer(model, fake_args(), 1024)
        self.assertEqual((flags["attention"], caveats), ("math", []))
        model.config._attn_implementation = "flex_attention"
        flags, caveats = vt.flags_from_trainer(model, fake_args(), 1024)
        self.assertNotIn("attention", flags)
        self.assertEqual(len(caveats), 1, caveats)
        self.assertIn("flex_attention", caveats[0])

    def test_alloc_conf_and_several_ranks(self):
        with mock.patch.dict(os.environ, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}):
            flags, _ = vt.flags_from_trainer(fake_model(), fake_args(), 1024)
        self.assertEqual(flags["alloc_conf"], "expandable_segments:True")
        # The Trainer's step is modelled on one GPU: several ranks, FSDP or DeepSpeed get no answer
        # rather than the plain loop's per-rank figure, which reads it far under.
        for args in (fake_args(world_size=2), fake_args(n_gpu=2), fake_args(fsdp="full_shard"),
                     fake_args(deepspeed="ds.json")):
            with self.assertRaisesRegex(ValueError, "on one GPU"):
                vt.flags_from_trainer(fake_model(), args, 1024)

    def test_the_models_dtype_not_its_configs(self):
        model = fake_model("torch.bfloat16")
        model.config.dtype = "float32"  # a model cast to bf16 after loading an fp32 checkpoint
        flags, _ = vt.flags_from_trainer(model, fake_args(), 1024)
        self.assertEqual((flags["weights"], flags["precision"]), ("bf16", "bf16"))


class Callback(unittest.TestCase):
    def test_needs_transformers(self):
        with mock.patch.dict(sys.modules, {"transformers": None}):  # import transformers -> ImportError
            with self.assertRaises(ImportError) as cm:
                vt.fit_check_callback(seq=1024, budget="4GiB")
        self.assertIn("needs transformers", str(cm.exception))
        with self.assertRaises(ValueError):
            vt.fit_check_callback(seq=1024)

    @unittest.skipIf(importlib.util.find_spec("transformers") is not None, "transformers is installed")
    def test_without_transformers_installed(self):
        self.assertNotIn("transformers", sys.modules)  # importing the helper did not need it
        with self.assertRaises(ImportError) as cm:
            vt.fit_check_callback(seq=1024, gpu="T4")
        self.assertIn("pip install transformers", str(cm.exception))

    @unittest.skipIf(not EXE, "give the vramfit executable as argv[1] or VRAMFIT")
    @mock.patch.dict(os.environ, {"PYTORCH_CUDA_ALLOC_CONF": "", "PYTORCH_ALLOC_CONF": ""})
    def test_on_train_begin_with_a_stand_in_transformers(self):
        fake = types.ModuleType("transformers")
        fake.TrainerCallback = type("TrainerCallback", (), {})
        with mock.patch.dict(sys.modules, {"transformers": fake}):
            cb = vt.fit_check_callback(seq=1024, budget="4GiB", vramfit=EXE, alloc_conf="expandable_segments:True")
        self.assertIsInstance(cb, fake.TrainerCallback)
        model = fake_model(peft=types.SimpleNamespace(r=8, target_modules=["q_proj", "v_proj"]))
        best = vt.max_batch(config=dict(CONFIG), seq=1024, budget="4GiB", vramfit=EXE, stack="hf-trainer",
                            lora_rank=8, lora_targets="q_proj,v_proj", precision="bf16", grad_accum=4,
                            alloc_conf="expandable_segments:True")["max_batch"]
        self.assertGreaterEqual(best, 1)
        args = fake_args(per_device_train_batch_size=best + 2, gradient_accumulation_steps=4, optim="adamw_bnb_8bit")
        with self.assertWarnsRegex(UserWarning, "optim=adamw_bnb_8bit is not modelled"):
            with self.assertRaises(vt.DoesNotFit) as cm:
                cb.on_train_begin(args, None, None, model=model)
        self.assertEqual(cm.exception.max_batch, best)
        self.assertIsNone(cb.estimate)
        cb.on_train_begin(fake_args(per_device_train_batch_size=best, gradient_accumulation_steps=4), None, None,
                          model=model)
        self.assertIs(cb.estimate["fits"], True)
        self.assertEqual(cb.estimate["step"]["batch"], best)
        with self.assertRaises(vt.VramfitError):
            cb.on_train_begin(args, None, None)


if __name__ == "__main__":
    unittest.main()
