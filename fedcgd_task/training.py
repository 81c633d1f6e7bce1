"""Local update: the round's mini-batches, tau plain SGD steps, and evaluation.

Paper Section II (local update): w_v^(j,t) = w_v^(j,t-1) - eta grad f_t(w_v^(j,t-1)), for
t = 1..tau, each step on a mini-batch of b samples of the local dataset D_v. Everything random
here is derived from (run seed, server round, partition id), so a device that answers a stats
query and then a train message in the same round uses the same batches, and two runs with the
same seed produce bit-identical models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)

if TYPE_CHECKING:
    from fedcgd_task.settings import TrainingSettings

#: Tag mixed into the seed of the batch stream ("BTCH").
BATCH_STREAM = 0x42544348
#: Tag mixed into the seed of the dropout stream ("DROP").
DROPOUT_STREAM = 0x44524F50
#: Default evaluation batch size (memory only; results do not depend on it beyond rounding).
EVAL_BATCH_SIZE = 512


@dataclass(frozen=True)
class LocalTrainResult:
    """Outcome of :func:`train_local`.

    Attributes
    ----------
    mean_loss : float
        Mean over the tau steps of the mini-batch cross-entropy before each step (nats).
    step_losses : tuple of float
        The tau per-step losses (nats).

    """

    mean_loss: float
    step_losses: tuple[float, ...]


def compute_device() -> torch.device:
    """Return ``cuda`` when available, else ``cpu`` (used for training and evaluation)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def local_batches(
    seed: int,
    training: TrainingSettings,
    num_local: int,
    server_round: int,
    partition_id: int,
) -> list[npt.NDArray[np.int64]]:
    """Draw the round's tau mini-batches of b samples of a device.

    A permutation of ``range(num_local)`` from
    ``numpy.random.default_rng([seed, BATCH_STREAM, server_round, partition_id])`` is read
    cyclically (wrapping around when tau b > num_local); batch t is positions
    [t b, (t+1) b) of that cyclic sequence. A batch holds no repeated sample when b <= num_local.

    Parameters
    ----------
    seed : int
        Run seed.
    training : TrainingSettings
        Supplies ``local_steps`` (tau) and ``batch_size`` (b) of this round.
    num_local : int
        |D_v|, the number of local samples (>= 1).
    server_round : int
        Server round j.
    partition_id : int
        Device index v.

    Returns
    -------
    list of numpy.ndarray of int64
        ``tau`` arrays of ``b`` positions in ``0 .. num_local - 1`` (into the local index list).

    """
    if num_local < 1:
        raise ValueError(f"num_local (local dataset size) must be >= 1; got {num_local}")
    tau, b = training.local_steps, training.batch_size
    if tau < 1:
        raise ValueError(f"local_steps must be an integer >= 1; got {tau}")
    if b < 1:
        raise ValueError(f"batch_size must be an integer >= 1; got {b}")
    rng = np.random.default_rng([seed, BATCH_STREAM, server_round, partition_id])
    order = rng.permutation(num_local).astype(np.int64)
    positions = np.arange(tau * b, dtype=np.int64) % num_local
    flat = order[positions]
    return [flat[t * b : (t + 1) * b] for t in range(tau)]


def dropout_seed(seed: int, server_round: int, partition_id: int) -> int:
    """Return the torch seed of a device's dropout masks in a round (a 63-bit int)."""
    state = np.random.SeedSequence([seed, DROPOUT_STREAM, server_round, partition_id])
    return int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def train_local(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: Sequence[npt.NDArray[np.int64]],
    lr: float,
    *,
    torch_seed: int,
) -> LocalTrainResult:
    """Run tau plain SGD steps (no momentum, no weight decay) with cross-entropy, in place.

    Paper eq. (localupdate): w <- w - eta grad f(w, batch_t), t = 1..tau. The model is
    in training mode (dropout on); the dropout masks come from the torch RNG seeded with
    ``torch_seed`` inside :func:`torch.random.fork_rng`, so the global RNG is untouched and
    equal inputs give bit-identical weights.

    Parameters
    ----------
    model : torch.nn.Module
        Model to update (on any device; the batches are moved there).
    x : torch.Tensor of float32, shape [n, C, H, W]
        Local inputs.
    y : torch.Tensor of int64, shape [n]
        Local labels.
    batches : sequence of numpy.ndarray of int64
        tau arrays of row positions into ``x`` / ``y`` (from :func:`local_batches`).
    lr : float
        Learning rate eta > 0.
    torch_seed : int
        Seed of the dropout masks (see :func:`dropout_seed`).

    Returns
    -------
    LocalTrainResult
        Mean and per-step mini-batch losses (each taken before its step).

    """
    if not lr > 0:
        raise ValueError(f"lr (learning rate) must be > 0; got {lr!r}")
    if len(batches) == 0:
        raise ValueError("batches must hold at least one mini-batch (local_steps >= 1)")
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0, weight_decay=0.0)
    losses: list[float] = []
    model.train()
    fork_devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices):
        torch.manual_seed(torch_seed)
        for rows in batches:
            index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
            xb, yb = x[index].to(device), y[index].to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return LocalTrainResult(mean_loss=float(np.mean(losses)), step_losses=tuple(losses))


@torch.no_grad()
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = EVAL_BATCH_SIZE
) -> tuple[float, float]:
    """Return the mean cross-entropy (nats) and accuracy in [0, 1] of ``model`` on (x, y).

    The model is put in eval mode (dropout off). Empty data raise ValueError.

    Parameters
    ----------
    model : torch.nn.Module
        Classifier.
    x : torch.Tensor of float32, shape [n, C, H, W]
        Inputs.
    y : torch.Tensor of int64, shape [n]
        Labels.
    batch_size : int
        Rows per forward pass.

    Returns
    -------
    loss, accuracy : float
        Sample-averaged loss and share of correct argmax predictions.

    """
    n = int(y.shape[0])
    if n == 0:
        raise ValueError("evaluate needs at least one sample; got an empty set")
    if batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1; got {batch_size}")
    device = next(model.parameters()).device
    model.eval()
    loss_sum = 0.0
    correct = 0
    for start in range(0, n, batch_size):
        xb = x[start : start + batch_size].to(device)
        yb = y[start : start + batch_size].to(device)
        logits = model(xb)
        loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(dim=1) == yb).sum())
    return loss_sum / n, correct / n
