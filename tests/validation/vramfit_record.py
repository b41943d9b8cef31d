#!/usr/bin/env python3
"""vramfit-record: record the step programs of your own stack (your GPU, torch, transformers,
PEFT) for your model's architecture, so that `vramfit predict --programs FILE` is exact there.

It builds small random-initialised models of the architecture in CONFIG (its attention biases,
tied head and head_dim; 4 and 6 layers at widths where no two request sizes collide, as
program_arms.py chooses them), runs each through the plain training loop of the hf-peft stack
(forward, loss, backward, AdamW, zero_grad; two steps) with the caching allocator's trace on, and
turns the traces into step programs (trace_program.py), each checked against the recording at the
other layer count. Every kind of step the built-in programs hold is recorded: LoRA on q_proj,v_proj,
on q_proj,k_proj,v_proj,o_proj and all-linear, and full fine-tuning, each plain, with kept logits
and with checkpointing: 24 small models (hidden 345, vocabulary 3001, 7 x 416 tokens). For
Qwen2.5-0.5B on an H100 it took 35 s, all twelve kinds verified (tests/data/recorded/). With
--optim sgd-momentum or sgd, and --lora-dropout P above 0, the same kinds are recorded with that
optimizer and that dropout (torch.optim.SGD lr 1e-4, momentum 0.9 or 0; PEFT's nn.Dropout before
each adapter): run it once per combination your loops use.

With --step FILE.py the models run your own training step (a function in that file; see --help)
instead of the plain loop, and the file written holds your step's programs: give it to vramfit
with --programs, and the kinds you recorded are predicted for your loop. With --step trainer they
run transformers.Trainer's own step (bf16 autocast, its default optimizer, clipping at 1.0,
accumulation 1) over weights of --weights (bf16, or fp32 under autocast), and the file is the
hf-trainer stack's: predict with --stack hf-trainer --precision bf16 --weights W --programs FILE. Kinds the
conversion rejects are left out of the file (exit 1), and take the closed form.

Usage:
  vramfit-record --config path/to/config.json --out my.programs
  vramfit-record --config path/to/config.json --out trainer.programs --step trainer --weights fp32
  vramfit predict --config path/to/config.json --programs my.programs ...
  vramfit-record --config CONFIG --out FILE --from-traces TRACES.jsonl[.gz]   # convert only, no GPU

--from-traces takes traces recorded before (trace_capture.py --marks, or --keep-traces of an
earlier run) and only converts those of CONFIG's kinds. The Probe's LibTorch step is recorded with
`vramfit probe --trace-out` instead (trace_program.py --stack libtorch converts it).
"""
import argparse, gzip, json, os, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import program_arms  # noqa: E402  (no torch at import)
import trace_program  # noqa: E402

LAYERS = (4, 6)
OPTIMIZERS = trace_program.H.OPTIMIZERS  # hf_harness.py's names (it imports no torch until asked)
KINDS_OF_STEP = [(mode, targets, gc, ret) for mode, targets in program_arms.MODES for gc, ret in program_arms.VARIANTS]


class RecordError(Exception):
    """Bad input: the message names the config key or flag."""


def architecture(config):
    """(arch, tied, head_dim) of a config.json as the programs know them: 'qwen2' (q/k/v biases) or
    'llama' (none; Mistral too), whether the head is tied, and head_dim (64 or 128)."""
    model_type = config.get("model_type")
    if model_type in ("llama", "mistral"):
        if config.get("attention_bias") or config.get("mlp_bias"):
            raise RecordError("config.json: attention_bias/mlp_bias: Llama with biases is not a kind of step the "
                              "programs hold (q/k/v biases: qwen2; none: llama)")
        arch = "llama"
    elif model_type == "qwen2":
        arch = "qwen2"
    else:
        raise RecordError("config.json: model_type: %r is not recorded (llama, mistral, qwen2)" % (model_type,))
    for key in ("hidden_size", "num_attention_heads"):
        if not isinstance(config.get(key), int) or isinstance(config.get(key), bool) or config[key] < 1:
            raise RecordError("config.json: %s: must be a positive integer, got %r" % (key, config.get(key)))
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if head_dim not in (64, 128):
        raise RecordError("config.json: head_dim: the programs are used at head_dim 64 and 128 only, got %d"
                          % head_dim)
    return arch, bool(config.get("tie_word_embeddings", False)), head_dim


TRAINER = "trainer"  # --step trainer: transformers.Trainer's own step (trace_capture.py's Trainer arms)
WEIGHTS = ("bf16", "fp32")


def plan(config, optim="adamw", lora_dropout=0.0, step_file=None, weights=None):
    """The arms to record for CONFIG: every kind of step at 4 and 6 layers, with the optimizer
    `optim` and, on the LoRA kinds, dropout `lora_dropout` (full fine-tuning has no adapters). With
    `step_file` (a user's train_step, hf_harness.load_step) the arms run that step, and the kept-logits
    kinds are left out: whether logits outlive the forward is the user's step's own doing. With
    step_file "trainer", the Trainer's step over `weights` (bf16 or fp32), its default optimizer
    (fused AdamW), no dropout; kept logits left out too."""
    arch, tied, head_dim = architecture(config)
    if weights is not None and step_file != TRAINER:
        raise RecordError("--weights: only the Trainer's step (--step trainer) runs fp32 weights under autocast")
    if step_file == TRAINER:
        if weights not in WEIGHTS:
            raise RecordError("--weights: must be one of %s, got %r" % (", ".join(WEIGHTS), weights))
        if optim != "adamw" or lora_dropout:
            raise RecordError("--step trainer: the Trainer's step runs its default optimizer (fused AdamW) "
                              "without dropout; --optim and --lora-dropout do not apply")
        return [dict(program_arms.arm(arch, tied, mode, targets, layers, head_dim, gc, False), trainer=True,
                     weights=weights)
                for layers in LAYERS for mode, targets, gc, ret in KINDS_OF_STEP if not ret]
    if optim not in OPTIMIZERS:
        raise RecordError("--optim: must be one of %s, got %r" % (", ".join(OPTIMIZERS), optim))
    if not 0 <= lora_dropout < 1:  # NaN too
        raise RecordError("--lora-dropout: must be in [0, 1), got %r" % (lora_dropout,))
    if step_file is not None and not os.path.isfile(step_file):
        raise RecordError("--step: %s is not a file" % step_file)
    arms = [program_arms.arm(arch, tied, mode, targets, layers, head_dim, gc, ret, optim,
                             lora_dropout if mode == "lora" else 0.0)
            for layers in LAYERS for mode, targets, gc, ret in KINDS_OF_STEP if not (step_file and ret)]
    for a in arms if step_file else ():
        a["step_file"] = os.path.abspath(step_file)
    return arms


def kind_of(arm):
    """An arm's kind as trace_program.py groups them, plus its head_dim."""
    return trace_program.variant_key(arm), arm["shape"]["head_dim"]


def capture(arms, out_dir, python):
    """Runs trace_capture.py --marks over the arms in one process (as the built-in programs were
    recorded), printing its line per arm as progress."""
    cmd = [python, os.path.join(HERE, "trace_capture.py"), "--marks", "--out", out_dir]
    cmd += [json.dumps(a, separators=(",", ":")) for a in arms]
    print("vramfit-record: recording %d small models (4 and 6 layers) on this GPU" % len(arms), flush=True)
    t0 = time.time()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as p:
        for line in p.stdout:
            if line.startswith("arm "):
                n = int(line.split(":")[0].split()[1]) + 1
                print("  [%d/%d, %.0f s] %s" % (n, len(arms), time.time() - t0, line.strip()), flush=True)
    if p.returncode != 0:
        raise RecordError("trace_capture.py failed (exit %d); its error is above" % p.returncode)


def join_traces(trace_dir, count, out_path):
    """DIR/trace-0..count-1.jsonl (a stack row and a trace row each) as one file: one stack row, then
    the trace rows."""
    with gzip.open(out_path, "wt") as out:
        for n in range(count):
            with open(os.path.join(trace_dir, "trace-%d.jsonl" % n)) as f:
                rows = [json.loads(l) for l in f]
            for r in rows:
                if r.get("kind") == "stack" and n > 0:
                    continue
                out.write(json.dumps(r, separators=(",", ":")) + "\n")


def select_traces(traces_path, arms, out_path):
    """The rows of TRACES (recorded before) of the arms' kinds, with its stack row."""
    wanted = {kind_of(a) for a in arms}
    opener = gzip.open if traces_path.endswith(".gz") else open
    kept = 0
    with opener(traces_path, "rt") as f, gzip.open(out_path, "wt") as out:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == "trace" and kind_of(row["arm"]) not in wanted:
                continue
            kept += row.get("kind") == "trace"
            out.write(line if line.endswith("\n") else line + "\n")
    if kept == 0:
        raise RecordError("--from-traces: %s holds no trace of this config's kinds" % traces_path)
    return kept


def main(argv=None):
    about, usage = __doc__.split("Usage:\n")
    p = argparse.ArgumentParser(prog="vramfit-record", description=about.strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog="examples:\n" + usage)
    p.add_argument("--config", required=True, help="the model's Hugging Face config.json")
    p.add_argument("--out", required=True, help="the step-program file to write (e.g. my.programs)")
    p.add_argument("--from-traces", metavar="TRACES", help="convert these recorded traces; record nothing")
    p.add_argument("--keep-traces", metavar="FILE", help="also keep the recorded traces (jsonl.gz) here")
    p.add_argument("--python", default=sys.executable, help="the Python with torch, transformers and PEFT")
    p.add_argument("--optim", default="adamw", metavar="|".join(OPTIMIZERS),
                   help="the optimizer your loop runs: torch.optim.AdamW, or torch.optim.SGD with momentum "
                        "(0.9; one buffer per parameter) or without (default adamw)")
    p.add_argument("--lora-dropout", default="0", metavar="P",
                   help="your LoRA dropout, 0 to below 1 (default 0; above 0 each adapter keeps a mask)")
    p.add_argument("--step", metavar="FILE.py|trainer",
                   help="your own training step instead of the plain loop: a Python file defining "
                        "train_step(model, batch, optimizer, phase), each of its parts inside with phase('forward'), "
                        "'backward', 'optimizer', 'zero_grad', in order, and optionally make_optimizer(params); "
                        "--optim then names the optimizer it runs (an example: steps/fused_adamw_clip.py beside this script). "
                        "'trainer': transformers.Trainer's own step (give --weights)")
    p.add_argument("--weights", metavar="|".join(WEIGHTS),
                   help="with --step trainer: the weights' dtype (bf16, or fp32 under bf16 autocast)")
    a = p.parse_args(argv)
    try:
        try:
            with open(a.config) as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            raise RecordError("--config: cannot read %s: %s" % (a.config, e))
        if not isinstance(config, dict):
            raise RecordError("--config: %s is not a JSON object" % a.config)
        try:
            dropout = float(a.lora_dropout)
        except ValueError:
            raise RecordError("--lora-dropout: must be a number in [0, 1), got %r" % a.lora_dropout)
        arms = plan(config, a.optim, dropout, a.step, a.weights)
        with tempfile.TemporaryDirectory(prefix="vramfit-record-") as work:
            traces = a.keep_traces or os.path.join(work, "traces.jsonl.gz")
            if a.from_traces:
                kept = select_traces(a.from_traces, arms, traces)
                print("vramfit-record: %d traces of this config's kinds in %s" % (kept, a.from_traces), flush=True)
            else:
                capture(arms, work, a.python)
                join_traces(work, len(arms), traces)
            print("vramfit-record: checking each program against the other layer count and writing %s" % a.out,
                  flush=True)
            status = trace_program.main([traces, "--programs", a.out] +
                                        (["--stack", "hf_trainer"] if a.step == TRAINER else []))
    except (OSError, ValueError, RecordError) as e:
        print("vramfit-record: error: %s" % e, file=sys.stderr)
        return 2
    if status != 0:
        print("vramfit-record: some kinds were rejected (above); %s holds the others" % a.out, file=sys.stderr)
        return 1
    print("vramfit-record: wrote %s; use it with: vramfit predict --config %s%s --programs %s ..."
          % (a.out, a.config, " --stack hf-trainer --precision bf16 --weights %s" % a.weights if a.step == TRAINER else "",
             a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
