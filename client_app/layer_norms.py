"""Squared gradient norms of one layer: per sample, and per group of samples.

The formulas behind :func:`client_app.per_sample_norms.per_sample_grad_norms`. Each function
takes a layer, its input ``a`` (captured by a forward hook) and the gradient ``g`` of the
per-sample losses with respect to its output (captured by a tensor hook during the backward of
the summed loss) and returns, without a backward pass per sample:

* per sample i (``*_sq_norms``): ||dl_i/dW||^2 + ||dl_i/dc||^2, the squared norm of sample i's
  gradient with respect to the layer's weight W and bias c;
* per group (``*_group_sq_norms``): ||sum_{i in group} dl_i/dW||^2 + ||sum_{i in group}
  dl_i/dc||^2, the squared norm of the summed gradient of a group of consecutive samples (the
  batch is ``[N groups x group_size samples]``). With one group this is ||sum_i grad l_i||^2,
  hence b^2 ||g_bar||^2 in sigma-hat (paper eq. (local_est_sigma)); with one group per device
  it is the same quantity for every device of a cohort at once.

Layer formulas (sample i; T output positions, K = input features per position, O outputs):

* ``nn.Linear`` (y_t = W a_t + c, input [b, *, K] flattened to T positions):
  dl_i/dW = sum_t g_t a_t^T, so ||dl_i/dW||_F^2 = sum_{t,t'} (a_t . a_t') (g_t . g_t'),
  which is ||a||^2 ||g||^2 when T = 1; dl_i/dc = sum_t g_t. A group's summed gradient is
  the same sum over the T positions of all its samples: a Linear applied at group_size T
  positions.
* ``nn.Conv2d`` (zero padding): the same with U = unfold(a), shape [K, T],
  K = C_in k_h k_w, T = H_out W_out: y = W_mat U + c, dl_i/dW_mat = G U^T with G [O, T]. A
  group's summed weight gradient is one weight-gradient convolution over its samples.
* ``nn.Conv1d`` (zero padding): a Conv2d of height 1 (input [C_in, 1, L], kernel 1 x k, stride,
  padding and dilation 1 / 0 / 1 in height), so the same formulas with K = C_in k, T = L_out.
* ``nn.GroupNorm``: y = gamma * a_hat + beta per channel, with a_hat the normalised input, so
  dl_i/dgamma_c = sum_s g_cs a_hat_cs and dl_i/dbeta_c = sum_s g_cs over spatial positions s.

Each per-sample weight norm is taken by the cheaper of two routes for the layer's shape: form the
per-sample weight gradients G U^T ([b, O, K], ~ T K O multiply-adds per sample; for a convolution
via one weight-gradient convolution with one group per sample, see :func:`conv2d_sq_norms`), or
evaluate the double sum through the two T x T Gram matrices U^T U and G^T G (~ T^2 (K + O),
:func:`gram_sq_norms`), which wins when a layer has few output positions (T = 1 for a plain
Linear, 1 to 16 in the deeper ResNet stages on 32 x 32 images). Sums of squares are accumulated
in float64: each row of a per-sample tensor is summed in float32 by torch's cascade (pairwise)
summation, whose relative error, ~1e-7, is below the float32 rounding of the gradients
themselves, and these row sums are accumulated over layers and samples in float64.

Memory: per-sample and per-group intermediates are formed in chunks of samples (or groups)
that fit :data:`CHUNK_BUDGET_FLOATS`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)
from torch.nn.grad import conv2d_weight

#: Upper bound on the per-sample intermediate floats one layer holds at once (64 Mi floats =
#: 256 MB); the samples of a layer are processed in chunks that fit it.
CHUNK_BUDGET_FLOATS = 64 * 1024 * 1024


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
    return _conv_sq_norms(a, g, **_conv2d_geometry(module), chunk_size=chunk_size)


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
    geometry = _conv1d_geometry(module)
    return _conv_sq_norms(a.unsqueeze(2), g.unsqueeze(2), **geometry, chunk_size=chunk_size)


def _conv2d_geometry(module: nn.Conv2d) -> dict[str, Any]:
    """The keyword arguments of :func:`_conv_sq_norms` / :func:`_conv_group_sq_norms`."""
    padding: tuple[int, int] = module.padding  # type: ignore[assignment]  # checked in scope
    return {
        "kernel_size": (module.kernel_size[0], module.kernel_size[1]),
        "stride": (module.stride[0], module.stride[1]),
        "padding": padding,
        "dilation": (module.dilation[0], module.dilation[1]),
        "groups": module.groups,
        "has_bias": module.bias is not None,
    }


def _conv1d_geometry(module: nn.Conv1d) -> dict[str, Any]:
    """A Conv1d as a Conv2d of height 1: kernel 1 x k, no stride, padding or dilation in height."""
    padding: tuple[int] = module.padding  # type: ignore[assignment]  # checked in scope
    return {
        "kernel_size": (1, module.kernel_size[0]),
        "stride": (1, module.stride[0]),
        "padding": (0, padding[0]),
        "dilation": (1, module.dilation[0]),
        "groups": module.groups,
        "has_bias": module.bias is not None,
    }


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


def groups_of(n: int, group_size: int) -> int:
    """Number of groups N of ``group_size`` consecutive samples in a batch of ``n`` (checked)."""
    if group_size < 1 or n % group_size:
        raise ValueError(
            f"a batch of {n} samples does not split into groups of {group_size} (need a "
            "positive group size that divides the batch)"
        )
    return n // group_size


def linear_group_sq_norms(
    module: nn.Linear,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-group ||sum_i dl_i/dW||^2 + ||sum_i dl_i/dc||^2 of a Linear layer.

    The summed gradient of a group is that of one Linear applied at the T positions of all its
    samples, so this is :func:`linear_sq_norms` on the input viewed as [N, group_size T, K].

    Parameters
    ----------
    module : torch.nn.Linear
        The layer (K = in_features, O = out_features).
    a : torch.Tensor, shape [N group_size, *, K]
        Its input, groups of ``group_size`` consecutive samples.
    g : torch.Tensor, shape [N group_size, *, O]
        Gradient of the per-sample losses with respect to its output.
    group_size : int
        Samples per group.
    chunk_size : int, optional
        Groups per chunk (memory only).

    Returns
    -------
    torch.Tensor of float64, shape [N]

    """
    n = groups_of(int(a.shape[0]), group_size)
    a_groups = a.reshape(n, -1, module.in_features)
    g_groups = g.reshape(n, -1, module.out_features)
    return linear_sq_norms(module, a_groups, g_groups, chunk_size=chunk_size)


def conv2d_group_sq_norms(
    module: nn.Conv2d,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-group ||sum_i dl_i/dW||^2 + ||sum_i dl_i/dc||^2 of a Conv2d layer.

    A group's summed weight gradient is the weight gradient of the layer over the group's
    samples; the groups of a chunk are computed by one weight-gradient convolution
    (:func:`torch.nn.grad.conv2d_weight`) in which each group is a group of channels and its
    samples are the batch.

    Parameters
    ----------
    module : torch.nn.Conv2d
        The layer (zero padding).
    a : torch.Tensor, shape [N group_size, C_in, H, W]
        Its input, groups of ``group_size`` consecutive samples.
    g : torch.Tensor, shape [N group_size, O, H_out, W_out]
        Gradient of the per-sample losses with respect to its output.
    group_size : int
        Samples per group.
    chunk_size : int, optional
        Groups per chunk (memory only).

    Returns
    -------
    torch.Tensor of float64, shape [N]

    """
    geometry = _conv2d_geometry(module)
    return _conv_group_sq_norms(a, g, group_size, **geometry, chunk_size=chunk_size)


def conv1d_group_sq_norms(
    module: nn.Conv1d,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-group norms of a Conv1d layer: :func:`conv2d_group_sq_norms` at height 1.

    Parameters
    ----------
    module : torch.nn.Conv1d
        The layer (zero padding).
    a : torch.Tensor, shape [N group_size, C_in, L]
        Its input, groups of ``group_size`` consecutive samples.
    g : torch.Tensor, shape [N group_size, O, L_out]
        Gradient of the per-sample losses with respect to its output.
    group_size : int
        Samples per group.
    chunk_size : int, optional
        Groups per chunk (memory only).

    Returns
    -------
    torch.Tensor of float64, shape [N]

    """
    geometry = _conv1d_geometry(module)
    return _conv_group_sq_norms(
        a.unsqueeze(2), g.unsqueeze(2), group_size, **geometry, chunk_size=chunk_size
    )


def _conv_group_sq_norms(
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int,
    *,
    kernel_size: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
    has_bias: bool,
    chunk_size: int | None,
) -> torch.Tensor:
    """:func:`conv2d_group_sq_norms` for a 2-D convolution given by its geometry."""
    b, c_in, h, w = (int(s) for s in a.shape)
    n = groups_of(b, group_size)
    o = int(g.shape[1])
    h_out, w_out = int(g.shape[2]), int(g.shape[3])
    k = (c_in // groups) * kernel_size[0] * kernel_size[1]
    per_group = o * k + group_size * (c_in * h * w + o * h_out * w_out)
    chunk = _chunk(per_group, chunk_size)
    parts = []
    for start in range(0, n, chunk):
        rows = slice(start * group_size, (start + chunk) * group_size)
        m = min(chunk, n - start)
        # [m, s, C, H, W] -> [s, m C, H, W]: the samples are the batch, the groups channels.
        ac = a[rows].reshape(m, group_size, c_in, h, w).transpose(0, 1)
        gc = g[rows].reshape(m, group_size, o, h_out, w_out).transpose(0, 1)
        gw = conv2d_weight(
            ac.reshape(group_size, m * c_in, h, w),
            (m * o, c_in // groups, *kernel_size),
            gc.reshape(group_size, m * o, h_out, w_out),
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=m * groups,
        )
        parts.append(row_sq_sums(gw.reshape(m, -1)))
    total = torch.cat(parts)
    if has_bias:
        total = total + row_sq_sums(g.sum(dim=(2, 3)).reshape(n, group_size, o).sum(dim=1))
    return total


def group_norm_group_sq_norms(
    module: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor, group_size: int
) -> torch.Tensor:
    """Per-group ||sum_i dl_i/dgamma||^2 + ||sum_i dl_i/dbeta||^2 of a GroupNorm layer.

    Parameters
    ----------
    module : torch.nn.GroupNorm
        The layer (C channels, affine).
    a : torch.Tensor, shape [N group_size, C, *]
        Its input (normalised per sample, as in the layer).
    g : torch.Tensor, shape [N group_size, C, *]
        Gradient of the per-sample losses with respect to its output.
    group_size : int
        Samples per group.

    Returns
    -------
    torch.Tensor of float64, shape [N]

    """
    b, c = int(a.shape[0]), module.num_channels
    n = groups_of(b, group_size)
    a_hat = F.group_norm(a, module.num_groups, eps=module.eps).reshape(b, c, -1)
    gm = g.reshape(b, c, -1)
    total = torch.zeros(n, dtype=torch.float64, device=a.device)
    if module.weight is not None:
        total = total + row_sq_sums((a_hat * gm).sum(dim=2).reshape(n, group_size, c).sum(1))
    if module.bias is not None:
        total = total + row_sq_sums(gm.sum(dim=2).reshape(n, group_size, c).sum(dim=1))
    return total


def _chunk(per_sample_floats: int, chunk_size: int | None) -> int:
    """Samples per chunk: ``chunk_size`` if given, else as many as fit the float budget."""
    if chunk_size is not None:
        return chunk_size
    return max(1, CHUNK_BUDGET_FLOATS // max(per_sample_floats, 1))


def _gram_is_cheaper(t: int, k: int, o: int) -> bool:
    """Whether T^2 (K + O + 1) multiply-adds (Gram route) undercut T K O + K O (forming)."""
    return t * t * (k + o + 1) < t * k * o + k * o
