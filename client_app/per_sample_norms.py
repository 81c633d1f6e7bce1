"""Per-sample (and per-group) squared gradient norms from one forward + backward pass.

One backward of the summed loss gives each parametrised layer's per-sample output gradients;
with the layer's inputs (a forward hook) they give each sample's, and each group's summed,
squared gradient norm layer by layer (formulas: :mod:`client_app.layer_norms`).

Scope: every parameter is the ``weight`` or ``bias`` of one of :data:`SUPPORTED_LAYERS`, a
convolution's input is batched, no parameter is shared, every layer runs at most once per
forward, and the model treats the samples of a batch independently (no BatchNorm in training
mode). :func:`unsupported_reasons` checks the static part; the rest raises
:class:`UnsupportedModelError` during the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)
from torch.utils.hooks import RemovableHandle

from client_app.layer_norms import (
    CHUNK_BUDGET_FLOATS,
    conv_group_sq_norms,
    conv_sq_norms,
    group_norm_group_sq_norms,
    group_norm_sq_norms,
    groups_of,
    linear_group_sq_norms,
    linear_sq_norms,
)

#: Layer types whose parameters get per-sample gradient norms.
SUPPORTED_LAYERS: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.GroupNorm)
#: Dimensions of a batched input of each convolution type ([b, C_in, *spatial]).
_CONV_INPUT_DIMS: dict[type[nn.Module], int] = {nn.Conv1d: 3, nn.Conv2d: 4}
__all__ = [
    "CHUNK_BUDGET_FLOATS",
    "SUPPORTED_LAYERS",
    "PerSampleNorms",
    "UnsupportedModelError",
    "per_sample_grad_norms",
    "unsupported_reasons",
]


class UnsupportedModelError(ValueError):
    """The model has a parameter or a use of a layer outside this module's scope."""


@dataclass(frozen=True)
class PerSampleNorms:
    """Result of :func:`per_sample_grad_norms`, in (loss units per parameter unit)^2 and nats.

    Attributes
    ----------
    sq_norms : torch.Tensor of float64, shape [b]
        ||grad_w l_i(w)||^2 of each sample i over all model parameters.
    group_sq_norms : torch.Tensor of float64, shape [N]
        ||sum_{i in group n} grad_w l_i(w)||^2 for each group of ``group_size`` samples.
    losses : torch.Tensor of float32, shape [b]
        The per-sample cross-entropies l_i(w).
    """

    sq_norms: torch.Tensor
    group_sq_norms: torch.Tensor
    losses: torch.Tensor


def unsupported_reasons(model: nn.Module) -> list[str]:
    """Why :func:`per_sample_grad_norms` cannot handle ``model``, one line each (empty: it can).

    Run-time conditions (a layer called twice, a batch dimension that is not dim 0) are detected
    only during the pass.
    """
    reasons: list[str] = []
    owner: dict[int, str] = {}
    for module_name, module in model.named_modules():
        own = dict(module.named_parameters(recurse=False))
        if not own:
            continue
        label = module_name or "<root>"
        if type(module) not in SUPPORTED_LAYERS:
            reasons.append(f"{label}: parameters of a {type(module).__name__} are not supported")
            continue
        extra = sorted(set(own) - {"weight", "bias"})
        if extra:
            reasons.append(f"{label}: unexpected parameters {extra}")
        if isinstance(module, nn.Conv1d | nn.Conv2d):
            if module.padding_mode != "zeros" or isinstance(module.padding, str):
                kind = type(module).__name__
                reasons.append(f"{label}: {kind} padding must be explicit zero padding")
        for param_name, param in own.items():
            if id(param) in owner:
                reasons.append(f"{label}.{param_name}: shared with {owner[id(param)]}")
            owner[id(param)] = f"{label}.{param_name}"
    if not owner:
        reasons.append("the model has no parameters")
    return reasons


def per_sample_grad_norms(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    group_size: int | None = None,
    chunk_size: int | None = None,
) -> PerSampleNorms:
    """Compute ||grad l_i(w)||^2 per sample and ||sum_{i in group} grad l_i(w)||^2 per group.

    One forward and one backward of ``sum_i l_i`` through ``model`` as it is (the caller picks the
    mode). The model is left unchanged (no hook left, ``.grad`` untouched, ``requires_grad``
    restored); frozen parameters count too.

    Parameters
    ----------
    model : torch.nn.Module
        A classifier within the scope of :func:`unsupported_reasons`.
    x : torch.Tensor, shape [b, ...]
        Inputs (moved to the model's device): N groups of ``group_size`` consecutive samples.
    y : torch.Tensor of int64, shape [b]
        Labels.
    group_size : int, optional
        Samples per group; default b (one group). Must divide b.
    chunk_size : int, optional
        Samples (or groups) per chunk of the per-layer computations (memory only).

    Raises
    ------
    UnsupportedModelError
        If ``model`` is outside the scope (statically, or during the pass).
    """
    reasons = unsupported_reasons(model)
    if reasons:
        raise UnsupportedModelError("; ".join(reasons))
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1; got {chunk_size}")
    b = int(y.shape[0])
    size = b if group_size is None else group_size
    num_groups = groups_of(b, size)
    params = list(model.parameters())
    device = params[0].device
    x, y = x.to(device), y.to(device)
    sq_norms = torch.zeros(b, dtype=torch.float64, device=device)
    group_sq = torch.zeros(num_groups, dtype=torch.float64, device=device)
    calls: dict[nn.Module, int] = {}
    targets: list[torch.Tensor] = []
    handles: list[RemovableHandle] = []
    errors: list[str] = []

    def add_layer_norms(module: nn.Module, a: torch.Tensor, g: torch.Tensor) -> None:
        if isinstance(module, nn.Linear):
            sq_norms.add_(linear_sq_norms(module, a, g, chunk_size=chunk_size))
            group_sq.add_(linear_group_sq_norms(module, a, g, size, chunk_size=chunk_size))
        elif isinstance(module, nn.Conv1d | nn.Conv2d):
            sq_norms.add_(conv_sq_norms(module, a, g, chunk_size=chunk_size))
            group_sq.add_(conv_group_sq_norms(module, a, g, size, chunk_size=chunk_size))
        elif isinstance(module, nn.GroupNorm):
            sq_norms.add_(group_norm_sq_norms(module, a, g))
            group_sq.add_(group_norm_group_sq_norms(module, a, g, size))
        else:
            raise UnsupportedModelError(f"no per-sample norm for {type(module).__name__}")

    def make_grad_hook(module: nn.Module, a: torch.Tensor) -> Callable[[torch.Tensor], None]:
        def grad_hook(g: torch.Tensor) -> None:
            # Fired by the backward with dl/d(output) for the output's value before any later
            # in-place change (e.g. ReLU(inplace=True)), which is the layer's own output.
            with torch.no_grad():
                add_layer_norms(module, a, g.detach())

        return grad_hook

    def forward_hook(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        calls[module] += 1
        a = args[0]
        if calls[module] > 1:
            errors.append(f"{type(module).__name__} ran more than once in one forward pass")
        elif a.dim() != _CONV_INPUT_DIMS.get(type(module), a.dim()):
            errors.append(f"{type(module).__name__} saw an unbatched input {tuple(a.shape)}")
        elif int(a.shape[0]) != b or int(out.shape[0]) != b:
            errors.append(f"{type(module).__name__} saw a batch of {a.shape[0]}, not {b}")
        elif out.requires_grad:
            # The backward's targets: the layer's input, or (for an input that needs no
            # gradient, e.g. the data) its own parameters; either way its output's gradient
            # is formed and the hook fires, and no other parameter gradient is computed.
            targets.extend([a] if a.requires_grad else module.parameters(recurse=False))
            out.register_hook(make_grad_hook(module, a.detach()))

    flags = [p.requires_grad for p in params]
    try:
        for module in model.modules():
            has_params = next(module.parameters(recurse=False), None) is not None
            if isinstance(module, SUPPORTED_LAYERS) and has_params:
                calls[module] = 0
                handles.append(module.register_forward_hook(forward_hook))
        for p in params:
            p.requires_grad_(True)
        with torch.enable_grad():
            losses = F.cross_entropy(model(x), y, reduction="none")
            if errors:
                raise UnsupportedModelError("; ".join(errors))
            if targets:
                torch.autograd.grad(losses.sum(), targets, allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
        for p, flag in zip(params, flags, strict=True):
            p.requires_grad_(flag)
    return PerSampleNorms(sq_norms=sq_norms, group_sq_norms=group_sq, losses=losses.detach())
