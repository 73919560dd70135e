"""A tiny data-parallel trainer over the loader, shared by the DCP test and the soak drill: a next-token model
over token ids folded into BUCKETS classes, its model + optimizer as one DCP Stateful, and one gloo step."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.stateful import Stateful

BUCKETS = 257


class Trainer(Stateful):
    """Model + optimizer as one Stateful (torch's get/set_state_dict), the DCP tutorial's AppState."""

    def __init__(self, model, optim):
        self.model, self.optim = model, optim

    def state_dict(self):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        m, o = get_state_dict(self.model, self.optim)
        return {"model": m, "optim": o}

    def load_state_dict(self, state):
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.model, self.optim, model_state_dict=state["model"], optim_state_dict=state["optim"])


def tiny_model() -> torch.nn.Module:
    """Embedding + linear over BUCKETS classes (the caller seeds torch first)."""
    return torch.nn.Sequential(torch.nn.Embedding(BUCKETS, 8), torch.nn.Linear(8, BUCKETS))


def train_step(model: torch.nn.Module, optim: torch.optim.Optimizer, batch: dict, counter: torch.Tensor) -> float:
    """One data-parallel step on this rank's batch (token count, gradients and loss all-reduced over the process
    group): adds the global batch's tokens to `counter` and returns the global loss per target token."""
    logits = model(batch["input_ids"] % BUCKETS)
    labels = torch.where(batch["labels"] < 0, -100, batch["labels"] % BUCKETS)
    loss_sum = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
    n = torch.tensor([float(batch["loss_mask"].sum())])
    dist.all_reduce(n)
    optim.zero_grad()
    (loss_sum / n).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    optim.step()
    tokens = torch.tensor([int(batch["input_ids"].numel())])
    dist.all_reduce(tokens)
    counter += tokens
    loss = loss_sum.detach().clone()
    dist.all_reduce(loss)
    return float(loss / n)
