"""A training step of one's own, as `vramfit-record --step` and hf_harness.py arms ("step_file") take
it: fused AdamW and gradient clipping at 1.0, the two things transformers' Trainer does by default
that the plain loop (foreach AdamW, no clipping) does not.

  vramfit-record --config config.json --step fused_adamw_clip.py --out mine.programs

train_step runs one step, each part inside `with phase(...)` in this order: forward, backward,
optimizer, zero_grad (vramfit marks and measures the parts there). make_optimizer is optional.
"""
import torch


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-4, fused=True)


def train_step(model, batch, optimizer, phase):
    with phase("forward"):
        loss = model(**batch).loss  # the output object goes here: no logits kept through backward
    with phase("backward"):
        loss.backward()
    loss = None
    with phase("optimizer"):
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], 1.0)
        optimizer.step()
    with phase("zero_grad"):
        optimizer.zero_grad(set_to_none=True)
