#!/usr/bin/env python3
"""Measure real HF transformers + PEFT fine-tuning steps under PyTorch FSDP2 and DDP, per rank.

The multi-GPU companion of hf_harness.py: the same models (built from config, random weights,
bf16, SDPA), the same arms (its plans, its arm files, its arm parsing, imported from it) and the
same step (`out = model(input_ids=ids, labels=ids.clone())`, `loss = out.loss`, `del out` unless
the logits are retained, `loss.backward()`, torch.optim.AdamW (lr 1e-4) `step()`,
`zero_grad(set_to_none=True)`, twice), run on every rank of a data-parallel group, each rank on
its own micro-batch of `batch` sequences, under two strategies:

- fsdp: FSDP2, `torch.distributed.fsdp.fully_shard` on every decoder layer, then on the root
  (the PEFT model for LoRA), as the FSDP2 docs recommend; default reshard_after_forward; no
  MixedPrecisionPolicy (the parameters are bf16 already, LoRA adapters fp32 as PEFT makes them).
  With --hybrid-shard K, a 2-D (replicate, shard) device mesh: HSDP, sharding within groups of K.
  vramfit: --sharding full (or hybrid:K).
- ddp: torch.nn.parallel.DistributedDataParallel with its defaults (gradient_as_bucket_view
  False). vramfit: --sharding none with --world-size N (N >= 2: on one rank vramfit's `none`
  means no DDP, while DDP on one rank still allocates its buckets).

Every phase of both steps records the rank's `torch.cuda.max_memory_allocated()` (reset right
before the phase), as hf_harness.py does.

Run it on one host with torchrun:

    torchrun --standalone --nproc-per-node 2 tests/validation/fsdp_harness.py --out fsdp.jsonl --plan smoke
    torchrun --standalone --nproc-per-node 8 tests/validation/fsdp_harness.py --out fsdp.jsonl --quick
    python3 tests/validation/fsdp_harness.py --out x.jsonl --plan smoke            # world size 1, one GPU
    torchrun --standalone --nproc-per-node 2 tests/validation/fsdp_harness.py --out x.jsonl \\
        --backend gloo --device cpu --arms tiny_arms.json                           # plumbing, no GPU
    python3 tests/validation/fsdp_harness.py --out x.jsonl --list                   # arms, no torch
    python3 tests/validation/fsdp_harness.py --out x.jsonl --backend fake --world-size 8 \
        --arms tests/validation/fsdp_fake_arms.json                                 # rank 0 of 8, one GPU

With --backend fake (PyTorch's fake process group) one process is rank 0 of --world-size ranks on
one GPU: real CUDA tensors, collectives that return at once (their outputs hold whatever memory
they were given), FSDP2's all-gather and reduce-scatter buffers still allocated. What it cannot
show: NCCL's own buffers and the overlap of communication with compute.

Output. Each rank writes its own file, OUT.rank<R>.jsonl, one JSON object per line, flushed as
it is written: a rank that runs out of memory leaves its row even when the other ranks then hang
in a collective waiting for it (which takes the run down after the process group's timeout).
After a clean run rank 0 merges the per-rank files into OUT: the stack rows first (one per
rank), then the step rows ordered by arm, strategy, repeat and rank, then one end row.

Row kinds: "stack" (one per rank: GPU, driver, torch/CUDA/NCCL/transformers/PEFT versions, the
world size, rank, backend and the NVLink-multicast switches), "step" (one per arm, strategy,
repeat and rank), "end". A step row holds the arm's fields (hf_harness.arm_fields), `strategy`,
`sharding` and `world_size` (vramfit's --sharding and --world-size for the row: with the arm's
fields, the step in vramfit's JSON schema, include/vramfit/json.hpp), `shard_group`, `rank`,
`local_rank`, `phases`
(`step1`/`step2` x `forward`/`backward`/`optimizer`/`zero_grad`, each
{before, peak, after, reserved_peak, seconds}), `peak_first`, `peak_steady`,
`weights_allocated` (after wrapping, before the optimizer exists), `context_allocated`, the
rank's local parameter, grad and optimizer-state bytes, `realised_seq`, `vramfit_args` (the
vramfit command line that predicts the row), `error`, `warning`, `stack`.

On the CPU (--device cpu) the allocator's statistics do not exist: peaks are null and only the
plumbing (process group, wrapping, two steps, files) is exercised.

Exit status: 2 for a usage error, 1 for a harness failure; an arm's own failure (an OOM) is a
row with `error` set.
"""

import os

# NVLink multicast (NVLS: NVLink SHARP on NVSwitch hosts) stays off, before torch or NCCL is
# loaded: NCCL's NVLS algorithms, torch's symmetric-memory multicast objects and NVSHMEM's NVLS
# support all create multicast objects on the NVSwitch fabric, and on the hosts this runs on that
# has taken all the host's GPUs out of service. Set unconditionally so that an inherited
# environment cannot turn it back on; the stack row records the values.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import gc  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import timedelta  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_harness as hf  # noqa: E402  (the model builders, plans and arm parsing; imports no torch)
from vramfit_flags import step_flags  # noqa: E402

torch = None  # set by import_stack()
dist = None

MULTICAST_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
STRATEGIES = ("fsdp", "ddp")


def log(rank, msg):
    print("[rank %d] %s" % (rank, msg), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Arguments and arms (no torch needed)
# --------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Measure per-rank GPU memory of HF transformers + PEFT training steps under PyTorch FSDP2 "
                    "and DDP (two steps per arm, per-phase peaks from torch.cuda) and write JSON Lines. Run it "
                    "under torchrun; without torchrun it runs as world size 1.",
        epilog="Each rank writes OUT.rank<R>.jsonl as it goes; rank 0 merges them into OUT after a clean run.")
    p.add_argument("--out", required=True, help="merged output JSONL path (per-rank files go next to it)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--plan", default="smoke", choices=sorted(hf.PLANS),
                     help="hf_harness.py's built-in plan: smoke (3 arms, the default) or full (88 arms)")
    src.add_argument("--arms", metavar="FILE.json", help="a JSON list of arm objects, as hf_harness.py --arms")
    p.add_argument("--strategies", default="fsdp,ddp",
                   help="comma-separated from fsdp, ddp (default both); each arm runs under each")
    p.add_argument("--hybrid-shard", type=int, default=0, metavar="K",
                   help="FSDP2 with a (replicate, shard) mesh sharding within groups of K ranks (HSDP); "
                        "K divides the world size (default 0: shard over every rank)")
    p.add_argument("--repeats", type=int, default=1, help="run the whole plan N times (default 1)")
    p.add_argument("--quick", action="store_true", help="only the first arm of each model group")
    p.add_argument("--backend", default="nccl", choices=("nccl", "gloo", "fake"),
                   help="process group backend; fake: PyTorch's fake process group, one process standing for "
                        "rank 0 of --world-size ranks on one GPU (collectives return at once, FSDP2 still "
                        "allocates their buffers)")
    p.add_argument("--world-size", type=int, default=1, metavar="N",
                   help="with --backend fake: the ranks rank 0 stands among (default 1)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cuda (one GPU per rank, LOCAL_RANK) or cpu (plumbing only: no memory statistics)")
    p.add_argument("--timeout-s", type=float, default=600.0,
                   help="process group timeout: a rank stuck in a collective (another rank failed) gives up "
                        "after this (default 600)")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="soft wall-time budget: arms not started when it is exceeded are written as skipped "
                        "(default 0 = none); rank 0 decides and broadcasts")
    p.add_argument("--list", action="store_true",
                   help="print the arms with their vramfit command lines as JSON and exit (no torch needed)")
    args = p.parse_args(argv)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    bad = [s for s in strategies if s not in STRATEGIES]
    if not strategies or bad:
        p.error("--strategies takes fsdp and/or ddp, got %r" % args.strategies)
    args.strategies = strategies
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    if args.hybrid_shard < 0:
        p.error("--hybrid-shard must be >= 1 (or 0 for none)")
    if args.device == "cpu" and args.backend == "nccl":
        p.error("--device cpu needs --backend gloo")
    if args.world_size < 1:
        p.error("--world-size must be >= 1")
    if args.world_size != 1 and args.backend != "fake":
        p.error("--world-size is for --backend fake (torchrun sets the world size otherwise)")
    if args.backend == "fake" and "WORLD_SIZE" in os.environ and os.environ["WORLD_SIZE"] != "1":
        p.error("--backend fake runs as one process: do not start it under torchrun")
    return args, p


def load_arms(args, parser):
    try:
        if args.arms:
            arms = hf.load_arms_file(args.arms, for_max_batch=False)
        else:
            arms = [hf.normalize_arm(a) for a in hf.PLANS[args.plan][0]()]
    except (hf.ArmSpecError, OSError, ValueError) as e:
        parser.error(str(e))
    if args.quick:
        arms = hf.quick_subset(arms)
    return arms


def vramfit_sharding(strategy, world_size, hybrid_shard):
    if strategy == "ddp":
        return "none"
    if hybrid_shard:
        return "hybrid:%d" % hybrid_shard
    return "full"


def vramfit_args(arm, strategy, world_size, hybrid_shard):
    """The vramfit command line whose prediction this row checks (hf-peft stack, steady-state peak)."""
    a = ["predict"]
    if arm["model"] in hf.PRESETS:
        a += ["--model", arm["model"]]
    else:
        a += ["--config", "<a config.json of shape %s>" % json.dumps(arm["shape"], sort_keys=True)]
    a += step_flags(arm)
    a += ["--stack", "hf-peft", "--world-size", str(world_size),
          "--sharding", vramfit_sharding(strategy, world_size, hybrid_shard), "--json"]
    return a


# --------------------------------------------------------------------------
# torch
# --------------------------------------------------------------------------

def import_stack():
    global torch, dist
    hf._import_stack()  # torch, transformers and peft, as the single-GPU harness imports them
    torch = hf.torch
    import torch.distributed as _dist
    dist = _dist


def fully_shard_fn():
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard  # torch 2.4, 2.5
    return fully_shard


def init_distributed(args):
    """Process group from torchrun's environment, or a world of one without it."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible (use --device cpu --backend gloo for the plumbing)")
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if args.backend == "fake":
        # torch.testing._internal.distributed.fake_pg: rank 0 of N in this process, as PyTorch's
        # test_fake_pg.py and torchtitan's memory estimation run FSDP.
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group(backend="fake", rank=0, world_size=args.world_size, store=FakeStore())
        return 0, args.world_size, 0, device
    kwargs = {"backend": args.backend, "timeout": timedelta(seconds=args.timeout_s)}
    if args.device == "cuda":
        kwargs["device_id"] = device  # binds NCCL's communicator to this GPU (torch >= 2.3)
    try:
        dist.init_process_group(**kwargs)
    except TypeError:
        kwargs.pop("device_id", None)
        dist.init_process_group(**kwargs)
    return rank, world, local, device


def make_mesh(world, hybrid_shard, device):
    from torch.distributed.device_mesh import init_device_mesh
    if hybrid_shard:
        if world % hybrid_shard:
            raise ValueError("--hybrid-shard %d does not divide the world size %d" % (hybrid_shard, world))
        return init_device_mesh(device.type, (world // hybrid_shard, hybrid_shard),
                                mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device.type, (world,))


def build_model(arm, device):
    """hf_harness.build_model on the GPU (the current device); on the CPU the same recipe."""
    if device.type == "cuda":
        return hf.build_model(arm, arm["seq"])
    from transformers import AutoModelForCausalLM
    cfg = hf.make_config(arm, arm["seq"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.config.use_cache = False
    if arm["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if arm["mode"] == "lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=arm["lora_rank"], lora_alpha=arm["lora_alpha"],
                                                 lora_dropout=arm["lora_dropout"],
                                                 target_modules=list(arm["lora_target_modules"]),
                                                 task_type="CAUSAL_LM"))
    model.train()
    return model, {"model_class": type(model).__name__}


def wrap(model, strategy, mesh, device):
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    fully_shard = fully_shard_fn()
    layers = hf.base_transformers_model(model).model.layers
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: embedding, final norm, lm_head (and PEFT's wrapper)
    return model


def local_bytes(t):
    if t is None:
        return 0
    if hasattr(t, "to_local"):  # a DTensor: this rank's shard
        t = t.to_local()
    return int(t.numel() * t.element_size())


def clean(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.synchronize()


def allocated(device):
    return int(torch.cuda.memory_allocated()) if device.type == "cuda" else None


def phase_begin(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = int(torch.cuda.memory_allocated())
        torch.cuda.reset_peak_memory_stats()
        return before, time.time()
    return None, time.time()


def phase_end(device, begin):
    before, t0 = begin
    if device.type == "cuda":
        torch.cuda.synchronize()
        return {"before": before, "peak": int(torch.cuda.max_memory_allocated()),
                "after": int(torch.cuda.memory_allocated()),
                "reserved_peak": int(torch.cuda.max_memory_reserved()), "seconds": round(time.time() - t0, 4)}
    return {"before": None, "peak": None, "after": None, "reserved_peak": None, "seconds": round(time.time() - t0, 4)}


def run_two_steps(model, arm, vocab, seed, device, res):
    """hf_harness.run_steps (two steps) on any device, recording this rank's local bytes."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    res["optimizer"] = hf.optimizer_info(optimizer, params)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    ids = torch.randint(0, vocab, (arm["batch"], arm["seq"]), device=device, dtype=torch.long, generator=gen)
    batch = {"input_ids": ids, "labels": ids.clone()}
    del ids, gen
    res["realised_seq"] = int(batch["input_ids"].shape[-1])
    retained = arm["logits_retained"]
    out = loss = None
    for k in (1, 2):
        ph = {}
        res["phases"]["step%d" % k] = ph
        res["current"] = "step%d.forward" % k
        b = phase_begin(device)
        out = model(**batch)
        loss = out.loss
        if not retained:
            out = None
        ph["forward"] = phase_end(device, b)
        res["current"] = "step%d.backward" % k
        b = phase_begin(device)
        loss.backward()
        ph["backward"] = phase_end(device, b)
        res["loss_step%d" % k] = float(loss.detach().float().item())
        if k == 1:
            res["grad_bytes"] = sum(local_bytes(p.grad) for p in params)
        loss = None
        res["current"] = "step%d.optimizer" % k
        b = phase_begin(device)
        optimizer.step()
        ph["optimizer"] = phase_end(device, b)
        out = None
        res["current"] = "step%d.zero_grad" % k
        b = phase_begin(device)
        optimizer.zero_grad(set_to_none=True)
        ph["zero_grad"] = phase_end(device, b)
    res["current"] = None
    res["optimizer_state_bytes"] = sum(local_bytes(t) for st in optimizer.state.values() for t in st.values()
                                       if torch.is_tensor(t) and t.dim() > 0)
    del optimizer, params, batch


def collect_stack(args, rank, world, local, device):
    if device.type == "cuda":
        stack = hf.collect_stack()  # GPU, driver, torch, CUDA, cuDNN, transformers, PEFT, SDPA switches
        stack["device_index"] = local
        stack["nccl"] = hf._safe(lambda: ".".join(str(v) for v in torch.cuda.nccl.version()))
    else:
        import platform
        import transformers
        import peft
        stack = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                 "python": platform.python_version(), "device": "cpu"}
    stack.update({"world_size": world, "rank": rank, "local_rank": local, "backend": args.backend,
                  "multicast_env": {k: os.environ.get(k) for k in MULTICAST_ENV},
                  "torchrun": "TORCHELASTIC_RUN_ID" in os.environ})
    return stack


# --------------------------------------------------------------------------
# Plan execution
# --------------------------------------------------------------------------

def over_budget(args, t_start, device):
    """Rank 0's clock decides, so that every rank skips the same arms."""
    flag = torch.tensor([1 if (args.budget_s and time.time() - t_start > args.budget_s) else 0],
                        device=device if args.backend == "nccl" else "cpu")
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def run(args, arms, rank, world, local, device):
    path = "%s.rank%d.jsonl" % (args.out, rank)
    w = hf.JsonlWriter(path)
    stack = collect_stack(args, rank, world, local, device)
    w.write(dict({"kind": "stack"}, **stack))
    context = None
    if device.type == "cuda":
        _, context, _ = hf.warmup_context()
    mesh = make_mesh(world, args.hybrid_shard, device) if "fsdp" in args.strategies else None
    t_start = time.time()
    n_rows = n_errors = 0
    for rep in range(args.repeats):
        for plan_index, arm in enumerate(arms):
            for strategy in args.strategies:
                row = {"kind": "step", "harness": "fsdp_harness", "plan_index": plan_index, "repeat": rep,
                       "strategy": strategy, "sharding": vramfit_sharding(strategy, world, args.hybrid_shard),
                       "world_size": world, "shard_group": (args.hybrid_shard or world) if strategy == "fsdp" else 1,
                       "rank": rank, "local_rank": local, "backend": args.backend, "device": device.type}
                row.update(hf.arm_fields(arm))
                row.update({"realised_seq": None, "error": None, "warning": None, "failed_phase": None,
                            "peak_at_error": None, "context_allocated": context,
                            "vramfit_args": vramfit_args(arm, strategy, world, args.hybrid_shard)})
                if strategy == "ddp" and world == 1:
                    row["warning"] = ("DDP on one rank allocates its buckets; vramfit's --sharding none on one rank "
                                      "means no DDP: compare at world size >= 2")
                t0 = time.time()
                res = {"phases": {}, "current": None}
                if over_budget(args, t_start, device):
                    row["error"] = "skipped: --budget-s exceeded"
                else:
                    model = None
                    try:
                        clean(device)
                        res["current"] = "build"
                        model, info = build_model(arm, device)
                        row["build"] = info
                        res["current"] = "wrap"
                        model = wrap(model, strategy, mesh, device)
                        res["current"] = None
                        clean(device)
                        row["weights_allocated"] = allocated(device)
                        row["local_param_bytes"] = sum(local_bytes(p) for p in model.parameters())
                        row["local_trainable_bytes"] = sum(local_bytes(p) for p in model.parameters()
                                                           if p.requires_grad)
                        run_two_steps(model, arm, arm["shape"]["vocab"], 1000 * rep + 17 * plan_index + rank,
                                      device, res)
                    except Exception as e:  # an OOM on this rank: the others may now hang (see the docstring)
                        row["error"] = ("OOM: " if hf.is_oom(e) else "") + hf.err_text(e)
                        row["failed_phase"] = res.get("current")
                        if device.type == "cuda":
                            row["peak_at_error"] = hf._safe(lambda: int(torch.cuda.max_memory_allocated()))
                        hf.drop_exception(e)
                    model = None
                    clean(device)
                    row["post_arm_allocated"] = allocated(device)
                for k in ("realised_seq", "optimizer", "grad_bytes", "optimizer_state_bytes", "loss_step1",
                          "loss_step2"):
                    row[k] = res.get(k, row.get(k))
                row["phases"] = res["phases"]
                row.update(hf.summarize_phases(res["phases"]) if device.type == "cuda" else
                           {"peak_first": None, "peak_steady": None})
                if row["realised_seq"] is not None and row["realised_seq"] != arm["seq"] and not row["error"]:
                    row["error"] = "realised seq %d != requested %d" % (row["realised_seq"], arm["seq"])
                row["wall_seconds"] = round(time.time() - t0, 3)
                row["stack"] = stack
                w.write(row)
                n_rows += 1
                n_errors += 1 if row["error"] else 0
                log(rank, "%s %s -> first %s GiB, steady %s GiB, %.1fs%s" % (
                    strategy, hf.arm_summary(arm), hf.gib(row.get("peak_first")), hf.gib(row.get("peak_steady")),
                    row["wall_seconds"], ("  ERROR " + row["error"]) if row["error"] else ""))
                dist.barrier()  # the next arm starts together on every rank
    w.write({"kind": "end", "rank": rank, "step_rows": n_rows, "rows_with_error": n_errors,
             "wall_seconds": round(time.time() - t_start, 3)})
    w.close()
    return path


def merge(out, world, ranks):
    """Rank 0: the per-rank files into one (`ranks` of them: 1 with the fake backend), stack rows
    first, then steps by arm, strategy, repeat, rank."""
    stacks, steps, ends = [], [], []
    for r in range(ranks):
        with open("%s.rank%d.jsonl" % (out, r), "r", encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                {"stack": stacks, "step": steps, "end": ends}.get(row.get("kind"), steps).append(row)
    order = {s: i for i, s in enumerate(STRATEGIES)}
    steps.sort(key=lambda r: (r["plan_index"], r["repeat"], order.get(r["strategy"], 9), r["rank"]))
    w = hf.JsonlWriter(out)
    for row in stacks + steps:
        w.write(row)
    w.write({"kind": "end", "world_size": world, "step_rows": len(steps),
             "rows_with_error": sum(1 for r in steps if r.get("error")), "per_rank": ends,
             "per_rank_files": sorted(glob.glob(out + ".rank*.jsonl"))})
    w.close()


def main(argv=None):
    args, parser = parse_args(sys.argv[1:] if argv is None else argv)
    arms = load_arms(args, parser)
    if args.list:
        world = args.world_size if args.backend == "fake" else int(os.environ.get("WORLD_SIZE", "1"))
        print(json.dumps({"arms": arms, "runs": [
            {"plan_index": i, "strategy": s, "vramfit_args": vramfit_args(a, s, world, args.hybrid_shard)}
            for i, a in enumerate(arms) for s in args.strategies]}, indent=1))
        return 0
    import_stack()
    rank, world, local, device = init_distributed(args)
    try:
        if args.hybrid_shard and world % args.hybrid_shard:
            parser.error("--hybrid-shard %d does not divide the world size %d" % (args.hybrid_shard, world))
        gc.collect()
        gc.freeze()
        log(rank, "world size %d, backend %s, device %s, %d arm(s) x %s" % (
            world, args.backend, device, len(arms), ",".join(args.strategies)))
        run(args, arms, rank, world, local, device)
        dist.barrier()
        if rank == 0:
            ranks = 1 if args.backend == "fake" else world
            merge(args.out, world, ranks)
            log(rank, "merged %d rank file(s) into %s" % (ranks, args.out))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
