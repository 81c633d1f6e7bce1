"""Tests of client_app.sigma: sigma-hat (paper eq. (local_est_sigma)) against a per-sample loop."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from client_app.models import build_model
from client_app.sigma import gradient_spread


def reference_sigma(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Slow reference: one backward per sample, float64 deviations from the mean gradient."""
    model.eval()
    grads, losses = [], []
    for i in range(x.shape[0]):
        model.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        loss.backward()
        grads.append(torch.cat([p.grad.reshape(-1).double() for p in model.parameters()]))
        losses.append(float(loss.detach()))
    stacked = torch.stack(grads)
    mean = stacked.mean(dim=0)
    sigma = math.sqrt(float(((stacked - mean) ** 2).sum(dim=1).mean()))
    return sigma, sum(losses) / len(losses)


def batch(n: int, shape: tuple[int, ...], classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g)


@pytest.mark.parametrize(
    ("name", "shape", "classes", "n"),
    [
        ("mlp", (1, 8, 8), 10, 16),
        ("cnn", (3, 16, 16), 5, 6),
        ("resnet18gn", (3, 16, 16), 7, 2),
    ],
)
def test_matches_per_sample_loop(
    name: str, shape: tuple[int, int, int], classes: int, n: int
) -> None:
    model = build_model(name, classes, shape, seed=1)
    x, y = batch(n, shape, classes)
    model.train()  # gradient_spread must switch dropout off itself and restore the mode
    result = gradient_spread(model, x, y)
    assert model.training
    expected_sigma, expected_loss = reference_sigma(model, x, y)
    assert result.batch_size == n
    assert result.sigma == pytest.approx(expected_sigma, rel=1e-5)
    assert result.mean_loss == pytest.approx(expected_loss, rel=1e-5)


@pytest.mark.parametrize("chunk_size", [1, 3, 5])
def test_chunked_combination_matches_single_chunk(chunk_size: int) -> None:
    model = build_model("cnn", 4, (3, 16, 16), seed=2)
    x, y = batch(7, (3, 16, 16), 4)
    whole = gradient_spread(model, x, y, chunk_size=7)
    parts = gradient_spread(model, x, y, chunk_size=chunk_size)
    assert parts.sigma == pytest.approx(whole.sigma, rel=1e-6)
    assert parts.mean_loss == pytest.approx(whole.mean_loss, rel=1e-6)


def test_identical_samples_have_zero_spread() -> None:
    # All per-sample gradients are equal, so every deviation from their mean is 0.
    model = build_model("mlp", 10, (1, 8, 8), seed=0)
    x = torch.randn(1, 1, 8, 8).repeat(5, 1, 1, 1)
    y = torch.full((5,), 3)
    assert gradient_spread(model, x, y).sigma == pytest.approx(0.0, abs=1e-6)


def test_two_samples_hand_formula() -> None:
    # For b = 2 the deviations are +-(g1 - g2) / 2, so sigma = ||g1 - g2|| / 2.
    model = build_model("mlp", 10, (1, 8, 8), seed=4)
    x, y = batch(2, (1, 8, 8), 10)
    per_sample = []
    for i in range(2):
        model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        per_sample.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    expected = float(torch.linalg.vector_norm(per_sample[0] - per_sample[1])) / 2
    assert gradient_spread(model, x, y).sigma == pytest.approx(expected, rel=1e-5)


def test_rejects_mismatched_batch() -> None:
    model = build_model("mlp", 10, (1, 8, 8))
    with pytest.raises(ValueError, match="same number"):
        gradient_spread(model, torch.zeros(3, 1, 8, 8), torch.zeros(2, dtype=torch.int64))
