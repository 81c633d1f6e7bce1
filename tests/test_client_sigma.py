"""Tests of client_app.sigma: sigma-hat (paper eq. (local_est_sigma)), the one-pass and the vmap
way, against a loop with one backward per sample; the layer formulas of
:mod:`client_app.per_sample_norms` and many devices' σ̂ from one pass against autograd.

Precision: the comparisons run on float64 copies. In float32 two correct computations need
not agree to any fixed tolerance: a ReLU input within rounding of 0 may take either side in
kernels that round differently, moving that sample's gradient by the unit's whole share
(measured: ResNet-18-GN, sigma-hat 2.3e-4 relative). In float64 the tolerance follows from
rounding alone (:func:`layer_cases.sigma_rel_tol`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from layer_cases import REL64, group_reference, per_sample_grads, reference_sigma, sigma_rel_tol
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)

from client_app import per_sample_norms as psn
from client_app.sigma import (
    gradient_spread,
    gradient_spread_vmap,
    gradient_spreads,
    spread_from_norms,
)
from fedcgd_task.models import build_model


def batch(
    n: int, shape: tuple[int, ...], classes: int, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` standard normal inputs of ``shape`` (``dtype``) and labels below ``classes``."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, *shape, generator=g, dtype=torch.float64).to(dtype)
    return x, torch.randint(0, classes, (n,), generator=g)


def hook_count(model: nn.Module) -> int:
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


MODEL_CASES = [
    ("mlp", (1, 8, 8), 10, 16),
    ("cnn1d", (1, 40), 10, 12),  # MNIST-1D's input; strided, zero-padded Conv1d layers
    # 32 x 32: every Conv2d route is used (per-sample weight gradients in the cnn and the
    # ResNet stem and stage 1, Gram matrices in stages 2 to 4, T = 1 in stage 4).
    ("cnn", (3, 32, 32), 10, 5),
    ("resnet18gn", (3, 32, 32), 100, 3),
]


@pytest.mark.parametrize("train_mode", [True, False], ids=["train-mode", "eval-mode"])
@pytest.mark.parametrize(("name", "shape", "classes", "n"), MODEL_CASES)
def test_one_pass_and_vmap_match_per_sample_loop(
    name: str, shape: tuple[int, ...], classes: int, n: int, train_mode: bool
) -> None:
    model = build_model(name, classes, shape, seed=1).double()
    x, y = batch(n, shape, classes)
    model.train(train_mode)  # gradient_spread evaluates in eval mode and restores the mode
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = gradient_spread(model, x, y)
    assert model.training is train_mode
    assert all(p.grad is None for p in model.parameters())
    assert all(p.requires_grad for p in model.parameters())
    assert hook_count(model) == 0 and psn.unsupported_reasons(model) == []  # the one pass
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    expected = reference_sigma(model, x, y)
    assert result == pytest.approx(expected.sigma, rel=expected.rel_tol)
    if train_mode and name != "resnet18gn":  # the vmap reference: no cancellation
        assert gradient_spread_vmap(model, x, y) == pytest.approx(expected.sigma, rel=REL64)


def test_hand_checkable_cases_cohort_devices_as_their_batches_and_model_state_kept():
    # Logits z = W a + c with W = 0, c = 0: softmax p = (1/2, 1/2), so the per-sample gradients
    # are dl/dW = (p - e_y) a^T and dl/dc = p - e_y. Samples a1 = (1, 0), y1 = 0 and
    # a2 = (0, 1), y2 = 1 give g1 = ([[-1/2, 0], [1/2, 0]], (-1/2, 1/2)) and
    # g2 = ([[0, 1/2], [0, -1/2]], (1/2, -1/2)), so ||g_i||^2 = 1/2 + 1/2 = 1, the mean gradient
    # is ([[-1/4, 1/4], [1/4, -1/4]], (0, 0)) with squared norm 1/4, and
    # sigma^2 = 1 - 1/4 = 3/4.
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).reshape(2, 1, 1, 2)
    y = torch.tensor([0, 1])
    norms = psn.per_sample_grad_norms(model, x, y)
    assert norms.sq_norms.tolist() == pytest.approx([1.0, 1.0])
    # ||g1 + g2||^2 = b^2 ||g_bar||^2
    assert float(norms.group_sq_norms[0]) == pytest.approx(4 * 0.25)
    assert gradient_spread(model, x, y) == pytest.approx(math.sqrt(3) / 2, rel=1e-6)
    assert spread_from_norms(1.0, 1.0 + 1e-12, 1) == 0.0  # rounding below zero is clamped
    # For b = 2 the deviations are +-(g1 - g2) / 2, so sigma = ||g1 - g2|| / 2.
    model = build_model("cnn", 10, (3, 16, 16), seed=4).double()
    x, y = batch(2, (3, 16, 16), 10)
    grads = per_sample_grads(model, x, y)
    expected = float(torch.linalg.vector_norm(grads[0] - grads[1])) / 2
    tol = sigma_rel_tol(float(grads.square().sum(dim=1).mean()), expected**2)
    assert gradient_spread(model, x, y) == pytest.approx(expected, rel=tol)
    # Device 1 holds device 0's first two samples twice each; device 2 one sample b times,
    # whose spread is 0 (up to the rounding of the expanded square).
    torch.manual_seed(6)
    model = build_model("mlp", 10, (1, 8, 8)).double()
    x0 = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    y0 = torch.randint(0, 10, (4,))
    x = torch.cat([x0, x0[[0, 0, 1, 1]], x0[[0]].repeat(4, 1, 1, 1)])
    y = torch.cat([y0, y0[[0, 0, 1, 1]], y0[[0]].repeat(4)])
    spreads = gradient_spreads(model, x, y, group_size=4)
    alone = [gradient_spread(model, x[i : i + 4], y[i : i + 4]) for i in (0, 4, 8)]
    for v in (0, 1):
        rows = slice(4 * v, 4 * v + 4)
        tol = reference_sigma(model, x[rows], y[rows]).rel_tol
        assert spreads[v] == pytest.approx(alone[v], rel=tol)
    # sigma-hat of identical samples is resolved to ~sqrt(eps) = 1.5e-8 of the gradient norm.
    assert spreads[2] < 1e-6 * spreads[0] and alone[2] < 1e-6 * alone[0]
    # Existing .grad, requires_grad=False flags and per-module modes survive; frozen parameters
    # still count, as in eq. (local_est_sigma) the norm runs over all parameters.
    model = build_model("mlp", 10, (1, 8, 8), seed=5).double()
    x, y = batch(6, (1, 8, 8), 10)
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    first.weight.requires_grad_(False)
    marker = torch.full_like(first.bias, 3.0)
    first.bias.grad = marker.clone()
    model.train()
    first.eval()  # a mixed train/eval state comes back module by module
    result = gradient_spread(model, x, y)
    assert model.training
    assert not first.training
    assert not first.weight.requires_grad
    assert first.weight.grad is None
    assert torch.equal(first.bias.grad, marker)
    first.weight.requires_grad_(True)
    expected = reference_sigma(model, x, y)
    assert result == pytest.approx(expected.sigma, rel=expected.rel_tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("name", "shape", "classes", "n"), MODEL_CASES)
def test_identical_samples_have_zero_spread(
    name: str, shape: tuple[int, ...], classes: int, n: int, dtype: torch.dtype
) -> None:
    # All per-sample gradients are equal, so sigma = 0 exactly; the one-pass value is
    # (1/b) sum ||g_i||^2 - ||g_bar||^2 with rounding of relative size ~eps in both terms, so it
    # may be ~sqrt(eps) of the gradient norm (module docstring of client_app.sigma), not 0:
    # bounded here by 10 sqrt(eps) (float32: 3.5e-3, float64: 1.5e-7). The rows are identical,
    # so every kernel computes each row with the same operations: no ReLU can flip between them.
    model = build_model(name, classes, shape, seed=0).to(dtype)
    x = batch(1, shape, classes, dtype)[0].repeat(n, *([1] * len(shape)))
    y = torch.full((n,), 3)
    grad_norm = float(torch.linalg.vector_norm(per_sample_grads(model, x[:1], y[:1])))
    assert grad_norm > 0.1
    bound = 10 * math.sqrt(torch.finfo(dtype).eps) * grad_norm
    assert gradient_spread(model, x, y) <= bound


def test_chunk_size_changes_nothing_but_memory() -> None:
    model = build_model("resnet18gn", 7, (3, 32, 32), seed=2).double()
    x, y = batch(5, (3, 32, 32), 7)
    whole, tol = gradient_spread(model, x, y), reference_sigma(model, x, y).rel_tol
    for chunk_size in (1, 2, 5):
        assert gradient_spread(model, x, y, chunk_size=chunk_size) == pytest.approx(whole, rel=tol)
        vmap_parts = gradient_spread_vmap(model, x, y, chunk_size=chunk_size)
        assert vmap_parts == pytest.approx(whole, rel=tol)


class TwiceLinear(nn.Module):
    """Calls the same Linear twice: outside the one-pass scope."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(torch.tanh(self.inner(x.flatten(1))))


#: Models outside the one-pass method, found statically or during the pass: (id, model, input
#: shape of one sample, classes, why). A BatchNorm in eval mode computes the samples apart.
OUT_OF_SCOPE: list[tuple[str, Callable[[], nn.Module], tuple[int, ...], int, str]] = [
    ("layer-run-twice", TwiceLinear, (1, 2, 2), 4, "more than once"),
    (
        "batch-norm",
        lambda: nn.Sequential(
            nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(12, 3)
        ),
        (2, 4, 4),
        3,
        "BatchNorm2d are not supported",
    ),
    (
        "layer-norm",
        lambda: nn.Sequential(
            nn.Conv1d(2, 4, 3), nn.Flatten(), nn.LayerNorm(24), nn.Tanh(), nn.Linear(24, 3)
        ),
        (2, 8),
        3,
        "2: parameters of a LayerNorm",
    ),
    (
        "same-padding",
        lambda: nn.Sequential(nn.Conv1d(1, 3, 3, padding="same"), nn.Flatten(), nn.Linear(24, 3)),
        (1, 8),
        3,
        "padding must be explicit zero padding",
    ),
]


@pytest.mark.parametrize(
    ("make", "shape", "classes", "why"),
    [c[1:] for c in OUT_OF_SCOPE],
    ids=[c[0] for c in OUT_OF_SCOPE],
)
def test_a_model_outside_the_one_pass_method_falls_back_to_vmap(
    make: Callable[[], nn.Module], shape: tuple[int, ...], classes: int, why: str
) -> None:
    torch.manual_seed(3)
    model = make().double().eval()
    x, y = batch(6, shape, classes)
    with pytest.raises(psn.UnsupportedModelError, match=why):
        psn.per_sample_grad_norms(model, x, y)
    assert hook_count(model) == 0
    assert gradient_spread(model, x, y) == pytest.approx(reference_sigma(model, x, y)[0], rel=REL64)


#: (id, layer, input shape of one sample) of the layer-formula cases: a Linear at T positions
#: (both weight routes), Conv2d and Conv1d with strides, padding, dilation, channel groups and no
#: bias (the Gram route at T = 16, 4 and 1, the weight-gradient route at many positions; the
#: cnn1d's first layer), and a GroupNorm with random affine parameters.
LAYERS: list[tuple[str, nn.Module, tuple[int, ...]]] = [
    ("linear", nn.Linear(7, 5), (7,)),
    ("linear-T1", nn.Linear(7, 5), (1, 7)),
    ("linear-T3", nn.Linear(40, 30), (3, 40)),
    ("linear-T12", nn.Linear(3, 4), (12, 3)),
    ("conv2d", nn.Conv2d(3, 32, 3), (3, 12, 12)),
    ("conv2d-dilated", nn.Conv2d(4, 64, 3, stride=2, padding=1, dilation=2), (4, 9, 9)),
    ("conv2d-groups", nn.Conv2d(6, 8, (3, 2), groups=2, bias=False), (6, 10, 10)),
    ("conv2d-T16", nn.Conv2d(64, 64, 3, padding=1), (64, 4, 4)),
    ("conv2d-T1", nn.Conv2d(32, 48, 3), (32, 3, 3)),
    ("conv2d-T4", nn.Conv2d(16, 40, 3, stride=2, bias=False), (16, 5, 5)),
    ("conv1d-cnn1d", nn.Conv1d(1, 25, 5, stride=2, padding=1), (1, 40)),
    ("conv1d-strided", nn.Conv1d(25, 25, 3, stride=2, padding=1), (25, 19)),
    ("conv1d-dilated", nn.Conv1d(4, 6, 3, padding=2, dilation=3, bias=False), (4, 17)),
    ("conv1d-groups", nn.Conv1d(6, 8, 2, groups=2), (6, 12)),
    ("conv1d-T4", nn.Conv1d(64, 64, 3, padding=1), (64, 4)),
    ("conv1d-T1", nn.Conv1d(16, 40, 3), (16, 3)),
    ("group-norm", nn.GroupNorm(4, 8), (8, 5, 5)),
]


@pytest.mark.parametrize(("layer", "shape"), [c[1:] for c in LAYERS], ids=[c[0] for c in LAYERS])
@pytest.mark.parametrize("group_size", [1, 3])
@pytest.mark.parametrize("chunk_size", [None, 1])
def test_layer_norms_match_autograd_per_sample_and_per_group(
    layer: nn.Module, shape: tuple[int, ...], group_size: int, chunk_size: int | None
) -> None:
    # float64 throughout: the tolerance is float64 rounding (module docstring).
    torch.manual_seed(0)
    layer = layer.double()
    if isinstance(layer, nn.GroupNorm):
        with torch.no_grad():
            layer.weight.normal_()
            layer.bias.normal_()
    a = torch.randn(6, *shape, dtype=torch.float64) * 3 + 1  # off the origin, as activations
    g = torch.randn_like(layer(a))
    got = psn.LAYER_SQ_NORMS[type(layer)](layer, a, g, group_size, chunk_size=chunk_size)
    expected = group_reference(layer, a, g, group_size)
    torch.testing.assert_close(got, expected, rtol=REL64, atol=0.0)


@pytest.mark.parametrize(("name", "shape", "classes"), [c[:3] for c in MODEL_CASES[:3]])
def test_whole_model_group_norms_match_autograd_and_cohort_spreads_each_device_alone(
    name: str, classes: int, shape: tuple[int, ...]
) -> None:
    torch.manual_seed(4)
    model = build_model(name, classes, shape).double().eval()
    x = torch.randn(12, *shape, dtype=torch.float64)
    y = torch.randint(0, classes, (12,))
    norms = psn.per_sample_grad_norms(model, x, y, group_size=4)
    expected = []
    for start in range(0, 12, 4):
        loss = F.cross_entropy(model(x[start : start + 4]), y[start : start + 4], reduction="sum")
        grads = torch.autograd.grad(loss, list(model.parameters()))
        expected.append(sum(float(gr.double().square().sum()) for gr in grads))
    torch.testing.assert_close(
        norms.group_sq_norms, torch.tensor(expected, dtype=torch.float64), rtol=REL64, atol=0.0
    )
    assert not any(p.grad is not None for p in model.parameters())
    # a cohort's spreads: each device's alone
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
        assert spread == pytest.approx(alone, rel=reference.rel_tol)
        assert spread == pytest.approx(reference.sigma, rel=reference.rel_tol)
    assert model.training  # the mode is restored
