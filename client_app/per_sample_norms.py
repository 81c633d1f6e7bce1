"""Per-sample and per-group squared gradient norms from one forward + backward pass.

One backward of the summed loss gives each layer's output gradient ``g``; with its input ``a``
(a forward hook) the formulas below give ||sum_{i in group} dl_i/dW||^2 + ||sum_i dl_i/dc||^2
per group of ``group_size`` consecutive samples: 1 gives per-sample norms, b the b^2 ||g_bar||^2
of σ̂ (eq. local_est_sigma), one group per device a whole cohort's at once.

Layer formulas (T output positions, K input features per position, O outputs):

* ``nn.Linear`` (y_t = W a_t + c): dl/dW = sum_t g_t a_t^T, so ||dl/dW||_F^2 =
  sum_{t,t'} (a_t . a_t') (g_t . g_t') (||a||^2 ||g||^2 when T = 1); dl/dc = sum_t g_t. A group
  is one Linear applied at the group_size T positions of its samples.
* ``nn.Conv2d`` (zero padding): U = unfold(a) [K, T] with K = C_in k_h k_w / groups,
  T = H_out W_out, y = W U + c, dl/dW = G U^T. ``nn.Conv1d`` runs as a Conv2d of height 1.
* ``nn.GroupNorm``: y = gamma a_hat + beta per channel, dl/dgamma_c = sum_s g_cs a_hat_cs,
  dl/dbeta_c = sum_s g_cs over positions s.

A weight norm takes the cheaper route: form G U^T (~ T K O multiply-adds) or the double sum
through the Gram matrices U^T U and G^T G (~ T^2 (K + O)). Rows are summed in float32, then
accumulated in float64; intermediates come in chunks within :data:`CHUNK_BUDGET_FLOATS`.

Scope: every parameter is the ``weight`` or ``bias`` of one of :data:`SUPPORTED_LAYERS`, zero
padding, no shared parameter, each layer once per forward, samples computed apart.
:func:`unsupported_reasons` checks the static part; the rest raises
:class:`UnsupportedModelError` during the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)
from torch.nn.grad import conv2d_weight
from torch.utils.hooks import RemovableHandle

#: Per-sample intermediate floats one layer holds at once (64 Mi floats = 256 MB).
CHUNK_BUDGET_FLOATS = 64 * 1024 * 1024
#: Layer types whose parameters get per-sample gradient norms.
SUPPORTED_LAYERS: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.GroupNorm)
#: Dimensions of a batched input of each convolution type ([b, C_in, *spatial]).
_CONV_INPUT_DIMS: dict[type[nn.Module], int] = {nn.Conv1d: 3, nn.Conv2d: 4}


class UnsupportedModelError(ValueError):
    """The model has a parameter or a use of a layer outside this module's scope."""


def row_sq_sums(x: torch.Tensor) -> torch.Tensor:
    """Sum of squares of each row ``x[i]`` (summed in ``x``'s dtype), float64 [x.shape[0]]."""
    return x.reshape(int(x.shape[0]), -1).square().sum(dim=1).double()


def _chunk(per_item_floats: int, chunk_size: int | None) -> int:
    """Items per chunk: ``chunk_size`` if given, else as many as fit the float budget."""
    return chunk_size or max(1, CHUNK_BUDGET_FLOATS // max(per_item_floats, 1))


def _gram_is_cheaper(t: int, k: int, o: int) -> bool:
    """Whether T^2 (K + O + 1) multiply-adds (Gram route) undercut T K O + K O (forming)."""
    return t * t * (k + o + 1) < t * k * o + k * o


def gram_sq_norms(u: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """||G_i U_i^T||_F^2 from the Gram matrices of ``u`` [n, K, T] and ``g`` [n, O, T]."""
    uu = torch.bmm(u.transpose(1, 2), u).double()
    gg = torch.bmm(g.transpose(1, 2), g).double()
    return (uu * gg).sum(dim=(1, 2))


def linear_sq_norms(
    module: nn.Linear,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int = 1,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-group ||sum_i dl_i/dW||^2 + ||sum_i dl_i/dc||^2 of a Linear, float64 [N].

    ``a``: its input, ``g``: its output's gradient; ``chunk_size`` groups per chunk.
    """
    n = int(a.shape[0]) // group_size
    u = a.reshape(n, -1, module.in_features).transpose(1, 2)  # [N, K, T]
    gm = g.reshape(n, -1, module.out_features).transpose(1, 2)  # [N, O, T]
    k, t, o = int(u.shape[1]), int(u.shape[2]), int(gm.shape[1])
    total = row_sq_sums(gm.sum(dim=2)) if module.bias is not None else 0.0
    if t == 1:
        return row_sq_sums(u) * row_sq_sums(gm) + total
    use_gram = _gram_is_cheaper(t, k, o)
    chunk = _chunk(2 * t * t if use_gram else o * k, chunk_size)
    parts = []
    for start in range(0, n, chunk):
        uc, gc = u[start : start + chunk], gm[start : start + chunk]
        parts.append(gram_sq_norms(uc, gc) if use_gram else row_sq_sums(torch.bmm(gc, uc.mT)))
    return torch.cat(parts) + total


def conv_sq_norms(
    module: nn.Conv1d | nn.Conv2d,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int = 1,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """The same for a Conv2d or Conv1d (Gram route, or one weight-gradient convolution)."""
    padding: tuple[int, ...] = module.padding  # type: ignore[assignment]  # checked in scope
    kernel, stride, dilation = module.kernel_size, module.stride, module.dilation
    if isinstance(module, nn.Conv1d):  # a Conv2d of height 1
        a, g = a.unsqueeze(2), g.unsqueeze(2)
        kernel, stride, dilation = ((1, *pair) for pair in (kernel, stride, dilation))
        padding = (0, *padding)
    (b, c_in, h, w), (o, h_out, w_out) = a.shape, g.shape[1:]
    n, t = b // group_size, h_out * w_out
    k = c_in // module.groups * kernel[0] * kernel[1]
    parts = []
    if group_size == 1 and module.groups == 1 and _gram_is_cheaper(t, k, o):
        chunk = _chunk(k * t + 2 * t * t, chunk_size)
        for start in range(0, b, chunk):
            ac, gc = a[start : start + chunk], g[start : start + chunk]
            u = F.unfold(ac, kernel, dilation=dilation, padding=padding, stride=stride)
            parts.append(gram_sq_norms(u, gc.reshape(len(ac), o, t)))
    else:
        chunk = _chunk(o * k + group_size * (c_in * h * w + o * t), chunk_size)
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            rows = slice(start * group_size, (start + m) * group_size)
            # [m, s, C, H, W] -> [s, m C, H, W]: the samples are the batch, the groups channels.
            ac = a[rows].reshape(m, group_size, c_in, h, w).transpose(0, 1)
            gc = g[rows].reshape(m, group_size, o, h_out, w_out).transpose(0, 1)
            gw = conv2d_weight(
                ac.reshape(group_size, m * c_in, h, w),
                (m * o, c_in // module.groups, *kernel),
                gc.reshape(group_size, m * o, h_out, w_out),
                stride=stride,
                padding=padding,
                dilation=dilation,
                groups=m * module.groups,
            )
            parts.append(row_sq_sums(gw.reshape(m, -1)))
    total = torch.cat(parts)
    if module.bias is not None:
        total = total + row_sq_sums(g.sum(dim=(2, 3)).reshape(n, group_size, o).sum(dim=1))
    return total


def group_norm_sq_norms(
    module: nn.GroupNorm,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int = 1,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """The same for a GroupNorm's gamma and beta (a_hat recomputed; ``chunk_size`` unread)."""
    b, c = int(a.shape[0]), module.num_channels
    n = b // group_size
    a_hat = F.group_norm(a, module.num_groups, eps=module.eps).reshape(b, c, -1)
    gm = g.reshape(b, c, -1)
    total = torch.zeros(n, dtype=torch.float64, device=a.device)
    if module.weight is not None:
        total = total + row_sq_sums((a_hat * gm).sum(dim=2).reshape(n, group_size, c).sum(1))
    if module.bias is not None:
        total = total + row_sq_sums(gm.sum(dim=2).reshape(n, group_size, c).sum(dim=1))
    return total


@dataclass(frozen=True)
class PerSampleNorms:
    """Squared gradient norms per sample [b] and per group [N] (float64)."""

    sq_norms: torch.Tensor
    group_sq_norms: torch.Tensor


def unsupported_reasons(model: nn.Module) -> list[str]:
    """Why :func:`per_sample_grad_norms` cannot handle ``model`` (empty: it can), statically."""
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


#: The layer formulas by layer type: ``(module, a, g, group_size, *, chunk_size) -> float64 [N]``.
LAYER_SQ_NORMS: dict[type[nn.Module], Callable[..., torch.Tensor]] = {
    nn.Linear: linear_sq_norms,
    nn.Conv1d: conv_sq_norms,
    nn.Conv2d: conv_sq_norms,
    nn.GroupNorm: group_norm_sq_norms,
}


def per_sample_grad_norms(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    group_size: int | None = None,
    chunk_size: int | None = None,
) -> PerSampleNorms:
    """:class:`PerSampleNorms` of ``x`` [b, ...] (N groups of ``group_size``, default b), ``y``.

    One forward and one backward of ``sum_i l_i`` through ``model`` in its current mode; the
    model is left unchanged; frozen parameters count too. Raises UnsupportedModelError for a
    model outside the scope (statically, or during the pass).
    """
    reasons = unsupported_reasons(model)
    if reasons:
        raise UnsupportedModelError("; ".join(reasons))
    b = int(y.shape[0])
    size = b if group_size is None else group_size
    params = list(model.parameters())
    device = params[0].device
    x, y = x.to(device), y.to(device)
    sq_norms = torch.zeros(b, dtype=torch.float64, device=device)
    group_sq = torch.zeros(b // size, dtype=torch.float64, device=device)
    calls: dict[nn.Module, int] = {}
    targets: list[torch.Tensor] = []
    handles: list[RemovableHandle] = []
    errors: list[str] = []

    def make_grad_hook(module: nn.Module, a: torch.Tensor) -> Callable[[torch.Tensor], None]:
        def grad_hook(g: torch.Tensor) -> None:
            # Fired by the backward with dl/d(output) for the output's value before any later
            # in-place change (e.g. ReLU(inplace=True)), which is the layer's own output.
            norms = LAYER_SQ_NORMS[type(module)]
            with torch.no_grad():
                sq_norms.add_(norms(module, a, g.detach(), chunk_size=chunk_size))
                group_sq.add_(norms(module, a, g.detach(), size, chunk_size=chunk_size))

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
    return PerSampleNorms(sq_norms=sq_norms, group_sq_norms=group_sq)
