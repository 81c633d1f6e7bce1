"""Per-sample squared gradient norms ||grad l_i(w)||^2 from one forward + backward pass.

Used by :func:`client_app.sigma.gradient_spread` for sigma-hat_v of paper eq.
(local_est_sigma). One backward of the *summed* per-sample loss sum_i l_i gives, at the output
of every parametrised layer, the per-sample output gradient dl_i/dy_i (the samples do not
interact: the layers act per sample, see "Scope" below). Together with the layer's input
activations, captured by a forward hook, these give the squared norm of each sample's gradient
with respect to that layer's parameters, layer by layer, without a backward pass per sample and
without holding the b per-sample gradients of the whole model at once. The same backward also
yields the ordinary gradient sum_i grad l_i, hence ||mean gradient||^2.

Layer formulas (sample i; T output positions, K = input features per position, O outputs):

* ``nn.Linear`` (y_t = W a_t + c, input [b, *, K] flattened to T positions):
  dl_i/dW = sum_t g_t a_t^T, so ||dl_i/dW||_F^2 = sum_{t,t'} (a_t . a_t') (g_t . g_t'),
  which is ||a||^2 ||g||^2 when T = 1; dl_i/dc = sum_t g_t.
* ``nn.Conv2d`` (zero padding): the same with U = unfold(a), shape [K, T],
  K = C_in k_h k_w, T = H_out W_out: y = W_mat U + c, dl_i/dW_mat = G U^T with G [O, T].
* ``nn.Conv1d`` (zero padding): a Conv2d of height 1 (input [C_in, 1, L], kernel 1 x k, stride,
  padding and dilation 1 / 0 / 1 in height), so the same formulas with K = C_in k, T = L_out.
* ``nn.GroupNorm``: y = gamma * a_hat + beta per channel, with a_hat the normalised input, so
  dl_i/dgamma_c = sum_s g_cs a_hat_cs and dl_i/dbeta_c = sum_s g_cs over spatial positions s.

Each weight norm is taken by the cheaper of two routes for the layer's shape: form the per-sample
weight gradients G U^T ([b, O, K], ~ T K O multiply-adds per sample; for a convolution via one
weight-gradient convolution with one group per sample, see :func:`conv2d_sq_norms`), or evaluate
the double sum through the two T x T Gram matrices U^T U and G^T G (~ T^2 (K + O),
:func:`gram_sq_norms`), which wins when a layer has few output positions (T = 1 for a plain Linear,
1 to 16 in the deeper ResNet stages on 32 x 32 images). Sums of squares are accumulated in float64:
each row of a per-sample tensor is summed in float32 by torch's cascade (pairwise) summation, whose
relative error, ~1e-7, is below the float32 rounding of the gradients themselves, and these row
sums are accumulated over layers and samples in float64.

Scope: every parameter must be the ``weight`` or ``bias`` of one of :data:`SUPPORTED_LAYERS` (the
built-in models of :mod:`fedcgd_task.models` use only these), a convolution's input must be batched
([b, C_in, L] or [b, C_in, H, W]), no parameter may be shared, every layer may run at most once per
forward, and the model must treat the samples of a batch independently (true in eval mode;
BatchNorm in training mode would couple them, and it is not supported). :func:`unsupported_reasons`
checks the static part; the rest raises :class:`UnsupportedModelError` during the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)
from torch.nn.grad import conv2d_weight
from torch.utils.hooks import RemovableHandle

#: Layer types whose parameters get per-sample gradient norms.
SUPPORTED_LAYERS: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.GroupNorm)
#: Dimensions of a batched input of each convolution type ([b, C_in, *spatial]).
_CONV_INPUT_DIMS: dict[type[nn.Module], int] = {nn.Conv1d: 3, nn.Conv2d: 4}
#: Upper bound on the per-sample intermediate floats one layer holds at once (64 Mi floats =
#: 256 MB); the samples of a layer are processed in chunks that fit it.
CHUNK_BUDGET_FLOATS = 64 * 1024 * 1024


class UnsupportedModelError(ValueError):
    """The model has a parameter or a use of a layer outside this module's scope."""


@dataclass(frozen=True)
class PerSampleNorms:
    """Result of :func:`per_sample_grad_norms`.

    Attributes
    ----------
    sq_norms : torch.Tensor of float64, shape [b]
        ||grad_w l_i(w)||^2 of each sample i over all model parameters, in (loss units per
        parameter unit)^2.
    sum_grad_sq_norm : float
        ||sum_i grad_w l_i(w)||^2, the squared norm of the gradient of the summed loss, same
        units.
    losses : torch.Tensor of float32, shape [b]
        The per-sample cross-entropies l_i(w), nats.

    """

    sq_norms: torch.Tensor
    sum_grad_sq_norm: float
    losses: torch.Tensor


def unsupported_reasons(model: nn.Module) -> list[str]:
    """List why :func:`per_sample_grad_norms` cannot handle ``model`` (empty when it can).

    Parameters
    ----------
    model : torch.nn.Module
        Any model.

    Returns
    -------
    list of str
        One line per offending module or parameter; run-time conditions (a layer called twice,
        a batch dimension that is not dim 0) are only detected during the pass.

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


def row_sq_sums(x: torch.Tensor) -> torch.Tensor:
    """Return the sum of squares of each row ``x[i]`` as float64, shape [x.shape[0]].

    The squares are summed in ``x``'s dtype with torch's cascade summation (relative error
    ~1e-7 in float32; a float64 reduction of a float32 tensor casts it first and is ~10x
    slower on a CPU) and returned in float64 for the accumulation over layers and samples.
    """
    return x.reshape(int(x.shape[0]), -1).square().sum(dim=1).double()


def gram_sq_norms(u: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Return ||G_i U_i^T||_F^2 = sum_{t,t'} (u_it . u_it') (g_it . g_it') without G_i U_i^T.

    Parameters
    ----------
    u : torch.Tensor, shape [b, K, T]
        Layer inputs per sample and position.
    g : torch.Tensor, shape [b, O, T]
        Per-sample output gradients per position.

    Returns
    -------
    torch.Tensor of float64, shape [b]
        The squared norms, from the two T x T Gram matrices (~ T^2 (K + O) multiply-adds per
        sample; the product of the Grams is summed in float64).

    """
    uu = torch.bmm(u.transpose(1, 2), u).double()
    gg = torch.bmm(g.transpose(1, 2), g).double()
    return (uu * gg).sum(dim=(1, 2))


def weight_sq_norms(
    u: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Return ||G_i U_i^T||_F^2 for each sample i: the per-sample weight-gradient norms.

    ``G_i U_i^T = sum_t g_it u_it^T`` is the gradient of sample i's loss with respect to the
    weight matrix of a Linear layer applied at T positions.

    Parameters
    ----------
    u : torch.Tensor, shape [b, K, T]
        Layer inputs per sample and position.
    g : torch.Tensor, shape [b, O, T]
        Gradients of the per-sample loss with respect to the layer outputs.
    chunk_size : int, optional
        Samples per chunk; default: as many as fit :data:`CHUNK_BUDGET_FLOATS`.

    Returns
    -------
    torch.Tensor of float64, shape [b]
        The squared Frobenius norms, (loss units per weight unit)^2.

    Notes
    -----
    With T = 1 the gradient is the outer product g u^T and its norm is ||u||^2 ||g||^2.
    Otherwise :func:`gram_sq_norms` (~ T^2 (K + O) multiply-adds per sample) is used when it
    is cheaper than forming G U^T with a batched matmul (~ T K O).

    """
    b, k, t = (int(s) for s in u.shape)
    o = int(g.shape[1])
    if int(g.shape[0]) != b or int(g.shape[2]) != t:
        raise ValueError(f"u {tuple(u.shape)} and g {tuple(g.shape)} do not match")
    if t == 1:
        return row_sq_sums(u) * row_sq_sums(g)
    use_gram = _gram_is_cheaper(t, k, o)
    chunk = _chunk(2 * t * t if use_gram else o * k, chunk_size)
    parts = []
    for start in range(0, b, chunk):
        uc, gc = u[start : start + chunk], g[start : start + chunk]
        if use_gram:
            parts.append(gram_sq_norms(uc, gc))
        else:
            gw = torch.bmm(gc, uc.transpose(1, 2))
            parts.append(row_sq_sums(gw))
    return torch.cat(parts)


def linear_sq_norms(
    module: nn.Linear, a: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Per-sample ||dl_i/dW||^2 + ||dl_i/dc||^2 of a Linear layer.

    Parameters
    ----------
    module : torch.nn.Linear
        The layer (K = in_features, O = out_features).
    a : torch.Tensor, shape [b, *, K]
        Its input.
    g : torch.Tensor, shape [b, *, O]
        Gradient of the per-sample losses with respect to its output.
    chunk_size : int, optional
        Samples per chunk (memory only).

    Returns
    -------
    torch.Tensor of float64, shape [b]

    """
    b = int(a.shape[0])
    u = a.reshape(b, -1, module.in_features).transpose(1, 2)
    gm = g.reshape(b, -1, module.out_features).transpose(1, 2)
    total = weight_sq_norms(u, gm, chunk_size=chunk_size)
    if module.bias is not None:
        total = total + row_sq_sums(gm.sum(dim=2))
    return total


def conv2d_sq_norms(
    module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Per-sample ||dl_i/dW||^2 + ||dl_i/dc||^2 of a Conv2d layer.

    Two routes, the cheaper for the layer's shape (K = C_in / groups k_h k_w inputs and
    T = H_out W_out positions per output, O output channels):

    * Gram (groups = 1 only, when T (K + O) < K O, i.e. few output positions):
      :func:`gram_sq_norms` on the unfolded input U = unfold(a_i), [K, T], and G_i, [O, T];
    * otherwise the per-sample weight gradients themselves, [b, O, K], from one weight-gradient
      convolution (:func:`torch.nn.grad.conv2d_weight`) in which each sample is a group of its
      own (the chunk of c samples becomes one image with c C_in channels and c groups).

    Parameters
    ----------
    module : torch.nn.Conv2d
        The layer (C_in -> O channels, kernel k_h x k_w, zero padding).
    a : torch.Tensor, shape [b, C_in, H, W]
        Its input.
    g : torch.Tensor, shape [b, O, H_out, W_out]
        Gradient of the per-sample losses with respect to its output.
    chunk_size : int, optional
        Samples per chunk (memory only); the unfolded input or the per-sample weight
        gradients are formed one chunk at a time.

    Returns
    -------
    torch.Tensor of float64, shape [b]

    """
    padding: tuple[int, int] = module.padding  # type: ignore[assignment]  # checked in scope
    return _conv_sq_norms(
        a,
        g,
        kernel_size=(module.kernel_size[0], module.kernel_size[1]),
        stride=(module.stride[0], module.stride[1]),
        padding=padding,
        dilation=(module.dilation[0], module.dilation[1]),
        groups=module.groups,
        has_bias=module.bias is not None,
        chunk_size=chunk_size,
    )


def conv1d_sq_norms(
    module: nn.Conv1d, a: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Per-sample ||dl_i/dW||^2 + ||dl_i/dc||^2 of a Conv1d layer.

    A Conv1d of kernel k is a Conv2d of kernel 1 x k on inputs of height 1: the input
    [b, C_in, L] is viewed as [b, C_in, 1, L], the output gradient [b, O, L_out] as
    [b, O, 1, L_out], and the stride, padding and dilation in height are 1, 0 and 1. The
    weights and the per-sample gradients are the same numbers, so :func:`conv2d_sq_norms`'s
    routes apply unchanged (K = C_in / groups k, T = L_out).

    Parameters
    ----------
    module : torch.nn.Conv1d
        The layer (C_in -> O channels, kernel k, zero padding).
    a : torch.Tensor, shape [b, C_in, L]
        Its input.
    g : torch.Tensor, shape [b, O, L_out]
        Gradient of the per-sample losses with respect to its output.
    chunk_size : int, optional
        Samples per chunk (memory only).

    Returns
    -------
    torch.Tensor of float64, shape [b]

    """
    padding: tuple[int] = module.padding  # type: ignore[assignment]  # checked in scope
    return _conv_sq_norms(
        a.unsqueeze(2),
        g.unsqueeze(2),
        kernel_size=(1, module.kernel_size[0]),
        stride=(1, module.stride[0]),
        padding=(0, padding[0]),
        dilation=(1, module.dilation[0]),
        groups=module.groups,
        has_bias=module.bias is not None,
        chunk_size=chunk_size,
    )


def _conv_sq_norms(
    a: torch.Tensor,
    g: torch.Tensor,
    *,
    kernel_size: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
    has_bias: bool,
    chunk_size: int | None,
) -> torch.Tensor:
    """:func:`conv2d_sq_norms` for a 2-D convolution given by its geometry.

    ``a`` [b, C_in, H, W] and ``g`` [b, O, H_out, W_out]; the weight has shape
    [O, C_in / groups, *kernel_size].
    """
    b, c_in, h, w = (int(s) for s in a.shape)
    o = int(g.shape[1])
    h_out, w_out = int(g.shape[2]), int(g.shape[3])
    t = h_out * w_out
    k = (c_in // groups) * kernel_size[0] * kernel_size[1]
    use_gram = groups == 1 and _gram_is_cheaper(t, k, o)
    chunk = _chunk(k * t + 2 * t * t if use_gram else o * k, chunk_size)
    parts = []
    for start in range(0, b, chunk):
        ac, gc = a[start : start + chunk], g[start : start + chunk]
        n = int(ac.shape[0])
        if use_gram:
            u = F.unfold(
                ac, kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride
            )
            parts.append(gram_sq_norms(u, gc.reshape(n, o, t)))
        else:
            gw = conv2d_weight(
                ac.reshape(1, n * c_in, h, w),
                (n * o, c_in // groups, *kernel_size),
                gc.reshape(1, n * o, h_out, w_out),
                stride=stride,
                padding=padding,
                dilation=dilation,
                groups=n * groups,
            )
            parts.append(row_sq_sums(gw.reshape(n, -1)))
    total = torch.cat(parts)
    if has_bias:
        total = total + row_sq_sums(g.sum(dim=(2, 3)))
    return total


def group_norm_sq_norms(module: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample ||dl_i/dgamma||^2 + ||dl_i/dbeta||^2 of a GroupNorm layer.

    Parameters
    ----------
    module : torch.nn.GroupNorm
        The layer (C channels, affine).
    a : torch.Tensor, shape [b, C, *]
        Its input; the normalised input a_hat is recomputed from it.
    g : torch.Tensor, shape [b, C, *]
        Gradient of the per-sample losses with respect to its output.

    Returns
    -------
    torch.Tensor of float64, shape [b]

    """
    b, c = int(a.shape[0]), module.num_channels
    a_hat = F.group_norm(a, module.num_groups, eps=module.eps).reshape(b, c, -1)
    gm = g.reshape(b, c, -1)
    total = torch.zeros(b, dtype=torch.float64, device=a.device)
    if module.weight is not None:
        total = total + row_sq_sums((a_hat * gm).sum(dim=2))
    if module.bias is not None:
        total = total + row_sq_sums(gm.sum(dim=2))
    return total


def per_sample_grad_norms(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, chunk_size: int | None = None
) -> PerSampleNorms:
    """Compute ||grad l_i(w)||^2 for every sample and ||sum_i grad l_i(w)||^2 in one pass.

    One forward pass of ``x`` and one backward pass of ``sum_i l_i`` (l_i the cross-entropy of
    sample i) through ``model`` as it is (the caller picks train/eval mode; see the module
    docstring for the scope). The model is left unchanged: no hook stays registered, ``.grad``
    is neither read nor written (the gradient comes from :func:`torch.autograd.grad`), and the
    parameters' ``requires_grad`` flags are restored. Every parameter counts, frozen or not.

    Parameters
    ----------
    model : torch.nn.Module
        A classifier within the scope of :func:`unsupported_reasons`.
    x : torch.Tensor, shape [b, ...]
        Inputs (moved to the model's device).
    y : torch.Tensor of int64, shape [b]
        Labels.
    chunk_size : int, optional
        Samples per chunk of the per-layer, per-sample computations (memory only); default:
        as many as fit :data:`CHUNK_BUDGET_FLOATS` for each layer.

    Returns
    -------
    PerSampleNorms
        Per-sample squared gradient norms (float64 [b]), the squared norm of the summed
        gradient and the per-sample losses.

    Raises
    ------
    UnsupportedModelError
        If ``model`` is outside the scope (statically, or a layer ran twice or saw a batch
        dimension other than b).

    """
    reasons = unsupported_reasons(model)
    if reasons:
        raise UnsupportedModelError("; ".join(reasons))
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1; got {chunk_size}")
    b = int(y.shape[0])
    params = list(model.parameters())
    device = params[0].device
    x, y = x.to(device), y.to(device)
    sq_norms = torch.zeros(b, dtype=torch.float64, device=device)
    calls: dict[nn.Module, int] = {}
    handles: list[RemovableHandle] = []
    errors: list[str] = []

    def layer_norms(module: nn.Module, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        if isinstance(module, nn.Linear):
            return linear_sq_norms(module, a, g, chunk_size=chunk_size)
        if isinstance(module, nn.Conv1d):
            return conv1d_sq_norms(module, a, g, chunk_size=chunk_size)
        if isinstance(module, nn.Conv2d):
            return conv2d_sq_norms(module, a, g, chunk_size=chunk_size)
        if isinstance(module, nn.GroupNorm):
            return group_norm_sq_norms(module, a, g)
        raise UnsupportedModelError(f"no per-sample norm for {type(module).__name__}")

    def make_grad_hook(module: nn.Module, a: torch.Tensor) -> Callable[[torch.Tensor], None]:
        def grad_hook(g: torch.Tensor) -> None:
            # Fired by the backward with dl/d(output) for the output's value before any later
            # in-place change (e.g. ReLU(inplace=True)), which is the layer's own output.
            with torch.no_grad():
                sq_norms.add_(layer_norms(module, a, g.detach()))

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
            grads = torch.autograd.grad(losses.sum(), params, allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
        for p, flag in zip(params, flags, strict=True):
            p.requires_grad_(flag)
    sum_sq = sum((float(row_sq_sums(gr.unsqueeze(0))) for gr in grads if gr is not None), 0.0)
    return PerSampleNorms(sq_norms=sq_norms, sum_grad_sq_norm=sum_sq, losses=losses.detach())


def _chunk(per_sample_floats: int, chunk_size: int | None) -> int:
    """Samples per chunk: ``chunk_size`` if given, else as many as fit the float budget."""
    if chunk_size is not None:
        return chunk_size
    return max(1, CHUNK_BUDGET_FLOATS // max(per_sample_floats, 1))


def _gram_is_cheaper(t: int, k: int, o: int) -> bool:
    """Whether T^2 (K + O + 1) multiply-adds (Gram route) undercut T K O + K O (forming)."""
    return t * t * (k + o + 1) < t * k * o + k * o
