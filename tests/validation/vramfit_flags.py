"""The vramfit command-line flags of a harness arm's step (batch, seq, mode, LoRA and its dropout,
checkpointing, kept logits), shared by the harnesses that print the command a row checks."""


def step_flags(arm):
    flags = ["--batch", str(arm["batch"]), "--seq", str(arm["seq"]), "--mode", arm["mode"]]
    if arm["mode"] == "lora":
        flags += ["--lora-rank", str(arm["lora_rank"]), "--lora-targets", arm["lora_targets"]]
        if arm.get("lora_dropout"):
            flags += ["--lora-dropout", str(arm["lora_dropout"])]
    if arm["gradient_checkpointing"]:
        flags.append("--grad-ckpt")
    if arm["logits_retained"]:
        flags.append("--logits-retained")
    return flags
