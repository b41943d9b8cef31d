#!/usr/bin/env python3
"""Measure real HF transformers + PEFT fine-tuning steps on one CUDA GPU.

Each "arm" is one configuration (model shape, LoRA/full, rank, targets,
gradient checkpointing, whether the logits are kept alive, batch, seq).
For every arm two training steps are run and the peak of each phase
(forward / backward / optimizer / zero_grad) is read from torch.cuda's
allocator statistics, so that vramfit's per-term prediction can be
checked term by term.  Results are written as JSON Lines, one object per
line, flushed after every line so that partial results survive a kill.

Models are built from config with random weights (no network, no
downloads), bf16, SDPA attention, directly on the GPU.

Row kinds: "stack" (once), "context" (once, cuBLAS warm-up), "step" (one
per arm and repeat), "max_batch" (one per --max-batch configuration),
"end" (once, summary counts).  With --trials (does a step run under a
memory budget?): "trials" (once), "trial" (one per trial, each run in a
fresh process under set_per_process_memory_fraction), "end".  See
tests/validation/README.md.

Only the standard library plus torch / transformers / peft are used;
torch & co. are imported after argument parsing so that --help works
without them.
"""

import argparse
import contextlib
import gc
import json
import os
import platform
import subprocess
import sys
import time
import traceback

# Filled in by _import_stack() once the arguments are parsed.
torch = None
F = None

GIB = float(1 << 30)

ATTN_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL_LINEAR_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

SHAPE_KEYS = ("vocab", "hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim",
              "tied_embeddings", "qkv_bias")

# Built-in shapes, one row each: name, arch, max_position_embeddings, rms_norm_eps (None: the
# config's default), then the SHAPE_KEYS in order.  make_config() maps the harness' own field
# names onto the transformers config classes.
_PRESET_ROWS = [
    ("SmolLM2-135M", "llama", 16384, 1e-5, 49152, 576, 1536, 30, 9, 3, 64, True, False),
    ("Qwen2.5-0.5B", "qwen2", 32768, None, 151936, 896, 4864, 24, 14, 2, 64, True, True),
    ("TinyLlama-1.1B", "llama", 16384, None, 32000, 2048, 5632, 22, 32, 4, 64, False, False),
    ("Llama-3.2-1B", "llama", 16384, None, 128256, 2048, 8192, 16, 32, 8, 64, True, False),
    ("Qwen3-0.6B", "qwen3", 40960, None, 151936, 1024, 3072, 28, 16, 8, 128, True, False),
]
# Qwen3's q_norm and k_norm: a shape field the arch implies (vramfit's ModelShape::qk_norm), written
# into the rows of qwen3 arms only.
PRESETS = {name: {"arch": arch, "max_position_embeddings": mpe, "rms_norm_eps": eps,
                  "shape": dict(zip(SHAPE_KEYS, shape), **({"qk_norm": True} if arch == "qwen3" else {}))}
           for name, arch, mpe, eps, *shape in _PRESET_ROWS}

ARM_KEYS = {"model", "shape", "arch", "name", "mode", "lora_rank", "lora_targets", "lora_dropout", "optim",
            "step_file", "gradient_checkpointing", "logits_retained", "batch", "seq", "note"}
# The optimizers a step can run (vramfit's --optim): torch.optim.AdamW (foreach, the default on
# CUDA), torch.optim.SGD with momentum 0.9 (one buffer per parameter) and without (no state).
OPTIMIZERS = ("adamw", "sgd-momentum", "sgd")
MAX_BATCH_EXTRA_KEYS = {"cap_bytes"}

STACK = None  # dict, filled once
CONTEXT_ALLOCATED = None


class ArmSpecError(ValueError):
    """A malformed arm description (a usage error, reported before anything runs)."""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def gib(x):
    return "-" if x is None else "%.3f" % (x / GIB)


# --------------------------------------------------------------------------
# Arm descriptions
# --------------------------------------------------------------------------

def _as_bool(v, what):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise ArmSpecError("%s must be a boolean, got %r" % (what, v))


def _as_int(v, what, minimum):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or int(v) < minimum:
        raise ArmSpecError("%s must be an integer >= %d, got %r" % (what, minimum, v))
    return int(v)


def canonical_targets(raw):
    """Return (canonical string, module list) for a lora_targets value."""
    if raw is None:
        raw = "q_proj,v_proj"
    if isinstance(raw, str):
        s = raw.strip()
        if s.lower() in ("all-linear", "all_linear", "all"):
            return "all-linear", list(ALL_LINEAR_MODULES)
        if s.lower() in ("attention", "attn"):
            names = list(ATTN_MODULES)
        else:
            names = [x.strip() for x in s.split(",") if x.strip()]
    elif isinstance(raw, (list, tuple)):
        names = [str(x).strip() for x in raw if str(x).strip()]
    else:
        raise ArmSpecError("lora_targets must be a string or a list, got %r" % (raw,))
    if not names:
        raise ArmSpecError("lora_targets is empty")
    uniq = []
    for n in names:
        if n not in uniq:
            uniq.append(n)
    known = [n for n in ALL_LINEAR_MODULES if n in uniq]
    unknown = sorted(n for n in uniq if n not in ALL_LINEAR_MODULES)
    ordered = known + unknown
    if ordered == ALL_LINEAR_MODULES:
        return "all-linear", list(ALL_LINEAR_MODULES)
    return ",".join(ordered), ordered


def targets_text(targets):
    """A row's lora_targets (a list) as the arms and vramfit's --lora-targets spell it: "all-linear"
    for the seven projections, else the names joined by commas; None for full fine-tuning."""
    if targets is None or isinstance(targets, str):
        return targets
    return "all-linear" if list(targets) == ALL_LINEAR_MODULES else ",".join(targets)


def row_arm(arm):
    """The arm as rows record it: lora_targets as the list of projection names, in vramfit's order
    of modules (vramfit's JSON schema, include/vramfit/json.hpp), None for full fine-tuning."""
    return dict(arm, lora_targets=arm["lora_target_modules"])


def normalize_arm(raw, for_max_batch=False):
    """Validate an arm object and fill in the defaults.  Raises ArmSpecError."""
    if not isinstance(raw, dict):
        raise ArmSpecError("an arm must be a JSON object, got %r" % (raw,))
    allowed = ARM_KEYS | (MAX_BATCH_EXTRA_KEYS if for_max_batch else set())
    extra = sorted(set(raw) - allowed)
    if extra:
        raise ArmSpecError("unknown arm field(s) %s in %r" % (extra, raw))
    arm = {}
    if raw.get("model") is not None:
        name = raw["model"]
        if name not in PRESETS:
            raise ArmSpecError("unknown model preset %r (known: %s)" % (name, ", ".join(PRESETS)))
        if raw.get("shape") is not None:
            raise ArmSpecError("give either model or shape, not both")
        p = PRESETS[name]
        arm["model"] = name
        arm["arch"] = p["arch"]
        arm["shape"] = dict(p["shape"])
        arm["max_position_embeddings"] = p["max_position_embeddings"]
        arm["rms_norm_eps"] = p["rms_norm_eps"]
    else:
        shape = raw.get("shape")
        if not isinstance(shape, dict):
            raise ArmSpecError("an arm needs model (a preset name) or shape (an object)")
        arch = raw.get("arch", "llama")
        if arch not in ("llama", "qwen2", "qwen3", "mistral"):
            raise ArmSpecError("arch must be llama, qwen2, qwen3 or mistral, got %r" % (arch,))
        bad = sorted(set(shape) - set(SHAPE_KEYS) - {"qk_norm"})
        if bad:
            raise ArmSpecError("unknown shape field(s) %s" % bad)
        # qk_norm follows from the arch (a normalized arm, as --isolate hands it on, carries it).
        if _as_bool(shape.get("qk_norm", arch == "qwen3"), "shape.qk_norm") != (arch == "qwen3"):
            raise ArmSpecError("shape.qk_norm is Qwen3's q_norm and k_norm: true for arch qwen3 only")
        s = {}
        for k in ("vocab", "hidden", "intermediate", "layers", "heads"):
            if k not in shape:
                raise ArmSpecError("shape needs %s" % k)
            s[k] = _as_int(shape[k], "shape." + k, 1)
        s["kv_heads"] = _as_int(shape.get("kv_heads", s["heads"]), "shape.kv_heads", 1)
        if s["heads"] % s["kv_heads"]:
            raise ArmSpecError("heads must be a multiple of kv_heads")
        s["head_dim"] = _as_int(shape.get("head_dim", s["hidden"] // s["heads"]), "shape.head_dim", 1)
        s["tied_embeddings"] = _as_bool(shape.get("tied_embeddings", False), "shape.tied_embeddings")
        s["qkv_bias"] = _as_bool(shape.get("qkv_bias", arch == "qwen2"), "shape.qkv_bias")
        if arch == "qwen2" and not s["qkv_bias"]:
            raise ArmSpecError("arch qwen2 always has q/k/v bias; use arch llama for a bias-free shape")
        if arch == "mistral" and s["qkv_bias"]:
            raise ArmSpecError("arch mistral has no q/k/v bias; use qwen2 (or llama: bias on q,k,v,o)")
        if arch == "qwen3":
            s["qk_norm"] = True
        arm["model"] = raw.get("name") or "custom"
        arm["arch"] = arch
        arm["shape"] = s
        arm["max_position_embeddings"] = None  # chosen at build time
        arm["rms_norm_eps"] = None
    mode = raw.get("mode", "lora")
    if mode not in ("lora", "full"):
        raise ArmSpecError("mode must be lora or full, got %r" % (mode,))
    arm["mode"] = mode
    if mode == "lora":
        arm["lora_rank"] = _as_int(raw.get("lora_rank", 8), "lora_rank", 1)
        arm["lora_targets"], arm["lora_target_modules"] = canonical_targets(raw.get("lora_targets"))
        arm["lora_alpha"] = 2 * arm["lora_rank"]
        dropout = raw.get("lora_dropout", 0.0)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ArmSpecError("lora_dropout must be a number in [0, 1), got %r" % (dropout,))
        arm["lora_dropout"] = float(dropout)
    else:
        if raw.get("lora_rank") is not None or raw.get("lora_targets") is not None or \
                raw.get("lora_dropout") is not None:
            raise ArmSpecError("mode full takes no lora_rank / lora_targets / lora_dropout")
        arm["lora_rank"] = None
        arm["lora_targets"] = None
        arm["lora_target_modules"] = None
        arm["lora_alpha"] = None
        arm["lora_dropout"] = None
    arm["optim"] = raw.get("optim", "adamw")
    if arm["optim"] not in OPTIMIZERS:
        raise ArmSpecError("optim must be one of %s, got %r" % (", ".join(OPTIMIZERS), arm["optim"]))
    # A user's own training step (load_step): a Python file; `optim` then names what it runs.
    arm["step_file"] = raw.get("step_file")
    if arm["step_file"] is not None:
        if not isinstance(arm["step_file"], str) or not os.path.isfile(arm["step_file"]):
            raise ArmSpecError("step_file must name a Python file, got %r" % (arm["step_file"],))
        arm["step_file"] = os.path.abspath(arm["step_file"])
    arm["gradient_checkpointing"] = _as_bool(raw.get("gradient_checkpointing", False), "gradient_checkpointing")
    arm["logits_retained"] = _as_bool(raw.get("logits_retained", False), "logits_retained")
    if for_max_batch:
        if "batch" in raw:
            raise ArmSpecError("a max-batch configuration has no batch (it is searched)")
        if "cap_bytes" not in raw:
            raise ArmSpecError("a max-batch configuration needs cap_bytes")
        arm["cap_bytes"] = _as_int(raw["cap_bytes"], "cap_bytes", 1)
        arm["batch"] = None
    else:
        arm["batch"] = _as_int(raw.get("batch", 1), "batch", 1)
    arm["seq"] = _as_int(raw.get("seq", 1024), "seq", 2)
    arm["note"] = raw.get("note")
    return arm


def group_key(arm):
    return json.dumps([arm["model"], arm["arch"], arm["shape"], arm["mode"], arm["lora_rank"],
                       arm["lora_targets"], arm["lora_dropout"], arm["gradient_checkpointing"]], sort_keys=True)


def training_words(arm):
    """How the arm trains, in a few words: "lora r8 q_proj,v_proj dropout 0.05 sgd-momentum", "full"."""
    if arm["mode"] == "lora":
        m = "lora r%d %s" % (arm["lora_rank"], arm["lora_targets"])
        if arm.get("lora_dropout"):
            m += " dropout %g" % arm["lora_dropout"]
    else:
        m = "full"
    if arm.get("optim") not in (None, "adamw"):  # the Trainer's arms name their optim themselves
        m += " " + arm["optim"]
    return m


def arm_summary(arm):
    m = training_words(arm)
    bs = "b%s s%d" % ("?" if arm["batch"] is None else arm["batch"], arm["seq"])
    return "%s %s gc=%d ret=%d %s" % (arm["model"], m, int(arm["gradient_checkpointing"]),
                                      int(arm["logits_retained"]), bs)


# --------------------------------------------------------------------------
# Built-in plans
# --------------------------------------------------------------------------

_ATTN_T = "q_proj,k_proj,v_proj,o_proj"
_QV_T = "q_proj,v_proj"
_MODELS = ["SmolLM2-135M", "Qwen2.5-0.5B", "TinyLlama-1.1B", "Llama-3.2-1B"]


def _arm(model, mode, gc_on, batch, seq, rank=None, targets=None, retained=False):
    d = {"model": model, "mode": mode, "gradient_checkpointing": gc_on, "batch": batch, "seq": seq,
         "logits_retained": retained}
    if mode == "lora":
        d["lora_rank"] = rank
        d["lora_targets"] = targets
    return d


def plan_full():
    arms = []
    for m in _MODELS:
        # LoRA attention r=8, no checkpointing: batch/seq sweep incl. a non power of two, 8192 at batch 1,
        # and the logits kept alive once.
        for b, s, ret in [(1, 1024, False), (4, 1024, False), (1, 2048, False), (1, 2048, True),
                          (1, 3000, False), (1, 4096, False), (4, 4096, False), (1, 8192, False)]:
            arms.append(_arm(m, "lora", False, b, s, 8, _ATTN_T, ret))
        # LoRA attention r=8, checkpointing.
        for b, s in [(1, 1024), (4, 2048), (1, 3000), (1, 8192)]:
            arms.append(_arm(m, "lora", True, b, s, 8, _ATTN_T))
        # LoRA all-linear r=16.
        extra = [(1, 4096)] if m in ("Qwen2.5-0.5B", "Llama-3.2-1B") else []
        for b, s in [(1, 1024), (2, 3000)] + extra:
            arms.append(_arm(m, "lora", False, b, s, 16, "all-linear"))
        for b, s in [(1, 2048), (4, 4096)]:
            arms.append(_arm(m, "lora", True, b, s, 16, "all-linear"))
        # Full fine-tuning (not Llama-3.2-1B).
        if m != "Llama-3.2-1B":
            for b, s, ret in [(1, 1024, False), (4, 1024, False), (1, 2048, False), (1, 2048, True)]:
                arms.append(_arm(m, "full", False, b, s, retained=ret))
            for b, s in [(1, 2048), (4, 4096)]:
                arms.append(_arm(m, "full", True, b, s))
        # PEFT's default targets (q_proj, v_proj) at r=64.
        if m == "Qwen2.5-0.5B":
            for b, s, g in [(1, 2048, False), (4, 1024, False), (1, 4096, True)]:
                arms.append(_arm(m, "lora", g, b, s, 64, _QV_T))
        if m == "Llama-3.2-1B":
            arms.append(_arm(m, "lora", False, 1, 2048, 64, _QV_T))
    return arms


def plan_smoke():
    return [
        _arm("SmolLM2-135M", "lora", False, 1, 256, 8, _ATTN_T),
        _arm("SmolLM2-135M", "lora", True, 1, 256, 8, _ATTN_T),
        _arm("Qwen2.5-0.5B", "full", False, 1, 128),
    ]


# Caps chosen (from a rough per-token activation + 12*vocab bytes of loss buffers estimate)
# so that the answer should land around 5-11; override with --max-batch-arms.
MAX_BATCH_FULL = [
    {"model": "SmolLM2-135M", "mode": "lora", "lora_rank": 8, "lora_targets": _ATTN_T,
     "gradient_checkpointing": False, "seq": 2048, "cap_bytes": 30 * 10 ** 9},
    {"model": "Qwen2.5-0.5B", "mode": "lora", "lora_rank": 16, "lora_targets": "all-linear",
     "gradient_checkpointing": False, "seq": 4096, "cap_bytes": 100 * 10 ** 9},
    {"model": "TinyLlama-1.1B", "mode": "full", "gradient_checkpointing": False, "seq": 1024,
     "cap_bytes": 36 * 10 ** 9},
    {"model": "Qwen2.5-0.5B", "mode": "lora", "lora_rank": 8, "lora_targets": _QV_T,
     "gradient_checkpointing": True, "seq": 8192, "cap_bytes": 88 * 10 ** 9},
]

MAX_BATCH_SMOKE = [
    {"model": "SmolLM2-135M", "mode": "lora", "lora_rank": 8, "lora_targets": _ATTN_T,
     "gradient_checkpointing": False, "seq": 256, "cap_bytes": 3 * 10 ** 9},
]

PLANS = {"full": (plan_full, MAX_BATCH_FULL), "smoke": (plan_smoke, MAX_BATCH_SMOKE)}


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

class JsonlWriter:
    def __init__(self, path):
        d = os.path.dirname(os.path.abspath(path))
        if d:
            os.makedirs(d, exist_ok=True)
        self.f = open(path, "w", encoding="utf-8")

    def write(self, row):
        self.f.write(json.dumps(row, default=str) + "\n")
        self.f.flush()
        try:
            os.fsync(self.f.fileno())
        except OSError:
            pass

    def close(self):
        self.f.close()


# --------------------------------------------------------------------------
# torch helpers
# --------------------------------------------------------------------------

def _import_stack():
    global torch, F
    import torch as _torch
    import torch.nn.functional as _F
    torch = _torch
    F = _F
    import transformers  # noqa: F401  (import errors surface here, before any output)
    import peft  # noqa: F401


def _oom_types():
    types = []
    for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)):
        if t is not None and t not in types:
            types.append(t)
    return tuple(types)


def is_oom(exc):
    if isinstance(exc, _oom_types()):
        return True
    msg = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in msg.lower() or "ALLOC_FAILED" in msg)


def err_text(exc):
    msg = "%s: %s" % (type(exc).__name__, exc)
    msg = " ".join(msg.split())
    return msg[:600]


def drop_exception(exc):
    """Break the references an exception's traceback (and any chained exception's) holds to the
    frames' locals, so that activations / optimizer state of a failed step are really freed.
    Frames still executing (the caller's own) are skipped by traceback.clear_frames."""
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        try:
            traceback.clear_frames(e.__traceback__)
        except Exception:
            pass
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    for name in ("last_traceback", "last_value", "last_type", "last_exc"):
        if hasattr(sys, name):
            try:
                setattr(sys, name, None)
            except Exception:
                pass


def clean():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()


def alloc():
    return int(torch.cuda.memory_allocated())


def _alloc_stats():
    try:
        s = torch.cuda.memory_stats()
        return int(s.get("num_alloc_retries", 0)), int(s.get("num_ooms", 0))
    except Exception:
        return None, None


def _driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0].strip()
    except Exception:
        pass
    return None


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:
        return default


ENV_KEYS = ("CUBLAS_WORKSPACE_CONFIG", "TORCH_CUBLASLT_UNIFIED_WORKSPACE", "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_ALLOC_CONF", "CUDA_MODULE_LOADING", "TORCH_BLAS_PREFER_CUBLASLT",
            "DISABLE_ADDMM_CUDA_LT", "CUDA_VISIBLE_DEVICES", "PYTORCH_NO_CUDA_MEMORY_CACHING")


def collect_stack():
    import transformers
    import peft
    props = torch.cuda.get_device_properties(0)
    stack = {
        "gpu_name": _safe(lambda: torch.cuda.get_device_name(0)),
        "gpu_total_memory": int(props.total_memory),
        "gpu_capability": _safe(lambda: list(torch.cuda.get_device_capability(0))),
        "gpu_count": _safe(lambda: torch.cuda.device_count()),
        "driver_version": _driver_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": _safe(lambda: torch.backends.cudnn.version()),
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "accelerate": _safe(lambda: __import__("accelerate").__version__),
        "python": platform.python_version(),
        "preferred_blas_library": _safe(lambda: str(torch.backends.cuda.preferred_blas_library())),
        "sdp_enabled": {
            "flash": _safe(lambda: bool(torch.backends.cuda.flash_sdp_enabled())),
            "mem_efficient": _safe(lambda: bool(torch.backends.cuda.mem_efficient_sdp_enabled())),
            "cudnn": _safe(lambda: bool(torch.backends.cuda.cudnn_sdp_enabled())),
            "math": _safe(lambda: bool(torch.backends.cuda.math_sdp_enabled())),
        },
        "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
    }
    return stack


def warmup_context():
    """Create the cuBLAS / cuBLASLt handles and workspaces the training steps will use."""
    clean()
    before = alloc()
    dev = "cuda"
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    x = torch.randn(2, 256, 512, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
    w = torch.randn(1024, 512, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
    b = torch.randn(1024, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
    w32 = torch.randn(16, 512, device=dev, dtype=torch.float32, generator=gen).requires_grad_()
    y1 = F.linear(x, w)             # bf16 matmul, no bias
    y2 = F.linear(x, w, b)          # bf16 with bias (addmm / cuBLASLt epilogue path)
    y3 = F.linear(x.float(), w32)   # fp32 (LoRA adapters' dtype)
    loss = y1.float().sum() + y2.float().sum() + y3.sum()
    loss.backward()
    torch.cuda.synchronize()
    del x, w, b, w32, y1, y2, y3, loss, gen
    clean()
    return before, alloc(), int(torch.cuda.memory_reserved())


def _sdp_backend_names():
    try:
        from torch.nn.attention import SDPBackend
        return {int(v): str(n) for n, v in SDPBackend.__members__.items()}
    except Exception:
        return {}


def sdpa_note_for_shape(shape, seq=1024):
    """Which SDPA backend torch would pick for this model's attention (training, causal, bf16)."""
    H, KV, D = shape["heads"], shape["kv_heads"], shape["head_dim"]
    note = {"seq": seq, "heads": H, "kv_heads": KV, "head_dim": D,
            "transformers_use_gqa_in_sdpa": None, "fused_sdp_choice_gqa": None,
            "fused_sdp_choice_repeat_kv": None, "errors": []}
    dev = "cuda"
    try:
        from transformers.integrations.sdpa_attention import use_gqa_in_sdpa
        k = torch.zeros(1, KV, 8, D, device=dev, dtype=torch.bfloat16)
        note["transformers_use_gqa_in_sdpa"] = bool(use_gqa_in_sdpa(None, k))
        del k
    except Exception as e:  # not determinable
        note["errors"].append("use_gqa_in_sdpa: " + err_text(e))
    fn = getattr(torch, "_fused_sdp_choice", None)
    if fn is None:
        fn = _safe(lambda: torch.ops.aten._fused_sdp_choice)
    names = _sdp_backend_names()
    if fn is None:
        note["errors"].append("torch._fused_sdp_choice not available")
        return note
    # Same layout as transformers: (B, S, heads, D) projections viewed as (B, heads, S, D).
    q = torch.randn(1, seq, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True).transpose(1, 2)
    for label, kv_heads, gqa in (("fused_sdp_choice_gqa", KV, True), ("fused_sdp_choice_repeat_kv", H, False)):
        try:
            k = torch.randn(1, seq, kv_heads, D, device=dev, dtype=torch.bfloat16, requires_grad=True).transpose(1, 2)
            v = torch.randn(1, seq, kv_heads, D, device=dev, dtype=torch.bfloat16, requires_grad=True).transpose(1, 2)
            if not gqa:
                k = k.contiguous()  # repeat_kv's reshape copies
                v = v.contiguous()
            try:
                c = fn(q, k, v, None, 0.0, True, enable_gqa=gqa)
            except TypeError:
                if gqa and KV != H:
                    raise
                c = fn(q, k, v, None, 0.0, True)
            c = int(c)
            note[label] = {"value": c, "name": names.get(c)}
            del k, v
        except Exception as e:
            note["errors"].append(label + ": " + err_text(e))
    del q
    return note


# --------------------------------------------------------------------------
# Model building
# --------------------------------------------------------------------------

def make_config(arm, max_seq):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
    s = arm["shape"]
    mpe = arm["max_position_embeddings"] or max(32768, int(max_seq))
    common = dict(
        vocab_size=int(s["vocab"]),
        hidden_size=int(s["hidden"]),
        intermediate_size=int(s["intermediate"]),
        num_hidden_layers=int(s["layers"]),
        num_attention_heads=int(s["heads"]),
        num_key_value_heads=int(s["kv_heads"]),
        tie_word_embeddings=bool(s["tied_embeddings"]),
        max_position_embeddings=int(mpe),
        use_cache=False,
    )
    if arm["rms_norm_eps"] is not None:
        common["rms_norm_eps"] = float(arm["rms_norm_eps"])
    arch = arm["arch"]
    if arch == "llama":
        # LlamaConfig.attention_bias puts a bias on q, k, v AND o.
        return LlamaConfig(head_dim=int(s["head_dim"]), attention_bias=bool(s["qkv_bias"]), **common)
    if arch == "qwen2":
        # Qwen2 has q/k/v bias built in; Qwen2Config has no head_dim field (the model reads it with getattr).
        if int(s["head_dim"]) != int(s["hidden"]) // int(s["heads"]):
            common["head_dim"] = int(s["head_dim"])
        return Qwen2Config(**common)
    if arch == "qwen3":
        # Qwen3Config.attention_bias, as Llama's, puts a bias on q, k, v and o; q_norm and k_norm always.
        return Qwen3Config(head_dim=int(s["head_dim"]), attention_bias=bool(s["qkv_bias"]), **common)
    if arch == "mistral":
        # sliding_window=None keeps plain causal attention (no explicit mask) at every length.
        return MistralConfig(head_dim=int(s["head_dim"]), sliding_window=None, **common)
    raise ValueError("unknown arch %r" % (arch,))


def random_ids_dataset(n, seq, vocab):
    """The Trainer's dataset in the harnesses (trainer_harness.py, trace_capture.py's Trainer arms):
    n rows of `seq` random ids (seed 0) below `vocab`, each row its own labels."""
    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return self.ids.shape[0]

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i].clone()}
    return Data()


def build_model(arm, max_seq, dtype=None):
    """Build the (PEFT-wrapped) model on the GPU exactly as a user would, its weights in `dtype`
    (None: bf16).  Returns (model, info)."""
    from transformers import AutoModelForCausalLM
    info = {}
    cfg = make_config(arm, max_seq)
    dtype = torch.bfloat16 if dtype is None else dtype
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
            info["dtype_kwarg"] = "dtype"
        except TypeError as e:
            drop_exception(e)
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
            info["dtype_kwarg"] = "torch_dtype"
    model.config.use_cache = False
    info["attn_implementation"] = _safe(lambda: model.config._attn_implementation)
    info["model_class"] = type(model).__name__
    gc_kwargs = None
    if arm["gradient_checkpointing"]:
        gc_kwargs = {"use_reentrant": False}
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)
    info["gradient_checkpointing_kwargs"] = gc_kwargs
    info["is_gradient_checkpointing"] = _safe(lambda: bool(model.is_gradient_checkpointing))
    if arm["mode"] == "lora":
        from peft import LoraConfig, get_peft_model
        lcfg = LoraConfig(r=arm["lora_rank"], lora_alpha=arm["lora_alpha"], lora_dropout=arm["lora_dropout"],
                          target_modules=list(arm["lora_target_modules"]), task_type="CAUSAL_LM")
        model = get_peft_model(model, lcfg)
    model.train()
    info["moved_params_to_cuda"] = False
    if any(not p.is_cuda for p in model.parameters()):
        model.to("cuda")
        info["moved_params_to_cuda"] = True
    info["build_seconds"] = round(time.time() - t0, 3)
    return model, info


def base_transformers_model(model):
    if hasattr(model, "get_base_model"):
        try:
            return model.get_base_model()
        except Exception:
            pass
    return model


def param_summary(model):
    trainable = total = trainable_bytes = total_bytes = 0
    dtypes_trainable = set()
    adapter_dtype = None
    for name, p in model.named_parameters():
        n = p.numel()
        nb = n * p.element_size()
        total += n
        total_bytes += nb
        if p.requires_grad:
            trainable += n
            trainable_bytes += nb
            dtypes_trainable.add(str(p.dtype))
        if adapter_dtype is None and "lora_" in name:
            adapter_dtype = str(p.dtype)
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers() if b.is_cuda)
    frozen_dtypes = sorted({str(p.dtype) for p in model.parameters() if not p.requires_grad})
    return {
        "trainable_params": trainable, "total_params": total,
        "trainable_param_bytes": trainable_bytes, "total_param_bytes": total_bytes,
        "buffer_bytes": int(buffer_bytes),
        "trainable_dtypes": sorted(dtypes_trainable), "frozen_dtypes": frozen_dtypes,
        "adapter_dtype": adapter_dtype,
    }


def probe_model(model, vocab):
    """One tiny forward (batch 1, seq 64, grad mode) that records how SDPA is really called and
    whether the input embeddings' output requires grad (PEFT's enable_input_require_grads hook)."""
    info = {"observed_call": None, "sdpa_calls": 0, "embed_output_requires_grad": None, "error": None}
    calls = {"n": 0, "first": None}
    orig = torch.nn.functional.scaled_dot_product_attention

    def wrapper(*args, **kwargs):
        if calls["first"] is None:
            q = args[0] if len(args) > 0 else kwargs.get("query")
            k = args[1] if len(args) > 1 else kwargs.get("key")
            mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
            causal = args[5] if len(args) > 5 else kwargs.get("is_causal", False)
            calls["first"] = {
                "q_shape": list(q.shape), "k_shape": list(k.shape), "dtype": str(q.dtype),
                "attn_mask_is_none": mask is None, "is_causal": bool(causal),
                "enable_gqa": bool(kwargs.get("enable_gqa", False)),
                "q_requires_grad": bool(q.requires_grad),
            }
        calls["n"] += 1
        return orig(*args, **kwargs)

    seen = {}

    def hook(module, inputs, output):
        seen["rg"] = bool(getattr(output, "requires_grad", False))

    handle = None
    try:
        handle = base_transformers_model(model).get_input_embeddings().register_forward_hook(hook)
    except Exception as e:
        info["error"] = "embedding hook: " + err_text(e)
        drop_exception(e)
    torch.nn.functional.scaled_dot_product_attention = wrapper
    try:
        with torch.enable_grad():
            ids = torch.randint(0, vocab, (1, 64), device="cuda", dtype=torch.long)
            out = model(input_ids=ids)
            del out, ids
    except Exception as e:
        info["error"] = "probe forward: " + err_text(e)
        drop_exception(e)
    finally:
        torch.nn.functional.scaled_dot_product_attention = orig
        if handle is not None:
            handle.remove()
    info["observed_call"] = calls["first"]
    info["sdpa_calls"] = calls["n"]
    info["embed_output_requires_grad"] = seen.get("rg")
    for p in model.parameters():
        p.grad = None
    return info


def clear_grads(model):
    for p in model.parameters():
        p.grad = None


# --------------------------------------------------------------------------
# The measured step
# --------------------------------------------------------------------------

def _phase_begin():
    torch.cuda.synchronize()
    before = alloc()
    torch.cuda.reset_peak_memory_stats()
    return before, time.time()


def _phase_end(begin):
    torch.cuda.synchronize()
    before, t0 = begin
    stats = torch.cuda.memory_stats()
    # requested_bytes: the sizes the tensors asked for, before the allocator's 512 B rounding and
    # before a reused block that is not split hands its whole size over; peak minus this is slack.
    return {"before": before, "peak": int(torch.cuda.max_memory_allocated()), "after": alloc(),
            "reserved_peak": int(torch.cuda.max_memory_reserved()),
            "requested_peak": int(stats.get("requested_bytes.all.peak", -1)),
            "seconds": round(time.time() - t0, 4)}


def optimizer_info(optimizer, params):
    d = optimizer.defaults
    info = {k: d.get(k) for k in ("lr", "betas", "eps", "momentum", "weight_decay", "amsgrad", "foreach", "fused",
                                  "capturable", "differentiable", "maximize")}
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
        fused, foreach = _default_to_fused_or_foreach(params, False, False)
        info["resolved_fused"] = bool(fused)
        info["resolved_foreach"] = bool(foreach)
    except Exception:
        info["resolved_fused"] = None
        info["resolved_foreach"] = None
    info["class"] = type(optimizer).__name__
    return info


STEP_PHASES = ("forward", "backward", "optimizer", "zero_grad")
_STEPS = {}


def load_step(path):
    """A user's training step, from a Python file (vramfit-record --step): it defines
    `train_step(model, batch, optimizer, phase)`, which runs one step with each of its four parts
    inside `with phase("forward")`, "backward", "optimizer", "zero_grad", in that order, and may
    define `make_optimizer(params)` (else AdamW, lr 1e-4). Raises ArmSpecError naming the file."""
    if path not in _STEPS:
        import importlib.util
        spec = importlib.util.spec_from_file_location("vramfit_user_step_%d" % len(_STEPS), path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise ArmSpecError("step_file %s: cannot load it: %s" % (path, e))
        if not callable(getattr(module, "train_step", None)):
            raise ArmSpecError("step_file %s: defines no train_step(model, batch, optimizer, phase)" % path)
        _STEPS[path] = module
    return _STEPS[path]


def user_phases(record):
    """The `phase` a user's train_step is given: a context manager per part of the step, checked to
    come as STEP_PHASES in order; record(name) is the caller's own context manager for that part."""
    seen = []

    @contextlib.contextmanager
    def phase(name):
        if len(seen) >= len(STEP_PHASES) or name != STEP_PHASES[len(seen)]:
            raise ArmSpecError("train_step: phase(%r) out of order: the parts are %s, in that order"
                               % (name, ", ".join(STEP_PHASES)))
        seen.append(name)
        with record(name):
            yield
    return phase, seen


def run_user_step(arm, model, batch, optimizer, record):
    """One step of the arm's step file, each part inside record(name) (a context manager of the
    caller's: marks, phase peaks); an error unless it ran all of STEP_PHASES."""
    phase, seen = user_phases(record)
    load_step(arm["step_file"]).train_step(model, batch, optimizer, phase)
    if len(seen) != len(STEP_PHASES):
        raise ArmSpecError("train_step ran the parts %s, not all of %s" % (seen, ", ".join(STEP_PHASES)))


def make_optimizer(params, arm):
    """The arm's optimizer over `params` (lr 1e-4), with torch's defaults otherwise (foreach on CUDA);
    a user's step file may make its own."""
    user = load_step(arm["step_file"]) if arm.get("step_file") else None
    if callable(getattr(user, "make_optimizer", None)):
        return user.make_optimizer(params)
    name = arm.get("optim", "adamw")
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    return torch.optim.SGD(params, lr=1e-4, momentum=0.9 if name == "sgd-momentum" else 0.0)


def make_batch(batch_size, seq, vocab, gen):
    ids = torch.randint(0, vocab, (batch_size, seq), device="cuda", dtype=torch.long, generator=gen)
    return {"input_ids": ids, "labels": ids.clone()}


def run_steps(model, arm, vocab, seed, res, steps=2, lengths=None):
    """`steps` training steps (two for the step rows and max-batch searches, three for a trial);
    fills res (plain ints/strings only) as it goes, so partial results survive an exception.  All
    tensors are locals of this frame. With `lengths` (a loop with dynamic padding), step k runs a
    new batch of lengths[k-1] tokens, made while the previous batch is still bound, as a loop body
    `batch = next(it)` does."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, arm)
    res["optimizer"] = optimizer_info(optimizer, params)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    batch = make_batch(arm["batch"], lengths[0] if lengths else arm["seq"], vocab, gen)
    res["realised_seq"] = int(batch["input_ids"].shape[-1])
    if lengths:
        res["realised_lengths"] = []
    res["batch_bytes"] = int(sum(t.numel() * t.element_size() for t in batch.values()))
    retained = arm["logits_retained"]
    out = None
    loss = None
    for k in range(1, steps + 1):
        ph = {}
        res["phases"]["step%d" % k] = ph
        if lengths:
            res["current"] = "step%d.input" % k
            if k > 1:
                batch = make_batch(arm["batch"], lengths[k - 1], vocab, gen)
            res["realised_lengths"].append(int(batch["input_ids"].shape[-1]))
        if arm.get("step_file"):
            @contextlib.contextmanager
            def record(name, ph=ph, k=k):
                res["current"] = "step%d.%s" % (k, name)
                b = _phase_begin()
                yield
                ph[name] = _phase_end(b)
            run_user_step(arm, model, batch, optimizer, record)
            continue
        res["current"] = "step%d.forward" % k
        b = _phase_begin()
        out = model(**batch)
        loss = out.loss
        if not retained:
            out = None  # the caller drops the output object: the bf16 logits go before backward
        ph["forward"] = _phase_end(b)
        if k == 1:
            res["logits_dtype"] = None if out is None else _safe(lambda: str(out.logits.dtype))
        res["current"] = "step%d.backward" % k
        b = _phase_begin()
        loss.backward()
        ph["backward"] = _phase_end(b)
        res["loss_step%d" % k] = _safe(lambda: float(loss.item()))
        if k == 1:
            res["grad_bytes"] = int(sum(p.grad.numel() * p.grad.element_size() for p in params
                                        if p.grad is not None))
            res["grad_dtypes"] = sorted({str(p.grad.dtype) for p in params if p.grad is not None})
        loss = None
        res["current"] = "step%d.optimizer" % k
        b = _phase_begin()
        optimizer.step()
        ph["optimizer"] = _phase_end(b)
        # A caller that keeps the output (`outputs = model(...)` in a loop body) holds it, and so
        # the bf16 logits, through the optimizer step; it goes when the next iteration rebinds it.
        out = None
        res["current"] = "step%d.zero_grad" % k
        b = _phase_begin()
        optimizer.zero_grad(set_to_none=True)
        ph["zero_grad"] = _phase_end(b)
    res["current"] = None
    res["optimizer_state_bytes"] = int(sum(t.numel() * t.element_size()
                                           for st in optimizer.state.values() for t in st.values()
                                           if torch.is_tensor(t) and t.is_cuda))
    del optimizer, params, batch, gen


def summarize_phases(phases):
    """step_peak_k / reserved_peak_k: max over step k's phases; peak_first = step 1's;
    peak_steady = max(step 1, step 2); reserved_peak = max over both steps."""
    out = {}
    for k in (1, 2):
        ph = phases.get("step%d" % k) or {}
        peaks = [v["peak"] for v in ph.values()]
        res = [v["reserved_peak"] for v in ph.values()]
        out["step_peak_%d" % k] = max(peaks) if peaks else None
        out["reserved_peak_%d" % k] = max(res) if res else None
    out["peak_first"] = out["step_peak_1"]
    both = [x for x in (out["step_peak_1"], out["step_peak_2"]) if x is not None]
    out["peak_steady"] = max(both) if both else None
    both = [x for x in (out["reserved_peak_1"], out["reserved_peak_2"]) if x is not None]
    out["reserved_peak"] = max(both) if both else None
    return out


# --------------------------------------------------------------------------
# Plan execution
# --------------------------------------------------------------------------

def arm_fields(arm):
    return {
        "model": arm["model"], "arch": arm["arch"], "shape": dict(arm["shape"]), "mode": arm["mode"],
        "lora_rank": arm["lora_rank"], "lora_targets": arm["lora_target_modules"],  # the list: see row_arm
        "lora_target_modules": arm["lora_target_modules"], "lora_alpha": arm["lora_alpha"],
        "lora_dropout": arm["lora_dropout"], "optim": arm["optim"], "step_file": arm["step_file"],
        "gradient_checkpointing": arm["gradient_checkpointing"],
        "logits_retained": arm["logits_retained"], "batch": arm["batch"], "seq": arm["seq"],
        "note": arm.get("note"),
    }


class Runner:
    def __init__(self, writer, budget_s, own_process=False):
        self.w = writer
        # own_process: this process runs one arm as a trainer would: build, then the steps, with no
        # probe forward and no emptying of the cache in between (--arm-index, set by --isolate).
        self.own_process = own_process
        self.t_start = time.time()
        self.budget_s = budget_s
        self.sdpa_notes = {}
        self.rows = []       # summaries for the final table
        self.mb_rows = []
        self.n_errors = 0

    def over_budget(self):
        return self.budget_s and (time.time() - self.t_start) > self.budget_s

    def finish(self, row, t0, rows):
        """Stamps a row's wall time and stack, counts its error, writes it and keeps it in `rows`."""
        row["wall_seconds"] = round(time.time() - t0, 3)
        row["stack"] = STACK
        if row["error"]:
            self.n_errors += 1
        self.w.write(row)
        rows.append(row)

    def sdpa_note(self, arm):
        key = json.dumps([arm["arch"], arm["shape"]], sort_keys=True)
        if key not in self.sdpa_notes:
            try:
                self.sdpa_notes[key] = sdpa_note_for_shape(arm["shape"])
            except Exception as e:
                self.sdpa_notes[key] = {"errors": ["sdpa note: " + err_text(e)]}
                drop_exception(e)
            clean()
        return self.sdpa_notes[key]

    # ---- the plan ------------------------------------------------------
    def run_plan(self, arms, repeats, index=None, first_repeat=0):
        if index is not None:  # one arm, run as plan arm index[0] of repeat index[1]
            (arm,) = arms
            self.run_group([(index[0], arm)], index[1], 0, 1)
            return
        order = []
        groups = {}
        for i, a in enumerate(arms):
            k = group_key(a)
            if k not in groups:
                groups[k] = []
                order.append(k)
            groups[k].append((i, a))
        total = len(arms) * repeats
        n = 0
        for rep in range(first_repeat, first_repeat + repeats):
            for k in order:
                n = self.run_group(groups[k], rep, n, total)

    def run_group(self, members, rep, n, total):
        model = None
        build_info = {}
        build_error = None
        probe = None
        group_pre = None
        max_seq = max(a["seq"] for _, a in members)
        vocab = members[0][1]["shape"]["vocab"]
        for j, (plan_index, arm) in enumerate(members):
            n += 1
            is_last = j == len(members) - 1
            row = {"kind": "step", "plan_index": plan_index, "repeat": rep}
            row.update(arm_fields(arm))
            row.update({"realised_seq": None, "error": None, "warning": None, "failed_phase": None,
                        "peak_at_error": None})
            t0 = time.time()
            if self.over_budget():
                row["error"] = "skipped: --budget-s exceeded"
            else:
                note = self.sdpa_note(arm)
                if model is None and build_error is None:
                    clean()
                    group_pre = alloc()
                    try:
                        model, build_info = build_model(arm, max_seq)
                        if not self.own_process:
                            probe = probe_model(model, vocab)
                    except Exception as e:
                        build_error = "model build: " + err_text(e)
                        drop_exception(e)
                        model = None
                    if not self.own_process or build_error is not None:
                        clean()
                    row["group_build"] = True
                else:
                    row["group_build"] = False
                row["pre_arm_allocated"] = group_pre
                row["context_allocated"] = CONTEXT_ALLOCATED
                row["build"] = build_info
                row["sdpa_backend_note"] = dict(note, probe=probe)
                row["embed_output_requires_grad"] = None if probe is None else probe.get("embed_output_requires_grad")
                row["gradient_checkpointing_kwargs"] = build_info.get("gradient_checkpointing_kwargs")
                if build_error is not None:
                    row["error"] = build_error
                else:
                    self.run_arm(model, arm, vocab, plan_index, rep, row)
            if is_last:
                model = None
                clean()
                row["post_group_allocated"] = alloc()
                if group_pre is not None and row["post_group_allocated"] != group_pre:
                    row["warning"] = ((row["warning"] + "; ") if row["warning"] else "") + (
                        "post_group_allocated %d != pre_arm_allocated %d" % (row["post_group_allocated"], group_pre))
            else:
                row["post_group_allocated"] = None
            self.finish(row, t0, self.rows)
            log("[%d/%d] %s -> first %s GiB, steady %s GiB, weights %s GiB, %.1fs%s" % (
                n, total, arm_summary(arm), gib(row.get("peak_first")), gib(row.get("peak_steady")),
                gib(row.get("weights_allocated")), row["wall_seconds"],
                ("  ERROR " + row["error"]) if row["error"] else ""))
        return n

    def run_arm(self, model, arm, vocab, plan_index, rep, row):
        row["process"] = "own" if self.own_process else "shared"
        row["cache_emptied_after_build"] = not self.own_process
        if not self.own_process:
            clear_grads(model)
            clean()
        weights = alloc()
        row["weights_allocated"] = weights
        row["reserved_at_start"] = int(torch.cuda.memory_reserved())
        row.update(param_summary(model))
        retries0, ooms0 = _alloc_stats()
        res = {"phases": {}, "current": None}
        try:
            run_steps(model, arm, vocab, 1000 * rep + plan_index, res)
        except Exception as e:
            row["error"] = ("OOM: " if is_oom(e) else "") + err_text(e)
            row["failed_phase"] = res.get("current")
            row["peak_at_error"] = _safe(lambda: int(torch.cuda.max_memory_allocated()))
            drop_exception(e)
        clear_grads(model)
        clean()
        retries1, ooms1 = _alloc_stats()
        row["realised_seq"] = res.get("realised_seq")
        if row["realised_seq"] is not None and row["realised_seq"] != arm["seq"] and not row["error"]:
            row["error"] = "realised seq %d != requested %d" % (row["realised_seq"], arm["seq"])
        row["phases"] = res["phases"]
        row.update(summarize_phases(res["phases"]))
        for k in ("optimizer", "batch_bytes", "grad_bytes", "grad_dtypes", "optimizer_state_bytes",
                  "loss_step1", "loss_step2", "logits_dtype"):
            row[k] = res.get(k)
        row["alloc_retries"] = None if retries0 is None else retries1 - retries0
        row["alloc_ooms"] = None if ooms0 is None else ooms1 - ooms0
        row["post_arm_allocated"] = alloc()
        if row["post_arm_allocated"] != weights:
            row["warning"] = "post_arm_allocated %d != weights_allocated %d (leak?)" % (
                row["post_arm_allocated"], weights)

    # ---- max batch under a cap -------------------------------------------
    def run_max_batch(self, configs, total_memory, per_config_s):
        for ci, arm in enumerate(configs):
            row = {"kind": "max_batch", "config_index": ci}
            f = arm_fields(arm)
            f.pop("batch")
            row.update(f)
            cap = arm["cap_bytes"]
            fraction = min(1.0, cap / float(total_memory))
            row.update({"cap_bytes": cap, "fraction": fraction, "max_batch": None, "trials": [],
                        "trial_details": [], "error": None, "warning": None, "truncated": False,
                        "first_failing_batch": None,
                        "context_allocated": CONTEXT_ALLOCATED})
            if cap > total_memory:
                row["warning"] = "cap_bytes exceeds the GPU's total memory; fraction clamped to 1.0"
            t0 = time.time()
            if self.over_budget():
                row["error"] = "skipped: --budget-s exceeded"
            else:
                try:
                    self._search(arm, fraction, row, t0, per_config_s)
                except Exception as e:  # a non-OOM failure: stop searching this configuration
                    row["error"] = err_text(e)
                    drop_exception(e)
                finally:
                    torch.cuda.set_per_process_memory_fraction(1.0, 0)
                    clean()
            self.finish(row, t0, self.mb_rows)
            log("[max-batch %d/%d] %s cap %s GiB -> max_batch %s, trials %s, %.1fs%s" % (
                ci + 1, len(configs), arm_summary(arm), gib(cap), row["max_batch"],
                row["trials"], row["wall_seconds"], ("  ERROR " + row["error"]) if row["error"] else ""))

    def _search(self, arm, fraction, row, t0, per_config_s):
        clean()
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
        cache = {}

        def trial(b):
            if b not in cache:
                ok, detail = self._trial(arm, b)
                cache[b] = ok
                row["trials"].append([b, ok])
                row["trial_details"].append(detail)
                log("    trial batch %d: %s (peak %s GiB, %.1fs)" % (
                    b, "ok" if ok else "OOM", gib(detail.get("peak_steady") or detail.get("peak_at_error")),
                    detail["seconds"]))
            return cache[b]

        def out_of_time():
            if per_config_s and time.time() - t0 > per_config_s:
                row["truncated"] = True
                return True
            if self.over_budget():
                row["truncated"] = True
                return True
            return False

        lo, hi, b = 0, None, 1
        while b <= 256:
            if trial(b):
                lo = b
                b *= 2
            else:
                hi = b
                break
            if out_of_time():
                break
        if lo == 256 and hi is None:
            row["warning"] = "search stopped at batch 256 (all succeeded)"
        while hi is not None and hi - lo > 1 and not row["truncated"]:
            mid = (lo + hi) // 2
            if trial(mid):
                lo = mid
            else:
                hi = mid
            if out_of_time():
                break
        row["max_batch"] = lo
        row["first_failing_batch"] = hi

    def _trial(self, arm, b):
        a = dict(arm, batch=b)
        detail = {"batch": b, "ok": False, "error": None}
        t = time.time()
        clean()
        res = {"phases": {}, "current": None}
        try:
            self._trial_inner(a, res)
            detail["ok"] = True
        except Exception as e:
            if not is_oom(e):
                raise
            detail["error"] = err_text(e)[:200]
            detail["failed_phase"] = res.get("current") or "build"
            detail["peak_at_error"] = _safe(lambda: int(torch.cuda.max_memory_allocated()))
            drop_exception(e)
        clean()
        detail.update(summarize_phases(res["phases"]))
        detail["seconds"] = round(time.time() - t, 3)
        return detail["ok"], detail

    def _trial_inner(self, arm, res):
        res["current"] = "build"
        model, _info = build_model(arm, arm["seq"])
        res["current"] = None
        run_steps(model, arm, arm["shape"]["vocab"], 7, res)
        del model

    # ---- summary ---------------------------------------------------------
    def print_summary(self):
        log("")
        log("=" * 118)
        log("%-4s %-15s %-5s %-28s %-3s %-3s %-3s %-5s %9s %9s %9s %7s  %s" % (
            "idx", "model", "mode", "targets", "r", "gc", "ret", "b x s", "weights", "first", "steady", "secs",
            "error/warning"))
        for r in self.rows:
            log("%-4s %-15s %-5s %-28s %-3s %-3s %-3s %-5s %9s %9s %9s %7.1f  %s" % (
                r["plan_index"], r["model"][:15], r["mode"], (targets_text(r["lora_targets"]) or "-")[:28],
                r["lora_rank"] if r["lora_rank"] is not None else "-", int(r["gradient_checkpointing"]),
                int(r["logits_retained"]), "%dx%d" % (r["batch"], r["seq"]),
                gib(r.get("weights_allocated")), gib(r.get("peak_first")), gib(r.get("peak_steady")),
                r["wall_seconds"], (r["error"] or r.get("warning") or "")[:60]))
        for r in self.mb_rows:
            log("max-batch %-15s %-5s %-28s gc=%d s=%d cap=%s GiB -> %s  trials=%s %s" % (
                r["model"], r["mode"], targets_text(r["lora_targets"]) or "-", int(r["gradient_checkpointing"]), r["seq"],
                gib(r["cap_bytes"]), r["max_batch"], r["trials"], r["error"] or ""))
        log("GiB = 2^30 bytes; %d rows, %d with an error; %.1fs in all" % (
            len(self.rows) + len(self.mb_rows), self.n_errors, time.time() - self.t_start))


# --------------------------------------------------------------------------
# Trials: does a step run under a memory budget? (--trials; issue 13)
# --------------------------------------------------------------------------
#
# A trial is an arm plus budget_bytes and an optional alloc_conf (a PYTORCH_CUDA_ALLOC_CONF
# string). Each runs in a fresh child process whose environment carries the alloc_conf from its
# start (no inherited PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF otherwise), which caps its
# allocator with set_per_process_memory_fraction(budget / total) before anything is allocated,
# then runs the --isolate child's flow: the cuBLAS warm-up, the build, then TRIAL_STEPS steps
# of run_steps. Everything up to the child's torch import is plain Python, checked by
# test_trials.py without torch.

TRIAL_KEYS = {"budget_bytes", "alloc_conf", "case", "reported", "stack", "lengths"}
MAX_LOOP_STEPS = 32  # vramfit::VariedLengths::max_steps: the replay simulates at most that many
TRIAL_STACKS = ("hf-peft", "libtorch")
TRIAL_STEPS = 3
OUTCOMES = ("ok", "oom", "error", "skipped")
ALLOC_CONF_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
DEFAULT_GPU_SHARE_BYTES = 120e9  # suits the H200 (150 GB); see gpu_share_default


def gpu_share_default():
    """The share of trials side by side when --gpu-share-bytes is not given: 120 GB, and at most 70%
    of GPU 0's memory where nvidia-smi reports it. On an 80 GB H100 the 120 GB share let trials run
    the card itself out of memory (oom_cause "device", tests/validation/README.md#fit-trials-on-the-h100)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return min(DEFAULT_GPU_SHARE_BYTES, 0.7 * float(out) * (1 << 20))
    except (OSError, ValueError, subprocess.SubprocessError):
        return DEFAULT_GPU_SHARE_BYTES


def budget_text(b):
    """24GiB for a whole number of GiB, else GB of 10^9 with two decimals."""
    return "%dGiB" % (b >> 30) if b % (1 << 30) == 0 else "%.2fGB" % (b / 1e9)


def default_case(arm, budget, alloc_conf):
    m = training_words(arm)
    return "%s %s%s s%d %s %s" % (arm["model"], m, " gc" if arm["gradient_checkpointing"] else "", arm["seq"],
                                 budget_text(budget), alloc_conf or "default")


def normalize_trial(raw, index):
    """Validate a trial object (an arm's fields plus budget_bytes, alloc_conf, case, reported).
    Raises ArmSpecError naming the trial."""
    if not isinstance(raw, dict):
        raise ArmSpecError("trial %d: a trial must be a JSON object, got %r" % (index, raw))
    try:
        arm = normalize_arm({k: v for k, v in raw.items() if k not in TRIAL_KEYS})
        if "budget_bytes" not in raw:
            raise ArmSpecError("a trial needs budget_bytes")
        budget = _as_int(raw["budget_bytes"], "budget_bytes", 1 << 20)
        conf = raw.get("alloc_conf")
        if conf is not None and (not isinstance(conf, str) or not conf or any(c.isspace() for c in conf)):
            raise ArmSpecError("alloc_conf must be null or a PYTORCH_CUDA_ALLOC_CONF string without spaces "
                               "(e.g. \"expandable_segments:True\"), got %r" % (conf,))
        case = raw.get("case")
        if case is not None and (not isinstance(case, str) or not case.strip()):
            raise ArmSpecError("case must be a non-empty string, got %r" % (case,))
        reported = raw.get("reported")
        if reported not in (None, "ok", "oom"):
            raise ArmSpecError("reported must be null, \"ok\" or \"oom\", got %r" % (reported,))
        stack = raw.get("stack", "hf-peft")
        if stack not in TRIAL_STACKS:
            raise ArmSpecError("stack must be one of %s, got %r" % (", ".join(TRIAL_STACKS), stack))
        if stack == "libtorch" and arm["model"] not in PRESETS:
            raise ArmSpecError("a libtorch trial names a preset model (vramfit probe --model), got %r" % arm["model"])
        lengths = raw.get("lengths")
        if lengths is not None:
            if stack != "hf-peft":
                raise ArmSpecError("lengths (a loop of varied lengths) runs on the hf-peft stack only")
            if (not isinstance(lengths, list) or not 1 <= len(lengths) <= MAX_LOOP_STEPS
                    or any(isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= arm["seq"]
                           for x in lengths)):
                raise ArmSpecError("lengths must be a list of 1 to %d token counts, each 1..seq (%d), got %r"
                                   % (MAX_LOOP_STEPS, arm["seq"], lengths))
    except ArmSpecError as e:
        raise ArmSpecError("trial %d: %s" % (index, e))
    return {"index": index, "arm": arm, "budget_bytes": budget, "alloc_conf": conf, "stack": stack,
            "lengths": lengths,
            "case": case or ("%s%s" % ("libtorch " if stack == "libtorch" else "", default_case(arm, budget, conf))),
            "reported": reported}


def load_trials_file(path):
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not data:
        raise ArmSpecError("%s must hold a non-empty JSON list of trial objects" % path)
    return [normalize_trial(x, i) for i, x in enumerate(data)]


def budget_fraction(budget, total):
    """The fraction set_per_process_memory_fraction takes for a budget (at most 1.0)."""
    return min(1.0, budget / float(total))


def trial_env(environ, alloc_conf):
    """A child's environment: the parent's without any allocator configuration, plus
    PYTORCH_CUDA_ALLOC_CONF=alloc_conf when the trial gives one."""
    env = {k: v for k, v in environ.items() if k not in ALLOC_CONF_ENV}
    if alloc_conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    return env


# The allocator's out-of-memory message (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::
# malloc), sizes by format_size: "%.2f" and bytes / KiB / MiB / GiB. With a memory fraction set:
#   CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 139.81 GiB of which
#   96.31 GiB is free. Process 7 has 1.00 GiB memory in use. Including non-PyTorch memory, this process
#   has 24.51 GiB memory in use. 24.00 GiB allowed; Of the allocated memory 20.88 GiB is allocated by
#   PyTorch, and 3.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated ...
# "Tried to allocate" is the segment the allocator asked for (the request rounded: 2 MiB for requests
# up to 1 MiB, 20 MiB up to 10 MiB, else a multiple of 2 MiB). Parsed sizes carry the message's
# rounding (half a unit of 0.01).
_SIZE = r"([0-9]+(?:\.[0-9]+)?) (bytes|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
OOM_FIELDS = (
    ("tried_to_allocate_bytes", r"Tried to allocate " + _SIZE),
    ("allocated_by_pytorch_bytes", _SIZE + r" is allocated by PyTorch"),
    ("reserved_unallocated_bytes", _SIZE + r" is reserved by PyTorch but unallocated"),
    ("allowed_bytes", _SIZE + r" allowed;"),
    ("device_free_bytes", r"of which " + _SIZE + r" is free"),
    ("device_total_bytes", r"total capacity of " + _SIZE),
    ("process_in_use_bytes", r"this process has " + _SIZE + r" memory in use"),
)


def size_bytes(number, unit):
    return int(round(float(number) * _UNITS[unit]))


def first_line(text):
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def parse_oom_message(text):
    """The message's first line, and each size of OOM_FIELDS in bytes (None where absent, as in a
    cuBLAS allocation failure). oom_cause: "budget" when the device had room for the segment (the
    memory fraction refused it), "device" when it had not (another process held the memory)."""
    import re
    out = {"message": first_line(text)}
    for key, pattern in OOM_FIELDS:
        m = re.search(pattern, str(text))
        out[key] = size_bytes(*m.groups()) if m else None
    tried, free = out["tried_to_allocate_bytes"], out["device_free_bytes"]
    out["cause"] = None if tried is None or free is None else ("budget" if free >= tried else "device")
    return out


def parse_failed_phase(current):
    """res["current"] at a failure as (phase, step): "step2.backward" -> ("backward", 2),
    "build" -> ("build", None); None -> (None, None)."""
    if not current:
        return None, None
    if current.startswith("step") and "." in current:
        k, phase = current.split(".", 1)
        try:
            return phase, int(k[4:])
        except ValueError:
            pass
    return current, None


def step_peaks(phases, steps, failed=None, at_error=None):
    """Per step: the allocated and reserved peaks, the max over its phases (each phase's peaks are
    read after a reset at its start, so their max is the step's since a reset at its start). The step
    a failure cut short also takes at_error, (allocated, reserved) peaks read at the failure, and is
    marked incomplete. Steps never begun are left out."""
    _, failed_step = parse_failed_phase(failed)
    out = []
    for k in range(1, steps + 1):
        ph = phases.get("step%d" % k)
        if ph is None:
            break
        alloc_peaks = [v["peak"] for v in ph.values()]
        reserved_peaks = [v["reserved_peak"] for v in ph.values()]
        if failed_step == k and at_error is not None:
            alloc_peaks.append(at_error[0])
            reserved_peaks.append(at_error[1])
        alloc_peaks = [x for x in alloc_peaks if x is not None]
        reserved_peaks = [x for x in reserved_peaks if x is not None]
        out.append({"step": k,
                    "allocated_peak": max(alloc_peaks) if alloc_peaks else None,
                    "reserved_peak": max(reserved_peaks) if reserved_peaks else None,
                    "complete": failed_step != k and len(ph) == 4})
    return out


def schedule_order(budgets):
    """The order trials are offered to the scheduler: largest budget first (ties in file order), so
    that the big ones do not trail at the end."""
    return sorted(range(len(budgets)), key=lambda i: (-budgets[i], i))


def pick_next(pending_budgets, running_budgets, jobs, cap):
    """The position in pending_budgets of the next trial to start, or None: the first that keeps the
    running budgets' sum within cap, with fewer than jobs running. A trial over the cap on its own
    runs alone, when nothing else runs."""
    if not pending_budgets or len(running_budgets) >= jobs:
        return None
    used = sum(running_budgets)
    for pos, b in enumerate(pending_budgets):
        if used + b <= cap:
            return pos
    if not running_budgets:
        return 0
    return None


def simulate_schedule(budgets, durations, jobs, cap):
    """The scheduler of run_trials on known durations: (makespan, start time of each trial)."""
    pending = schedule_order(budgets)
    running = []  # (end time, index)
    t = 0.0
    starts = [None] * len(budgets)
    while pending or running:
        while True:
            pos = pick_next([budgets[i] for i in pending], [budgets[i] for _, i in running], jobs, cap)
            if pos is None:
                break
            i = pending.pop(pos)
            starts[i] = t
            running.append((t + durations[i], i))
        running.sort()
        t, _ = running.pop(0)
    return t, starts


# A rough duration model for --list: a process's start, imports, CUDA context and build, plus three
# steps at an effective bf16 rate. Only a guide to sizing a trial file.
TRIAL_OVERHEAD_S = 12.0
TRIAL_EFFECTIVE_FLOPS = 2.0e14


def compute_params(shape):
    """Parameters a token's matmuls touch: the layers' projections and the LM head."""
    h, hd = shape["hidden"], shape["head_dim"]
    attn = h * hd * (2 * shape["heads"] + 2 * shape["kv_heads"])
    mlp = 3 * h * shape["intermediate"]
    return shape["layers"] * (attn + mlp) + shape["vocab"] * h


def step_flops(arm):
    """Forward, backward (and the recompute under checkpointing) of one step, matmuls and attention."""
    s = arm["shape"]
    tokens = arm["batch"] * arm["seq"]
    dense = 2.0 * compute_params(s) * tokens
    attn = 2.0 * arm["batch"] * arm["seq"] ** 2 * s["heads"] * s["head_dim"] * s["layers"]  # causal
    backward = (2.0 if arm["mode"] == "full" else 1.0) * dense + 2.5 * attn
    recompute = dense + attn if arm["gradient_checkpointing"] else 0.0
    return dense + attn + backward + recompute


def estimate_trial_seconds(trial):
    """(wall seconds of one trial alone, its GPU compute seconds)."""
    arm = trial["arm"]
    steps = len(trial["lengths"]) if trial.get("lengths") else TRIAL_STEPS  # a loop: at most S each step
    gpu = steps * step_flops(arm) / TRIAL_EFFECTIVE_FLOPS
    build = compute_params(arm["shape"]) / 1e9  # about a second per billion parameters
    return TRIAL_OVERHEAD_S + build + gpu, gpu


def trials_plan(trials, jobs, cap):
    """What --list prints about a trial file: counts and the scheduler's estimated wall time."""
    budgets = [t["budget_bytes"] for t in trials]
    est = [estimate_trial_seconds(t) for t in trials]
    makespan, _ = simulate_schedule(budgets, [e[0] for e in est], jobs, cap)
    return {
        "trials": len(trials),
        "cases": len({t["case"] for t in trials}),
        "models": sorted({t["arm"]["model"] for t in trials}),
        "modes": sorted({t["arm"]["mode"] + (" gc" if t["arm"]["gradient_checkpointing"] else "") for t in trials}),
        "alloc_confs": sorted({t["alloc_conf"] or "default" for t in trials}),
        "budget_gib": [min(budgets) / GIB, max(budgets) / GIB],
        "jobs": jobs, "gpu_share_bytes": cap,
        "estimated_makespan_s": round(makespan, 1),
        "estimated_gpu_compute_s": round(sum(e[1] for e in est), 1),
        "estimated_serial_s": round(sum(e[0] for e in est), 1),
    }


# What run_steps records besides the phases, copied into a trial row as run_arm copies it.
TRIAL_RES_KEYS = ("optimizer", "batch_bytes", "grad_bytes", "grad_dtypes", "optimizer_state_bytes", "logits_dtype")


def trial_row(trial):
    """A trial's row with every field present: the trial's own, the rest None until measured."""
    row = {"kind": "trial", "trial_index": trial["index"], "case": trial["case"], "reported": trial["reported"],
           "stack_profile": trial.get("stack", "hf-peft")}
    row.update(arm_fields(trial["arm"]))
    row.update({
        "budget_bytes": trial["budget_bytes"], "alloc_conf": trial["alloc_conf"],
        "steps_run": len(trial["lengths"]) if trial.get("lengths") else TRIAL_STEPS,
        "lengths": trial.get("lengths"), "realised_lengths": None,
        "fraction": None, "allowed_bytes": None, "gpu_total_memory": None, "alloc_conf_env": None,
        "outcome": None, "error": None, "warning": None, "failed_phase": None, "oom_phase": None, "oom_step": None,
        "oom_message": None, "oom_tried_to_allocate_bytes": None, "oom_allocated_by_pytorch_bytes": None,
        "oom_reserved_unallocated_bytes": None, "oom_allowed_bytes": None, "oom_device_free_bytes": None,
        "oom_cause": None, "peak_at_error": None, "reserved_peak_at_error": None,
        "steps": [], "steps_completed": 0, "allocated_peak": None, "reserved_peak": None,
        "context_allocated": None, "build_allocated_peak": None, "build_reserved_peak": None,
        "weights_allocated": None, "reserved_after_build": None, "reserved_at_end": None,
        "num_alloc_retries": None, "num_ooms": None, "segments": None, "expandable_segments_seen": None,
        "realised_seq": None, "losses": [], "phases": {}, "build": None, "wall_seconds": None, "stack": None,
    })
    row.update({k: None for k in TRIAL_RES_KEYS})
    return row


def finish_trial_row(row, res, at_error):
    """Fills the step fields of a trial row from run_steps' res (no torch)."""
    row["phases"] = res["phases"]
    steps = row["steps_run"]
    row["steps"] = step_peaks(res["phases"], steps, row["failed_phase"], at_error)
    row["steps_completed"] = sum(1 for s in row["steps"] if s["complete"])
    peaks = [s["allocated_peak"] for s in row["steps"] if s["allocated_peak"] is not None]
    reserved = [s["reserved_peak"] for s in row["steps"] if s["reserved_peak"] is not None]
    row["allocated_peak"] = max(peaks) if peaks else None
    row["reserved_peak"] = max(reserved) if reserved else None
    row["losses"] = [res.get("loss_step%d" % k) for k in range(1, steps + 1) if ("loss_step%d" % k) in res]
    row["realised_seq"] = res.get("realised_seq")
    row["realised_lengths"] = res.get("realised_lengths")
    for k in TRIAL_RES_KEYS:
        row[k] = res.get(k)
    if row["lengths"]:
        if row["outcome"] == "ok" and row["realised_lengths"] != row["lengths"]:
            row["outcome"] = "error"
            row["error"] = "realised lengths %s != requested %s" % (row["realised_lengths"], row["lengths"])
    elif row["outcome"] == "ok" and row["realised_seq"] != row["seq"]:
        row["outcome"] = "error"
        row["error"] = "realised seq %s != requested %d" % (row["realised_seq"], row["seq"])


def trial_child_main(args, trial):
    """One trial in this process (a child of run_trials): cap, warm up, build, three steps, one row."""
    global STACK, CONTEXT_ALLOCATED
    t0 = time.time()
    row = trial_row(trial)
    arm = trial["arm"]
    _import_stack()
    if not torch.cuda.is_available():
        log("error: no CUDA device visible")
        return 1
    torch.cuda.set_device(0)
    total = int(torch.cuda.get_device_properties(0).total_memory)
    fraction = budget_fraction(trial["budget_bytes"], total)
    torch.cuda.set_per_process_memory_fraction(fraction, 0)  # before anything is allocated
    gc.collect()
    gc.freeze()
    row.update({"fraction": fraction, "allowed_bytes": int(fraction * total), "gpu_total_memory": total,
                "alloc_conf_env": {k: os.environ.get(k) for k in ALLOC_CONF_ENV}})
    if trial["budget_bytes"] > total:
        row["warning"] = "budget_bytes exceeds the GPU's total memory; fraction clamped to 1.0"
    writer = JsonlWriter(args.out)
    STACK = collect_stack()
    row["stack"] = STACK
    res = {"phases": {}, "current": "warmup"}
    at_error = None
    model = None
    try:
        _before, CONTEXT_ALLOCATED, _ctx_reserved = warmup_context()
        row["context_allocated"] = CONTEXT_ALLOCATED
        res["current"] = "build"
        model, row["build"] = build_model(arm, arm["seq"])
        torch.cuda.synchronize()
        row["build_allocated_peak"] = int(torch.cuda.max_memory_allocated())
        row["build_reserved_peak"] = int(torch.cuda.max_memory_reserved())
        row["weights_allocated"] = alloc()
        row["reserved_after_build"] = int(torch.cuda.memory_reserved())
        row.update(param_summary(model))
        res["current"] = "input"  # the batch, before step 1's forward
        run_steps(model, arm, arm["shape"]["vocab"], 7, res, steps=row["steps_run"], lengths=trial.get("lengths"))
        row["outcome"] = "ok"
    except Exception as e:
        at_error = (_safe(lambda: int(torch.cuda.max_memory_allocated())),
                    _safe(lambda: int(torch.cuda.max_memory_reserved())))
        row["peak_at_error"], row["reserved_peak_at_error"] = at_error
        row["failed_phase"] = res.get("current")
        if is_oom(e):
            row["outcome"] = "oom"
            row["oom_phase"], row["oom_step"] = parse_failed_phase(row["failed_phase"])
            parsed = parse_oom_message(str(e))
            row["oom_message"] = parsed["message"]
            for key in ("tried_to_allocate_bytes", "allocated_by_pytorch_bytes", "reserved_unallocated_bytes",
                        "allowed_bytes", "device_free_bytes"):
                row["oom_" + key] = parsed[key]
            row["oom_cause"] = parsed["cause"]
        else:
            row["outcome"] = "error"
        row["error"] = ("OOM: " if row["outcome"] == "oom" else "") + err_text(e)
        drop_exception(e)
    finish_trial_row(row, res, at_error)
    row["num_alloc_retries"], row["num_ooms"] = _alloc_stats()
    row["reserved_at_end"] = _safe(lambda: int(torch.cuda.memory_reserved()))
    snapshot = _safe(torch.cuda.memory_snapshot, None)
    if snapshot is not None:
        row["segments"] = len(snapshot)
        row["expandable_segments_seen"] = any(bool(s.get("is_expandable")) for s in snapshot)
        wanted = "expandable_segments:true" in (trial["alloc_conf"] or "").lower()
        if snapshot and row["expandable_segments_seen"] != wanted:
            row["warning"] = ((row["warning"] + "; ") if row["warning"] else "") + (
                "alloc_conf %r but the allocator's segments are %sexpandable" % (
                    trial["alloc_conf"], "" if row["expandable_segments_seen"] else "not "))
    row["wall_seconds"] = round(time.time() - t0, 3)
    writer.write(row)
    writer.close()
    log("trial %d: %s b=%d -> %s, allocated %s GiB, reserved %s GiB, %.1fs" % (
        trial["index"], trial["case"], arm["batch"], row["outcome"], gib(row["allocated_peak"]),
        gib(row["reserved_peak"]), row["wall_seconds"]))
    del model
    return 0


def probe_command(vramfit, trial):
    """The `vramfit probe` command line that runs a libtorch trial: the Probe's reference step, built
    and run twice in a fresh process under --budget (c10's setMemoryFraction(budget / total))."""
    arm = trial["arm"]
    cmd = [vramfit, "probe", "--stack", "libtorch", "--model", arm["model"], "--batch", str(arm["batch"]),
           "--seq", str(arm["seq"]), "--mode", arm["mode"], "--budget", "%dB" % trial["budget_bytes"], "--json"]
    if arm["mode"] == "lora":
        cmd += ["--lora-rank", str(arm["lora_rank"]), "--lora-targets", targets_text(arm["lora_targets"])]
    if arm["gradient_checkpointing"]:
        cmd.append("--grad-ckpt")
    if arm["logits_retained"]:
        cmd.append("--logits-retained")
    return cmd


def probe_trial_row(trial, probe_row, stderr_tail):
    """A trial row from `vramfit probe --json`'s row (None when it printed none)."""
    row = trial_row(trial)
    row["steps_run"] = 2  # the Probe runs two steps
    if probe_row is None:
        row["outcome"] = "error"
        row["error"] = "vramfit probe printed no row: " + " ".join(stderr_tail.split())[-400:]
        return row
    row["outcome"] = probe_row.get("outcome")
    row["stack"] = probe_row.get("stack")
    row["fraction"] = probe_row.get("fraction")
    total = (probe_row.get("stack") or {}).get("total_memory")
    row["gpu_total_memory"] = total
    if total and row["fraction"] is not None:
        row["allowed_bytes"] = int(row["fraction"] * total)
    row["alloc_conf_env"] = {k: os.environ.get(k) for k in ALLOC_CONF_ENV}
    row["build_allocated_peak"] = probe_row.get("build_allocated_peak")
    row["build_reserved_peak"] = probe_row.get("build_reserved_peak")
    row["reserved_peak"] = probe_row.get("reserved_peak")
    row["realised_seq"] = probe_row.get("realised_seq")
    phases = probe_row.get("phases") or {}
    row["steps"] = [{"step": k, "allocated_peak": phases["step%d" % k]["peak"],
                     "reserved_peak": phases["step%d" % k].get("reserved"), "complete": True}
                    for k in (1, 2) if row["outcome"] == "ok" and ("step%d" % k) in phases]
    row["steps_completed"] = len(row["steps"])
    if row["steps"]:
        row["allocated_peak"] = max(s["allocated_peak"] for s in row["steps"])
    if row["outcome"] == "oom":
        parsed = parse_oom_message(probe_row.get("oom_message") or "")
        row["oom_message"] = parsed["message"]
        for key in ("tried_to_allocate_bytes", "allocated_by_pytorch_bytes", "reserved_unallocated_bytes",
                    "allowed_bytes", "device_free_bytes"):
            row["oom_" + key] = parsed[key]
        row["oom_cause"] = parsed["cause"]
        row["error"] = probe_row.get("error")
        row["reserved_peak_at_error"] = probe_row.get("reserved_peak")
    elif row["outcome"] != "ok":
        row["outcome"] = "error"
        row["error"] = "unexpected probe row: outcome %r" % (probe_row.get("outcome"),)
    return row


def probe_trial_main(args, trial):
    """One libtorch trial (a child of run_trials): `vramfit probe` in a process of its own."""
    t0 = time.time()
    if not args.vramfit:
        log("error: a libtorch trial needs --vramfit PATH (a build with the probe)")
        return 2
    proc = subprocess.run(probe_command(args.vramfit, trial), capture_output=True, text=True,
                          env=trial_env(os.environ, trial["alloc_conf"]))
    rows = []
    for line in proc.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    row = probe_trial_row(trial, rows[0] if rows else None, proc.stderr[-600:])
    row["process_exit_probe"] = proc.returncode
    row["wall_seconds"] = round(time.time() - t0, 3)
    writer = JsonlWriter(args.out)
    writer.write(row)
    writer.close()
    log("trial %d: %s b=%d -> %s, allocated %s GiB, reserved %s GiB, %.1fs" % (
        trial["index"], trial["case"], trial["arm"]["batch"], row["outcome"], gib(row["allocated_peak"]),
        gib(row["reserved_peak"]), row["wall_seconds"]))
    return 0


def run_trials(args, trials, child_cmd=None):
    """--trials: every trial in a child process of its own, at most args.jobs at a time and the
    running trials' budgets summing to at most args.gpu_share_bytes; rows written as trials end.
    child_cmd(i, out) is the child's command line (this script with --trial-index i; test_trials.py
    passes a stand-in). Needs no torch here."""
    import signal
    import tempfile
    here = os.path.abspath(__file__)
    path = os.path.abspath(args.trials)
    if child_cmd is None:
        def child_cmd(i, out):
            vramfit = ["--vramfit", os.path.abspath(args.vramfit)] if args.vramfit else []
            return [sys.executable, here, "--trials", path, "--trial-index", str(i), "--out", out] + vramfit
    tmp = tempfile.mkdtemp(prefix="hf-trials-")
    cap = args.gpu_share_bytes
    budgets = [t["budget_bytes"] for t in trials]
    pending = schedule_order(budgets)
    running = {}
    counts = {o: 0 for o in OUTCOMES}
    t_start = time.time()
    writer = JsonlWriter(args.out)
    writer.write({"kind": "trials", "file": args.trials, "trials": len(trials), "jobs": args.jobs,
                  "gpu_share_bytes": cap, "steps": TRIAL_STEPS, "budget_s": args.budget_s,
                  "trial_timeout_s": args.trial_timeout_s})
    log("trials: %d from %s, %d at a time, budgets summing to at most %.1f GB" % (
        len(trials), args.trials, args.jobs, cap / 1e9))

    def emit(row):
        counts[row["outcome"]] += 1
        writer.write(row)
        n = sum(counts.values())
        log("[%d/%d] %-58s b=%-3d %-7s alloc %s reserved %s GiB%s" % (
            n, len(trials), row["case"][:58], row["batch"], row["outcome"], gib(row.get("allocated_peak")),
            gib(row.get("reserved_peak")),
            ("  " + str(row["error"])[:160]) if row["outcome"] == "error" else ""))

    def start(i):
        t = trials[i]
        out = os.path.join(tmp, "trial-%d.jsonl" % i)
        err = open(os.path.join(tmp, "trial-%d.err" % i), "w+", encoding="utf-8")
        cmd = child_cmd(i, out)
        peers = [r["budget"] for r in running.values()]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=trial_env(os.environ, t["alloc_conf"]),
                                start_new_session=True)
        running[i] = {"proc": proc, "t0": time.time(), "out": out, "err": err, "budget": t["budget_bytes"],
                      "peers": len(peers), "share": sum(peers) + t["budget_bytes"], "timed_out": False}

    def finish(i):
        r = running.pop(i)
        rc = r["proc"].returncode
        r["err"].seek(0)
        err_tail = r["err"].read()[-600:].strip()
        r["err"].close()
        rows = []
        if os.path.exists(r["out"]):
            with open(r["out"], encoding="utf-8") as f:
                for line in f:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
        mine = [x for x in rows if x.get("kind") == "trial"]
        if mine:
            row = mine[0]
        else:
            row = trial_row(trials[i])
            row["outcome"] = "error"
            row["error"] = ("timed out after %.0fs" % args.trial_timeout_s if r["timed_out"] else
                            "child exited %s" % rc) + (": " + " ".join(err_tail.split()) if err_tail else "")
            row["wall_seconds"] = round(time.time() - r["t0"], 3)
        row.update({"process_exit": rc, "started_s": round(r["t0"] - t_start, 3),
                    "ended_s": round(time.time() - t_start, 3), "peers_at_start": r["peers"],
                    "gpu_share_at_start_bytes": r["share"]})
        emit(row)

    try:
        while pending or running:
            while pending:
                if args.budget_s and time.time() - t_start > args.budget_s:
                    for i in pending:
                        row = trial_row(trials[i])
                        row.update({"outcome": "skipped", "error": "skipped: --budget-s exceeded"})
                        emit(row)
                    pending = []
                    break
                pos = pick_next([budgets[i] for i in pending], [r["budget"] for r in running.values()],
                                args.jobs, cap)
                if pos is None:
                    break
                start(pending.pop(pos))
            ended = []
            for i, r in running.items():
                if r["proc"].poll() is None and args.trial_timeout_s and time.time() - r["t0"] > args.trial_timeout_s:
                    r["timed_out"] = True
                    try:
                        os.killpg(r["proc"].pid, signal.SIGKILL)  # the child's own session: it and its children
                    except OSError:
                        pass
                    r["proc"].wait()
                if r["proc"].poll() is not None:
                    ended.append(i)
            for i in ended:
                finish(i)
            if not ended:
                time.sleep(0.2)
    finally:
        for r in running.values():  # only on an exception (e.g. ^C): stop the children this run started
            try:
                os.killpg(r["proc"].pid, signal.SIGKILL)
            except OSError:
                pass
    wall = round(time.time() - t_start, 3)
    writer.write(dict({"kind": "end", "trials": len(trials), "wall_seconds": wall}, **counts))
    writer.close()
    log("%d trials in %.1fs: %s" % (len(trials), wall, ", ".join("%d %s" % (counts[o], o) for o in OUTCOMES)))
    return 0


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def load_arms_file(path, for_max_batch):
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not data:
        raise ArmSpecError("%s must hold a non-empty JSON list of arm objects" % path)
    return [normalize_arm(x, for_max_batch=for_max_batch) for x in data]


def quick_subset(arms):
    seen = set()
    out = []
    for a in arms:
        k = group_key(a)
        if k not in seen:
            seen.add(k)
            out.append(a)
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Measure the GPU memory of real HF transformers + PEFT training steps (two steps per "
                    "arm, per-phase peaks from torch.cuda) and write JSON Lines.  Needs one CUDA GPU, "
                    "torch, transformers and peft; no network (models are built from config with random "
                    "weights).",
        epilog="Row kinds: stack, context, step (one per arm and repeat), max_batch, end.  Progress goes to "
               "stderr.  Exit status is non-zero only for a usage error (2) or a harness bug (1); an arm's "
               "own failure (e.g. OOM) is a row with an error field.  "
               "Example: PYTHONUNBUFFERED=1 python3 tests/validation/hf_harness.py --out hf.jsonl --max-batch "
               "--budget-s 540")
    p.add_argument("--out", required=True, help="output JSONL path (overwritten)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--plan", default="full", choices=sorted(PLANS),
                     help="built-in plan: full (88 arms, the default) or smoke (3 tiny arms)")
    src.add_argument("--arms", metavar="FILE.json",
                     help="JSON list of arm objects instead of a plan; fields: model (preset: %s) or "
                          "shape {%s} + arch (llama|qwen2|qwen3|mistral); mode lora|full; lora_rank; lora_targets "
                          "(\"q_proj,v_proj\", a list, or \"all-linear\"); gradient_checkpointing; "
                          "logits_retained; batch; seq" % (", ".join(PRESETS), ", ".join(SHAPE_KEYS)))
    src.add_argument("--trials", metavar="FILE.json",
                     help="fit trials instead of a plan: a JSON list of arms, each with budget_bytes and optional "
                          "alloc_conf (a PYTORCH_CUDA_ALLOC_CONF string, e.g. \"expandable_segments:True\"), case "
                          "and reported (\"ok\"/\"oom\"); each runs in a fresh process capped with "
                          "set_per_process_memory_fraction(budget / total) from its start: build, then %d steps; "
                          "one \"trial\" row each, outcome ok / oom / error. With --list: the trials and an "
                          "estimate of the wall time" % TRIAL_STEPS)
    p.add_argument("--repeats", type=int, default=1, help="run the whole plan N times (default 1)")
    p.add_argument("--first-repeat", type=int, default=0, metavar="K",
                   help="number the repeats from K (default 0), to add repeats to an earlier run's")
    p.add_argument("--max-batch", action="store_true",
                   help="also find the largest batch that runs two steps under a memory cap, for the plan's "
                        "max-batch configurations (full: 4, smoke: 1; --arms uses full's)")
    p.add_argument("--max-batch-arms", metavar="FILE.json",
                   help="JSON list of max-batch configurations (arm fields without batch, plus cap_bytes) "
                        "replacing the built-in ones; implies --max-batch")
    p.add_argument("--quick", action="store_true",
                   help="only the first arm of each model group (one build, one arm per group), and only "
                        "the first max-batch configuration: a fast end-to-end check")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="soft wall-time budget in seconds: arms and max-batch searches not started when it "
                        "is exceeded are written as skipped rows (default 0 = no budget)")
    p.add_argument("--max-batch-config-s", type=float, default=90.0,
                   help="stop one max-batch search after this many seconds (marked truncated; default 90)")
    p.add_argument("--list", action="store_true", help="print the selected arms as JSON and exit (no GPU needed)")
    p.add_argument("--isolate", type=int, default=0, metavar="J",
                   help="run every arm in a process of its own, as a trainer runs it (build, then the steps; "
                        "no probe forward, no emptied cache in between), J processes at a time (they share "
                        "the GPU; each process's peaks are its own). Default 0: the arms of a model share "
                        "one process and one build. Max-batch searches then run in one more process.")
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="J",
                   help="--trials: trial processes at a time (default 1)")
    p.add_argument("--gpu-share-bytes", type=float, default=None, metavar="BYTES",
                   help="--trials: the running trials' budget_bytes sum to at most this (default %.0f GB, at most "
                        "70%%%% of GPU 0's memory; a trial over it runs alone)" % (DEFAULT_GPU_SHARE_BYTES / 1e9))
    p.add_argument("--trial-timeout-s", type=float, default=300.0, metavar="S",
                   help="--trials: kill a trial process after this many seconds; its row is an error "
                        "(default 300; 0 = none)")
    p.add_argument("--vramfit", metavar="PATH",
                   help="--trials: the vramfit executable (built with the probe) that runs the trials whose "
                        "stack is \"libtorch\" (`vramfit probe --budget ... --json`, each in a fresh process)")
    p.add_argument("--arm-index", metavar="PLAN,REPEAT", help=argparse.SUPPRESS)  # an --isolate child
    p.add_argument("--trial-index", type=int, metavar="I", help=argparse.SUPPRESS)  # a --trials child
    p.add_argument("--max-batch-only", action="store_true", help=argparse.SUPPRESS)  # an --isolate child
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    if args.first_repeat < 0:
        p.error("--first-repeat must be >= 0")
    if args.isolate < 0:
        p.error("--isolate must be >= 0")
    if args.trials:
        if args.max_batch or args.max_batch_arms or args.isolate or args.quick or args.repeats != 1 or \
                args.first_repeat or args.arm_index is not None:
            p.error("--trials takes none of --max-batch, --max-batch-arms, --isolate, --quick, --repeats, "
                    "--first-repeat")
        if args.jobs < 1:
            p.error("-j/--jobs must be >= 1")
        if args.gpu_share_bytes is None:
            args.gpu_share_bytes = gpu_share_default()
        if not args.gpu_share_bytes > 0:
            p.error("--gpu-share-bytes must be > 0")
        if args.trial_timeout_s < 0:
            p.error("--trial-timeout-s must be >= 0")
    elif args.trial_index is not None:
        p.error("--trial-index needs --trials")
    if args.arm_index is not None:
        try:
            args.arm_index = tuple(int(x) for x in args.arm_index.split(","))
            if len(args.arm_index) != 2 or min(args.arm_index) < 0:
                raise ValueError
        except ValueError:
            p.error("--arm-index takes PLAN,REPEAT (two integers >= 0)")
    return args, p


def run_isolated(args, arms, mb):
    """--isolate: each arm (and repeat) in a child process of this script, args.isolate at a time;
    the children's rows are merged into args.out in plan order (the first child's stack and context
    rows once), then the max-batch searches run in one more child. Needs no torch here."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    here = os.path.abspath(__file__)
    tmp = tempfile.mkdtemp(prefix="hf-isolate-")
    reps = range(args.first_repeat, args.first_repeat + args.repeats)
    jobs = [(rep, i, a) for rep in reps for i, a in enumerate(arms)]
    t0 = time.time()

    def spec(arm, keys):  # the arm as an --arms file gives it
        out = {k: arm[k] for k in keys if arm.get(k) is not None}
        if arm["model"] in PRESETS:
            out.pop("shape", None)
            out.pop("arch", None)
        else:
            out["name"] = out.pop("model")
        return out

    def child(tag, extra):
        out = os.path.join(tmp, tag + ".jsonl")
        cmd = [sys.executable, here, "--out", out] + extra
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rows = []
        if os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
        return p.returncode, p.stderr, rows

    def run_job(job):
        rep, i, arm = job
        if args.budget_s and time.time() - t0 > args.budget_s:
            return job, None, "skipped: --budget-s exceeded", []
        path = os.path.join(tmp, "arm-%d-%d.json" % (rep, i))
        with open(path, "w", encoding="utf-8") as f:
            json.dump([spec(arm, ARM_KEYS)], f)
        rc, err, rows = child("out-%d-%d" % (rep, i), ["--arms", path, "--arm-index", "%d,%d" % (i, rep)])
        return job, rc, err, rows

    writer = JsonlWriter(args.out)
    header = False
    n_rows = n_errors = 0
    done = {}
    nxt = 0
    with ThreadPoolExecutor(max_workers=args.isolate) as pool:
        for job, rc, err, rows in pool.map(run_job, jobs):  # in plan order
            rep, i, arm = job
            steps = [r for r in rows if r.get("kind") == "step"]
            if not header and rows:
                for r in rows:
                    if r.get("kind") in ("stack", "context"):
                        writer.write(r)
                header = True
            if not steps:
                row = {"kind": "step", "plan_index": i, "repeat": rep, "process": "own"}
                row.update(arm_fields(arm))
                row["error"] = err if rc is None else "child exited %s: %s" % (rc, (err or "").strip()[-400:])
                steps = [row]
            for r in steps:
                writer.write(r)
                n_rows += 1
                n_errors += 1 if r.get("error") else 0
                log("[%d/%d] %s -> first %s GiB, steady %s GiB%s" % (
                    n_rows, len(jobs), arm_summary(arm), gib(r.get("peak_first")), gib(r.get("peak_steady")),
                    ("  ERROR " + str(r["error"])[:200]) if r.get("error") else ""))
    mb_rows = []
    if args.max_batch:
        path = os.path.join(tmp, "max-batch.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump([spec(a, (ARM_KEYS | MAX_BATCH_EXTRA_KEYS) - {"batch"}) for a in mb], f)
        extra = ["--max-batch-only", "--max-batch-arms", path, "--max-batch-config-s", str(args.max_batch_config_s),
                 "--plan", "smoke"]
        rc, err, rows = child("max-batch", extra)
        mb_rows = [r for r in rows if r.get("kind") == "max_batch"]
        for r in mb_rows:
            writer.write(r)
            n_errors += 1 if r.get("error") else 0
        if rc != 0:
            log("max-batch child exited %s: %s" % (rc, (err or "").strip()[-400:]))
    writer.write({"kind": "end", "step_rows": n_rows, "max_batch_rows": len(mb_rows), "rows_with_error": n_errors,
                  "wall_seconds": round(time.time() - t0, 3), "process": "own", "isolate": args.isolate})
    writer.close()
    log("%d step rows (%d with an error) in %.1fs" % (n_rows, n_errors, time.time() - t0))
    return 0


def main(argv=None):
    global STACK, CONTEXT_ALLOCATED
    args, parser = parse_args(sys.argv[1:] if argv is None else argv)
    if args.trials:
        try:
            trials = load_trials_file(args.trials)
        except (ArmSpecError, OSError, ValueError) as e:
            parser.error(str(e))
        if not args.vramfit and any(t["stack"] == "libtorch" for t in trials) and not args.list:
            parser.error("--vramfit PATH is needed: %s has libtorch trials" % args.trials)
        if args.list:
            print(json.dumps({"trials": trials, "plan": trials_plan(trials, args.jobs, args.gpu_share_bytes)},
                             indent=1))
            return 0
        if args.trial_index is not None:
            if not 0 <= args.trial_index < len(trials):
                parser.error("--trial-index %d: the file has %d trials" % (args.trial_index, len(trials)))
            trial = trials[args.trial_index]
            if trial["stack"] == "libtorch":
                return probe_trial_main(args, trial)
            return trial_child_main(args, trial)
        return run_trials(args, trials)
    try:
        if args.arms:
            arms = load_arms_file(args.arms, for_max_batch=False)
            mb_raw = MAX_BATCH_FULL
        else:
            plan_fn, mb_raw = PLANS[args.plan]
            arms = [normalize_arm(a) for a in plan_fn()]
        if args.max_batch_arms:
            mb = load_arms_file(args.max_batch_arms, for_max_batch=True)
            args.max_batch = True
        else:
            mb = [normalize_arm(a, for_max_batch=True) for a in mb_raw]
    except (ArmSpecError, OSError, ValueError) as e:
        parser.error(str(e))
    if args.quick:
        arms = quick_subset(arms)
        mb = mb[:1]
    if args.list:
        print(json.dumps({"arms": arms, "max_batch": mb if args.max_batch else []}, indent=1))
        return 0

    if args.isolate and args.arm_index is None and not args.max_batch_only:
        return run_isolated(args, arms, mb)

    _import_stack()
    if not torch.cuda.is_available():
        log("error: no CUDA device visible")
        return 1
    torch.cuda.set_device(0)
    gc.collect()
    gc.freeze()  # the imported modules' objects stop costing every gc.collect()

    writer = JsonlWriter(args.out)
    runner = Runner(writer, args.budget_s, own_process=args.arm_index is not None)
    STACK = collect_stack()
    writer.write(dict({"kind": "stack"}, **STACK))
    log("stack: %s, %s GiB, driver %s, torch %s (CUDA %s), transformers %s, peft %s" % (
        STACK["gpu_name"], gib(STACK["gpu_total_memory"]), STACK["driver_version"], STACK["torch"],
        STACK["torch_cuda"], STACK["transformers"], STACK["peft"]))

    before, ctx, ctx_reserved = warmup_context()
    CONTEXT_ALLOCATED = ctx
    writer.write({"kind": "context", "allocated_before_warmup": before, "context_allocated": ctx,
                  "context_reserved": ctx_reserved,
                  "preferred_blas_library": STACK["preferred_blas_library"],
                  "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                  "TORCH_CUBLASLT_UNIFIED_WORKSPACE": os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE"),
                  "stack": STACK})
    log("context: %d bytes allocated after the cuBLAS warm-up (%d before), %d reserved" % (ctx, before, ctx_reserved))

    n_groups = len({group_key(a) for a in arms})
    log("plan: %d arms in %d model groups x %d repeat(s)%s" % (
        len(arms), n_groups, args.repeats, ("; then %d max-batch search(es)" % len(mb)) if args.max_batch else ""))
    if not args.max_batch_only:
        runner.run_plan(arms, args.repeats, args.arm_index, args.first_repeat)
    if args.max_batch:
        runner.run_max_batch(mb, STACK["gpu_total_memory"], args.max_batch_config_s)
    runner.print_summary()
    writer.write({"kind": "end", "step_rows": len(runner.rows), "max_batch_rows": len(runner.mb_rows),
                  "rows_with_error": runner.n_errors, "wall_seconds": round(time.time() - runner.t_start, 3),
                  "stack": STACK})
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
