"""σ̂ of many devices from one pass: group norms against autograd per group, cohorts against devices.

The oracle is the obvious computation: the summed gradient of each group of samples by one
autograd backward per group, and each device's σ̂ from its own batch alone
(:func:`client_app.sigma.gradient_spread`) or from per-sample gradients
(:func:`client_app.sigma.gradient_spread_vmap`). Everything runs in float64 with the
tolerances of ``test_client_sigma`` (whose module docstring says why float32 comparisons of
ReLU networks have no fixed tolerance).
"""

from __future__ import annotations

import math

import pytest
import torch
from layer_cases import REL64, reference_sigma
from torch.nn import functional as F  # noqa: N812 (torch convention)

from client_app.per_sample_norms import per_sample_grad_norms
from client_app.sigma import gradient_spread, gradient_spreads, spread_from_norms
from fedcgd_task.models import build_model


def test_spread_from_norms_by_hand() -> None:
    # Two samples with gradients (1, 0) and (0, 1): sum ||g_i||^2 = 2, ||g1 + g2||^2 = 2,
    # sigma^2 = 2/2 - 2/4 = 1/2.
    assert spread_from_norms(2.0, 2.0, 2) == pytest.approx(math.sqrt(0.5))
    assert spread_from_norms(1.0, 1.0 + 1e-12, 1) == 0.0  # rounding below zero is clamped


MODELS = [("mlp", 10, (1, 8, 8)), ("cnn1d", 10, (1, 40)), ("cnn", 10, (3, 32, 32))]


@pytest.mark.parametrize(("name", "classes", "shape"), MODELS)
def test_whole_model_group_norms_match_autograd(
    name: str, classes: int, shape: tuple[int, ...]
) -> None:
    torch.manual_seed(4)
    model = build_model(name, classes, shape).double().eval()
    x = torch.randn(12, *shape, dtype=torch.float64)
    y = torch.randint(0, classes, (12,))
    norms = per_sample_grad_norms(model, x, y, group_size=4)
    expected = []
    for start in range(0, 12, 4):
        loss = F.cross_entropy(model(x[start : start + 4]), y[start : start + 4], reduction="sum")
        grads = torch.autograd.grad(loss, list(model.parameters()))
        expected.append(sum(float(gr.double().square().sum()) for gr in grads))
    torch.testing.assert_close(
        norms.group_sq_norms, torch.tensor(expected, dtype=torch.float64), rtol=REL64, atol=0.0
    )
    assert not any(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(("name", "classes", "shape"), MODELS)
def test_cohort_spreads_equal_each_device_alone(
    name: str, classes: int, shape: tuple[int, ...]
) -> None:
    torch.manual_seed(5)
    model = build_model(name, classes, shape).double()
    b, devices = 8, 5
    x = torch.randn(devices * b, *shape, dtype=torch.float64)
    y = torch.randint(0, classes, (devices * b,))
    cohort = gradient_spreads(model, x, y, group_size=b)
    assert len(cohort) == devices
    for v, spread in enumerate(cohort):
        rows = slice(v * b, (v + 1) * b)
        alone = gradient_spread(model, x[rows], y[rows])
        reference = reference_sigma(model, x[rows], y[rows])
        assert spread.batch_size == b
        assert spread.sigma == pytest.approx(alone.sigma, rel=reference.rel_tol)
        assert spread.sigma == pytest.approx(reference.sigma, rel=reference.rel_tol)
        assert spread.mean_loss == pytest.approx(alone.mean_loss, rel=REL64)
    assert model.training  # the mode is restored


def test_cohort_devices_differ_as_their_batches_do() -> None:
    # Device 1 holds device 0's first two samples twice each; device 2 one sample b times,
    # whose spread is 0 (up to the rounding of the expanded square).
    torch.manual_seed(6)
    model = build_model("mlp", 10, (1, 8, 8)).double()
    x0 = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    y0 = torch.randint(0, 10, (4,))
    x = torch.cat([x0, x0[[0, 0, 1, 1]], x0[[0]].repeat(4, 1, 1, 1)])
    y = torch.cat([y0, y0[[0, 0, 1, 1]], y0[[0]].repeat(4)])
    spreads = gradient_spreads(model, x, y, group_size=4)
    alone = [gradient_spread(model, x[i : i + 4], y[i : i + 4]).sigma for i in (0, 4, 8)]
    for v in (0, 1):
        rows = slice(4 * v, 4 * v + 4)
        tol = reference_sigma(model, x[rows], y[rows]).rel_tol
        assert spreads[v].sigma == pytest.approx(alone[v], rel=tol)
    # sigma-hat of identical samples is resolved to ~sqrt(eps) = 1.5e-8 of the gradient norm.
    assert spreads[2].sigma < 1e-6 * spreads[0].sigma and alone[2] < 1e-6 * alone[0]
