"""vramfit for `transformers.Trainer`: will this fine-tuning step fit the GPU, asked before it runs.

A thin wrapper over the `vramfit` CLI (`vramfit predict|max-batch ... --json`, run through
subprocess), so a trainer script can check its step before the first batch instead of finding out
from a CUDA out-of-memory error minutes later. Only the standard library is imported here;
transformers is imported only by `fit_check_callback`.

    from vramfit_trainer import fit_check_callback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[fit_check_callback(seq=2048, budget="23GiB")])  # or gpu="RTX-4090"
    trainer.train()  # raises DoesNotFit before the first step, naming the largest batch that fits

or without transformers:

    e = predict(config="Qwen2.5-0.5B/config.json", batch=4, seq=2048, lora_rank=16,
                lora_targets="all-linear", grad_ckpt=True, budget="23GiB")
    print(e["fits"], e["required_bytes"] / 1e9, e["provenance"]["basis"])

Keyword flags map to CLI flags: `lora_rank=16` -> `--lora-rank 16`, `grad_ckpt=True` ->
`--grad-ckpt`, a list -> a comma list, None/False -> left out. `config` is a config.json path or a
transformers config object (written to a temporary config.json for the call).

The executable is the `vramfit=` argument, else the environment variable VRAMFIT, else `vramfit` on
PATH. A missing executable, bad input (exit status 2: `BadInput`, naming the flag or config field)
or output that is not the expected JSON raise; nothing falls back to a default.

What it predicts: `flags_from_trainer` and the callback use vramfit's `hf-trainer` stack, the
Trainer's own step on one GPU: autocast (bf16/fp16, fp32 weights under it), its optimizer
(`args.optim`: adamw_torch_fused, adamw_torch, adafactor, sgd), gradient accumulation. Where a
built-in step program covers the kind (fused AdamW at accumulation 1: full fine-tuning with bf16
weights, some fp32-weight and LoRA kinds) it is the allocator simulation, measured 1.000 to 1.015 of the Trainer's peak on an
H100; elsewhere a closed form, an upper bound of the allocated peak, measured 1.01 to 1.55. A run on several ranks (or with FSDP or
DeepSpeed) raises ValueError: that step is not modelled. Next to the flags, `flags_from_trainer` returns the
caveats: what the TrainingArguments set that the CLI cannot express, and the callback warns with
them. `predict` and `max_batch` take `stack=` like any flag (the CLI's default is `hf-peft`).
"""
import contextlib
import json
import os
import subprocess
import tempfile
import warnings

__all__ = ["predict", "max_batch", "check_fit", "flags_from_trainer", "fit_check_callback",
           "VramfitError", "BadInput", "DoesNotFit"]


class VramfitError(RuntimeError):
    """The CLI could not be run, or answered with something other than the expected JSON."""


class BadInput(ValueError):
    """Exit status 2: the CLI refused an input. `field` names the flag (or `file: key` of a config)."""

    def __init__(self, message, field):
        super().__init__("vramfit: %s: %s" % (field, message))
        self.message, self.field = message, field


class DoesNotFit(RuntimeError):
    """The step does not fit the budget. `max_batch` is the largest batch that does (0: not even 1)."""

    def __init__(self, estimate, max_batch):
        self.estimate, self.max_batch = estimate, max_batch
        self.required_bytes, self.budget_bytes = estimate["required_bytes"], estimate["budget_bytes"]
        self.basis = estimate.get("provenance", {}).get("basis")
        step = estimate["step"]
        best = ("the largest batch that fits is %d" % max_batch if max_batch > 0
                else "not even batch 1 fits (max-batch: 0)")
        super().__init__("vramfit: batch %d x seq %d does not fit: it needs %.2f GB, the budget is %.2f GB; %s.\n"
                         "basis: %s" % (step["batch"], step["seq"], self.required_bytes / 1e9,
                                        self.budget_bytes / 1e9, best, self.basis))


def _argv(flags):
    argv = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        argv.append("--" + key.replace("_", "-"))
        if isinstance(value, (set, frozenset)):
            value = sorted(value)
        if isinstance(value, (list, tuple)):
            argv.append(",".join(map(str, value)))
        elif value is not True:
            argv.append("%dB" % value if key == "budget" and isinstance(value, int) else str(value))
    return argv


@contextlib.contextmanager
def _config_path(config):
    """A config.json path as is; a transformers config (or dict) written to a temporary file."""
    if config is None or isinstance(config, (str, os.PathLike)):
        yield config
        return
    if isinstance(config, dict):
        data = config
    elif hasattr(config, "to_dict"):
        data = config.to_dict()  # the full config: to_json_string() writes only the diff by default
    else:
        raise TypeError("config must be a config.json path, a dict or a transformers config, got %r" % (config,))
    with tempfile.TemporaryDirectory(prefix="vramfit-") as d:
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(data, f, default=str)
        yield path


def _run(command, vramfit, flags, expect):
    exe = vramfit or os.environ.get("VRAMFIT") or "vramfit"
    with _config_path(flags.pop("config", None)) as config:
        argv = [exe, command, *_argv(dict(flags, config=config)), "--json"]
        try:
            r = subprocess.run(argv, capture_output=True, text=True)
        except OSError as e:
            raise VramfitError("cannot run %r (%s): pass vramfit=PATH, set VRAMFIT, or put vramfit on PATH"
                               % (exe, e.strerror or e)) from e
    try:
        out = json.loads(r.stdout)
    except ValueError:
        out = None
    if r.returncode == 2 and isinstance(out, dict) and "error" in out:
        raise BadInput(out["error"], out.get("field"))
    if r.returncode not in (0, 3) or not isinstance(out, dict) or expect not in out:
        raise VramfitError("unexpected answer from %s (exit status %d): %s" % (
            " ".join(argv), r.returncode, (r.stderr or r.stdout).strip()[:500] or "no output"))
    return out


def predict(config=None, batch=1, seq=2048, budget=None, vramfit=None, **flags):
    """`vramfit predict --json`: the estimate as a dict (`peak_bytes`, `required_bytes`, `method`,
    `provenance`; with budget= or gpu=: `fits`, `verdict`). A step that does not fit is not an error here."""
    return _run("predict", vramfit, dict(flags, config=config, batch=batch, seq=seq, budget=budget), "required_bytes")


def max_batch(config=None, seq=2048, budget=None, vramfit=None, **flags):
    """`vramfit max-batch --json`: `max_batch` (0: not even batch 1 fits), `oom_below`, `prediction`, ..."""
    return _run("max-batch", vramfit, dict(flags, config=config, seq=seq, budget=budget), "max_batch")


def _one_budget(budget, gpu):
    if (budget is None) == (gpu is None):
        raise ValueError("give one of budget= (e.g. '23GiB') or gpu= (e.g. 'RTX-4090')")


def check_fit(budget=None, gpu=None, vramfit=None, **flags):
    """predict() under budget= or gpu=; returns the estimate when it fits, else raises DoesNotFit."""
    _one_budget(budget, gpu)
    e = predict(budget=budget, gpu=gpu, vramfit=vramfit, **flags)
    if e.get("fits") is not False:
        if e.get("fits") is not True:
            raise VramfitError("vramfit predict gave no 'fits' under a budget: %r" % (sorted(e),))
        return e
    rest = {k: v for k, v in flags.items() if k != "batch"}  # max-batch takes no --batch
    raise DoesNotFit(e, max_batch(budget=budget, gpu=gpu, vramfit=vramfit, **rest)["max_batch"])


# The Trainer's optim names vramfit models, and its --optim words for them.
TRAINER_OPTIMS = {"adamw_torch_fused": "adamw-fused", "adamw_torch": "adamw", "adafactor": "adafactor", "sgd": "sgd"}


def _dtype_name(dtype):  # torch.bfloat16, "bfloat16", "torch.float32" -> "bfloat16", "float32"
    return str(dtype).rpartition(".")[2] if dtype is not None else None


def flags_from_trainer(model, args, seq):
    """The vramfit flags (keyword arguments for predict/check_fit) a Trainer's model and
    TrainingArguments imply, and the caveats: what they set that vramfit cannot express yet.
    Duck-typed: reads model.config, model.peft_config, model.dtype and args' fields; imports nothing."""
    config = model.config
    flags = {"config": config, "batch": args.per_device_train_batch_size, "seq": seq, "stack": "hf-trainer"}
    caveats = []
    peft = getattr(model, "peft_config", None)
    if peft:
        lora = peft.get("default") or next(iter(peft.values()))
        kind = getattr(lora, "peft_type", "LORA")
        if str(getattr(kind, "value", kind)) != "LORA":
            raise ValueError("vramfit models LoRA adapters only, not %s" % (kind,))
        flags["lora_rank"] = lora.r
        targets = getattr(lora, "target_modules", None)  # None: PEFT's default, vramfit's too
        if targets is not None:
            flags["lora_targets"] = targets if isinstance(targets, str) else sorted(targets)
        if getattr(lora, "lora_dropout", 0):  # above 0 each adapter keeps a mask and its own input copy
            flags["lora_dropout"] = lora.lora_dropout
        for name in ("use_dora", "modules_to_save", "layers_to_transform", "rank_pattern"):
            if getattr(lora, name, None):
                caveats.append("LoRA %s=%r is not modelled" % (name, getattr(lora, name)))
    else:
        flags["mode"] = "full"
    if getattr(args, "gradient_checkpointing", False):
        flags["grad_ckpt"] = True
        if (getattr(args, "gradient_checkpointing_kwargs", None) or {}).get("use_reentrant") is not False:
            caveats.append("gradient checkpointing without gradient_checkpointing_kwargs={'use_reentrant': False}: "
                           "vramfit models the non-reentrant kind, transformers' default may be reentrant")

    weights = _dtype_name(getattr(model, "dtype", None) or getattr(config, "dtype", None)
                          or getattr(config, "torch_dtype", None))
    precision = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(weights)
    if weights is not None and precision is None:
        raise ValueError("vramfit models bf16, fp16 or fp32 weights, not %s" % weights)
    autocast = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    if precision:  # the model's own dtype, whatever its config says (a model cast after loading)
        flags["weights"] = precision
    if autocast and precision and precision not in ("fp32", autocast):
        # bf16 weights under fp16 autocast (or the reverse): autocast casts every weight at each call,
        # and each matmul keeps its copy; not modelled, and no answer beats a low one.
        raise ValueError("%s weights under %s autocast are not modelled (autocast casts each weight at every "
                         "call); load fp32 weights or set args.%s" % (weights, autocast, precision))
    if autocast:  # hf-trainer's --precision is the autocast dtype; fp32 weights under it: mixed precision
        flags["precision"] = autocast
    elif precision:
        # Without autocast: hf-trainer's 2-byte precision stands for an autocast, fp16 for fp16 with
        # the grad scaler; bf16 has the same sizes and no scaler.
        flags["precision"] = flags["weights"] = "bf16" if precision == "fp16" else precision
        if precision != "fp32":
            caveats.append("%s weights without autocast (args.bf16 and args.fp16 off): hf-trainer models the step "
                           "under bf16 autocast, where LoRA adapters save a bf16 copy of their input, not PEFT's "
                           "fp32 cast" % weights)
    attn = getattr(config, "_attn_implementation", None)
    if attn == "eager":
        flags["attention"] = "math"
    elif attn == "sdpa" and precision == "fp32" and not autocast:
        flags["attention"] = "mem-efficient"  # SDPA's flash kernel takes no fp32
    elif attn not in (None, "sdpa", "flash_attention_2", "flash_attention_3"):
        caveats.append("attn_implementation %r is not modelled (vramfit: SDPA's kernels)" % attn)

    accum = getattr(args, "gradient_accumulation_steps", 1)
    if accum > 1:
        flags["grad_accum"] = accum
    optim = getattr(args, "optim", None)
    optim = str(getattr(optim, "value", optim))
    if optim in TRAINER_OPTIMS:
        flags["optim"] = TRAINER_OPTIMS[optim]
    else:  # the stack's default, fused AdamW: two moments per parameter
        caveats.append("optim=%s is not modelled: vramfit predicts fused AdamW (optim='adamw_torch_fused')" % optim)
    world = getattr(args, "world_size", 1)
    world = max(world, getattr(args, "n_gpu", 1))  # several GPUs in one process: nn.DataParallel
    if world > 1 or getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
        # The plain loop's per-rank figure reads a Trainer's step far under (fp32 weights: 0.58):
        # no answer is better than a wrong "fits".
        raise ValueError("vramfit models the Trainer's step on one GPU (hf-trainer); this run has %d ranks%s. "
                         "For a per-rank estimate of the plain loop use `vramfit predict --stack hf-peft "
                         "--world-size N --sharding ...`, which does not model the Trainer"
                         % (world, " and FSDP/DeepSpeed" if getattr(args, "fsdp", None) or
                            getattr(args, "deepspeed", None) else ""))
    alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
    if alloc:
        flags["alloc_conf"] = alloc
    return flags, caveats


def fit_check_callback(seq, budget=None, gpu=None, vramfit=None, **flags):
    """A transformers.TrainerCallback whose on_train_begin predicts the run's step (flags_from_trainer,
    then `flags` on top, e.g. alloc_conf="expandable_segments:True") and raises DoesNotFit before the first step when it does
    not fit budget= (e.g. "23GiB") or gpu= (e.g. "RTX-4090"). The caveats are warned (UserWarning);
    the estimate is kept as the callback's `estimate`."""
    _one_budget(budget, gpu)
    try:
        from transformers import TrainerCallback
    except ImportError as e:
        raise ImportError("fit_check_callback needs transformers (pip install transformers); "
                          "predict, max_batch, check_fit and flags_from_trainer do not") from e

    class VramfitFitCheck(TrainerCallback):
        estimate = None

        def on_train_begin(self, args, state, control, model=None, **kw):
            if model is None:
                raise VramfitError("on_train_begin got no model to check")
            step, caveats = flags_from_trainer(model, args, seq)
            step.update(flags)
            if caveats:
                warnings.warn("vramfit: the prediction does not model: " + "; ".join(caveats), stacklevel=2)
            self.estimate = check_fit(budget=budget, gpu=gpu, vramfit=vramfit, **step)

    return VramfitFitCheck()
