#!/usr/bin/env python3
"""Checks of trainer_harness.py that need no GPU and no torch: the committed arms files load, each
arm's fields are checked and named when wrong, and the sizes the scheduler packs by order the arms
as their memory does. Plain asserts: python3 tests/validation/test_trainer_harness.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hf_harness as H  # noqa: E402  (imports no torch)
import trainer_harness as T  # noqa: E402


def refused(raw, words):
    try:
        T.normalize(raw)
    except H.ArmSpecError as e:
        assert words in str(e), (raw, str(e))
        return
    raise AssertionError("accepted: %r" % (raw,))


def main():
    # The committed plans load, and cover what issue 14 asks of the measurements.
    with open(os.path.join(HERE, "trainer_arms.json")) as f:
        arms = [T.normalize(a) for a in json.load(f)]
    assert len({a["model"] for a in arms}) >= 4
    assert {a["mode"] for a in arms} == {"lora", "full"}
    assert {a["weights"] for a in arms} == {"bf16", "fp32"}
    assert {a["precision"] for a in arms} == {"bf16", "fp16"}
    assert {1, 4} <= {a["grad_accum"] for a in arms}
    assert {a["gradient_checkpointing"] for a in arms} == {False, True}
    assert len({a["lora_targets"] for a in arms if a["mode"] == "lora"}) >= 2
    assert {a["optim"] for a in arms} == {None, "adamw_torch", "adafactor", "sgd"}
    assert sum(a["steps"] for a in arms) >= 60
    with open(os.path.join(HERE, "trainer_fit_check.json")) as f:
        checks = [T.normalize(a) for a in json.load(f)]
    assert any(a["fit_check"] for a in checks) and any(not a["fit_check"] for a in checks)
    assert all(a["budget_gib"] == 12 for a in checks)

    # Defaults: the Trainer's own optimizer (None: recorded as resolved), bf16 weights and autocast.
    a = T.normalize({"model": "SmolLM2-135M", "mode": "full"})
    assert (a["optim"], a["weights"], a["precision"], a["grad_accum"], a["steps"]) == (None, "bf16", "bf16", 1, 3)
    assert a["budget_gib"] is None and a["fit_check"] is False

    # Bad fields are refused, naming the field.
    base = {"model": "SmolLM2-135M", "mode": "full"}
    refused(dict(base, grad_accum=0), "grad_accum")
    refused(dict(base, weights="fp16"), "weights")
    refused(dict(base, precision="fp8"), "precision")
    refused(dict(base, optim="adamw_8bit"), "optim")
    refused(dict(base, steps=0), "steps")
    refused(dict(base, budget_gib=0), "budget_gib")
    refused(dict(base, budget_gib="12GiB"), "budget_gib")
    refused(dict(base, fit_check=True), "fit_check needs budget_gib")
    refused(dict(base, logits_retained=True), "logits_retained")
    refused(dict(base, precision="fp16"), "fp16 autocast with bf16 weights")
    refused(dict(base, colour="red"), "unknown arm field")
    refused([base], "must be a JSON object")

    # The scheduler's sizes: fp32 weights, full fine-tuning, no checkpointing and a larger model
    # each weigh more.
    size = lambda **kw: T.param_bytes(T.normalize(dict(base, gradient_checkpointing=True, batch=2, seq=1024, **kw)))
    assert size(weights="fp32") > size()
    assert T.param_bytes(T.normalize(dict(base, batch=2, seq=1024))) > size()
    assert size(model="Llama-3.2-1B") > size()
    assert size() > T.param_bytes(T.normalize({"model": "SmolLM2-135M", "mode": "lora", "gradient_checkpointing": True,
                                               "batch": 2, "seq": 1024}))
    print("trainer_harness: arms files and field checks OK (%d arms, %d optimizer steps)" %
          (len(arms), sum(a["steps"] for a in arms)))


if __name__ == "__main__":
    main()
