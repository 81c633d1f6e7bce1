"""Local update: the round's mini-batches, tau plain SGD steps, and evaluation.

Every draw derives from (run seed, server round, partition id): a seed gives bit-identical runs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)

if TYPE_CHECKING:
    from fedcgd_config.settings import TrainingSettings

#: Tags mixed into the seeds of the batch and dropout streams, and the evaluation's seed.
BATCH_STREAM, DROPOUT_STREAM, EVAL_STREAM = 0x42544348, 0x44524F50, 0x4556414C  # BTCH DROP EVAL
#: Evaluation batch size (memory only).
EVAL_BATCH_SIZE = 512


def compute_device(setting: str = "auto") -> torch.device:
    """The torch device a ``device`` setting names here (ValueError: a CUDA device not seen)."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(setting)
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.type == "cuda" and (device.index or 0) >= seen:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = "" if visible is None else f", CUDA_VISIBLE_DEVICES={visible!r}"
        allowed = ", ".join(['"auto"', '"cpu"'] + [f'"cuda:{i}"' for i in range(seen)])
        raise ValueError(
            f"run-config key 'device' = {setting!r}, but this process sees {seen} CUDA "
            f"device(s) (torch {torch.__version__}{hidden}); allowed here: {allowed}"
        )
    return device


def local_batches(
    seed: int,
    training: TrainingSettings,
    num_local: int,
    server_round: int,
    partition_id: int,
) -> list[npt.NDArray[np.int64]]:
    """Device v's tau batches of b local positions: a permutation drawn from (seed, round, v),
    read cyclically (batch t: [t b, (t+1) b); no repeat within a batch when b <= |D_v|)."""  # noqa: D205, D209
    tau, b = training.local_steps, training.batch_size
    rng = np.random.default_rng([seed, BATCH_STREAM, server_round, partition_id])
    order = rng.permutation(num_local).astype(np.int64)
    positions = np.arange(tau * b, dtype=np.int64) % num_local
    flat = order[positions]
    return [flat[t * b : (t + 1) * b] for t in range(tau)]


def dropout_seed(seed: int, server_round: int, partition_id: int) -> int:
    """The 63-bit seed of a device's draws in a round (dropout, the model's own draws)."""
    state = np.random.SeedSequence([seed, DROPOUT_STREAM, server_round, partition_id])
    return int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


@contextmanager
def seeded_generators(seed: int, device: torch.device | None = None) -> Iterator[None]:
    """Seed Python's ``random``, numpy's global, torch's CPU (and ``device``'s CUDA) generators
    with ``seed`` inside, restored after (docs/running.md, "Same seed, same run")."""  # noqa: D205, D209
    cuda = [device] if device is not None and device.type == "cuda" else []
    py_state, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002
    try:
        with torch.random.fork_rng(devices=cuda):
            (torch.manual_seed if cuda else torch.default_generator.manual_seed)(seed)
            random.seed(seed)
            np.random.seed([seed & 0xFFFFFFFF, seed >> 32])  # noqa: NPY002 (the global one)
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002


def train_local(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: Sequence[npt.NDArray[np.int64]],
    lr: float,
    *,
    torch_seed: int,
) -> list[float]:
    """Tau SGD steps w <- w - eta grad f(w, batch_t) in place, paper eq. (localupdate), in
    training mode, the generators seeded with ``torch_seed`` (:func:`dropout_seed`); each step's
    mini-batch loss before it."""  # noqa: D205, D209
    params = list(model.parameters())
    device = params[0].device
    rows = [np.asarray(b, dtype=np.int64) for b in batches]
    index = torch.from_numpy(np.concatenate(rows))
    x_all, y_all = x[index].to(device), y[index].to(device)
    ends = np.cumsum([len(r) for r in rows]).tolist()
    losses: list[float] = []
    model.train()
    with seeded_generators(torch_seed, device):
        start = 0
        for end in ends:
            xb, yb = x_all[start:end], y_all[start:end]
            start = end
            for p in params:  # optimizer.zero_grad(set_to_none=True)
                p.grad = None
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            sgd_step(params, lr)
            losses.append(float(loss.detach()))
    return losses


@torch.no_grad()
def sgd_step(params: Sequence[torch.Tensor], lr: float) -> None:
    """SGD step p <- p - lr p.grad in place, bit for bit ``torch.optim.SGD`` (tested), which on
    the CPU is not built (the first imports torch's compiler, ~1 s)."""  # noqa: D205, D209
    if all(p.device.type == "cpu" for p in params):
        for p in params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
        return
    torch.optim.SGD(params, lr=lr, momentum=0.0, weight_decay=0.0).step()


@torch.no_grad()
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = EVAL_BATCH_SIZE
) -> tuple[float, float]:
    """The mean cross-entropy (nats) and accuracy of ``model`` on (x, y), in eval mode."""
    n = int(y.shape[0])
    device = next(model.parameters()).device
    model.eval()
    loss_sum = 0.0
    correct = 0
    with seeded_generators(EVAL_STREAM, device):  # the same draws at every evaluation
        for start in range(0, n, batch_size):
            xb = x[start : start + batch_size].to(device)
            yb = y[start : start + batch_size].to(device)
            logits = model(xb)
            loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(dim=1) == yb).sum())
    return loss_sum / n, correct / n
