"""Tests of fedcgd_task.training: batch draws, local SGD determinism, evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedcgd_task.models import build_model
from fedcgd_task.settings import TrainingSettings
from fedcgd_task.training import dropout_seed, evaluate, local_batches, train_local

SEED = 9
TRAINING = TrainingSettings(local_steps=3, learning_rate=0.1, batch_size=4)


def test_local_batches_wrap_around_a_permutation_drawn_by_seed_round_partition() -> None:
    # 5 local samples, tau * b = 12 positions: the permutation read cyclically, so the first
    # 2 entries of the permutation appear 3 times and the other 3 appear twice.
    batches = local_batches(SEED, TRAINING, 5, server_round=2, partition_id=1)
    assert [b.size for b in batches] == [4, 4, 4]
    flat = np.concatenate(batches)
    np.testing.assert_array_equal(flat[:7], flat[5:12])
    assert sorted(flat[:5].tolist()) == [0, 1, 2, 3, 4]
    assert sorted(np.bincount(flat).tolist()) == [2, 2, 2, 3, 3]
    assert all(np.unique(b).size == b.size for b in batches)  # b <= num_local: no repeats
    a = local_batches(SEED, TRAINING, 100, 3, 2)
    for args, same in [((SEED, 3, 2), True), ((SEED, 4, 2), False), ((SEED, 3, 1), False),
                       ((10, 3, 2), False)]:  # fmt: skip
        other = local_batches(args[0], TRAINING, 100, *args[1:])
        assert all(np.array_equal(x, y) for x, y in zip(a, other, strict=True)) is same


def data(n: int, shape: tuple[int, ...], classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(123)
    return torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g)


def test_train_local_matches_manual_sgd() -> None:
    # Reference: w <- w - lr * grad(mean CE on batch t), written out with autograd.grad. In
    # float64: the reference's products round otherwise than nn.Linear's, and in float32 a
    # ReLU input within rounding of 0 could take its other side (test_client_sigma); in float64
    # two steps through two layers differ by far less than 1e-12.
    x, y = data(6, (1, 8, 8), 10)
    x = x.double()
    batches = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    model = build_model("mlp", 10, (1, 8, 8), seed=3).double()
    weights = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    losses = []
    for rows in batches:
        h = torch.relu(x[rows].flatten(1) @ weights[0].T + weights[1])
        loss = nn.functional.cross_entropy(h @ weights[2].T + weights[3], y[rows])
        grads = torch.autograd.grad(loss, weights)
        losses.append(float(loss.detach()))
        weights = [
            (w - 0.2 * g).detach().requires_grad_(True) for w, g in zip(weights, grads, strict=True)
        ]
    result = train_local(model, x, y, batches, 0.2, torch_seed=0)
    for p, w in zip(model.parameters(), weights, strict=True):
        torch.testing.assert_close(p.detach(), w.detach(), rtol=1e-12, atol=1e-12)
    assert result.step_losses == pytest.approx(losses, rel=1e-12)
    assert result.mean_loss == pytest.approx(sum(losses) / 2, rel=1e-12)


def optimizer_train_local(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batches: list[np.ndarray], lr: float,
    torch_seed: int,
) -> list[float]:  # fmt: skip
    """Local SGD as torch's optimizer does it: a gather per step, torch.manual_seed, SGD."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0, weight_decay=0.0)
    losses = []
    model.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        for rows in batches:
            index = torch.from_numpy(rows)
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize(("name", "shape"), [("cnn", (3, 16, 16)), ("cnn1d", (1, 40))])
def test_train_local_bit_identical_to_the_optimizer_loop(name: str, shape: tuple[int, ...]) -> None:
    # train_local's sgd_step against torch.optim.SGD (no momentum, no weight decay). Dropout
    # (cnn) included: the masks come from the same seeded CPU generator. A frozen parameter has
    # no gradient and is left as it was.
    x, y = data(20, shape, 4)
    batches = [np.array([3, 1, 4, 15, 9]), np.array([2, 6, 5, 3, 5]), np.array([8, 9, 7, 19, 0])]
    seed = dropout_seed(4, 1, 2)
    reference, model = (build_model(name, 4, shape, seed=5) for _ in range(2))
    for m in (reference, model):
        next(m.parameters()).requires_grad_(False)
    losses = optimizer_train_local(reference, x, y, batches, 0.05, seed)
    rng_before = torch.random.get_rng_state()
    result = train_local(model, x, y, batches, 0.05, torch_seed=seed)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the global stream untouched
    assert list(result.step_losses) == losses
    s0, s1 = reference.state_dict(), model.state_dict()
    assert all(torch.equal(s0[k], s1[k]) for k in s0)
    start = build_model(name, 4, shape, seed=5).state_dict()
    first = next(iter(start))
    assert torch.equal(s1[first], start[first])
    assert any(not torch.equal(s1[k], start[k]) for k in s1)
    if name == "cnn":  # another dropout seed, another result
        other = build_model(name, 4, shape, seed=5)
        next(other.parameters()).requires_grad_(False)
        train_local(other, x, y, batches, 0.05, torch_seed=dropout_seed(4, 1, 3))
        assert any(not torch.equal(other.state_dict()[k], s1[k]) for k in s1)


def test_evaluate_hand_computed() -> None:
    # Zero weights: every logit is 0, so CE = ln 2 = 0.693147 per sample and argmax picks
    # class 0; labels [0, 1, 0] -> accuracy 2 / 3.
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2))
    nn.init.zeros_(model[1].weight)
    nn.init.zeros_(model[1].bias)
    x = torch.randn(3, 1, 1, 2)
    y = torch.tensor([0, 1, 0])
    loss, acc = evaluate(model, x, y, batch_size=2)
    assert loss == pytest.approx(math.log(2.0), rel=1e-6)
    assert acc == pytest.approx(2 / 3)


def test_dropout_seed_distinct_per_round_and_device() -> None:
    seeds = {dropout_seed(0, r, v) for r in range(5) for v in range(5)}
    assert len(seeds) == 25
    assert all(0 <= s < 2**63 for s in seeds)
