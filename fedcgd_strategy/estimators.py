"""Estimates of σ and G (or G_c) from what the devices report, paper Section IV-C.

The choices the paper leaves open are in docs/design.md, "Estimating G". Vectorised over the
parameter axis P; the only loops run over the K uploading devices. Pure numpy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Devices whose label distribution is within this L1 distance of the target distribution are
#: left out of the maxima of eqs. (G_est) and (Gc_est): their ratio would divide by ~0.
SAME_DISTRIBUTION_TOL = 1e-12


def _as_gradients(device_grads: ArrayLike) -> NDArray[np.floating]:
    """Device gradients float[K, P]; float32 input stays float32 (no copy)."""
    g = np.asarray(device_grads)
    return g if np.issubdtype(g.dtype, np.floating) else g.astype(np.float64)


def estimate_global_sigma(sigma_v: ArrayLike, weights: ArrayLike) -> float:
    """Global sampling-variance estimate σ̂, paper eq. (global_est_sigma).

    σ̂ = sqrt(Σ_v α_v σ̂_v²) with α_v = |D_v| / Σ_u |D_u| over the reporting devices; same unit
    as σ̂_v (gradient norm). ``sigma_v`` float[K], σ̂_v of paper eq. (local_est_sigma), finite,
    >= 0, K >= 1; ``weights`` float[K], |D_v| of the same devices, finite, >= 0, positive sum.
    """
    s = np.asarray(sigma_v, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    alpha = w / w.sum()
    return float(np.sqrt(np.dot(alpha, s * s)))


def device_gradient_estimates(
    updates: ArrayLike, learning_rate: float, local_steps: int
) -> NDArray[np.floating]:
    """Device gradient estimates ∇f̂_v = (w_v^{(j+1)} − w_v^{(j)}) / (τ η), paper Section IV-C.

    The negative mean SGD gradient (only norms of differences use it, so the sign is irrelevant)
    from ``updates`` float[K, P], the flattened updates of the K uploading devices, η > 0 and
    τ >= 1. Returns float[K, P] in the floating dtype of ``updates`` (float64 for integers or
    when the scaled values would overflow that dtype).
    """
    u = _as_gradients(updates)
    scale = 1.0 / (int(local_steps) * float(learning_rate))
    if u.size and max(float(u.max()), -float(u.min())) * scale > float(np.finfo(u.dtype).max):
        u = u.astype(np.float64)  # the scaled values would overflow the input's precision
    return u * u.dtype.type(scale)


def gradient_divergence_norms(device_grads: ArrayLike, weights: ArrayLike) -> NDArray[np.float64]:
    """Norms ||∇f̂_v − ∇F̂||₂, float64 [K], paper Section IV-C.

    ∇F̂ = Σ_v α_v ∇f̂_v with α_v = |D_v| / Σ_u |D_u| over the K uploading devices (the unnumbered
    equation before eq. (Gc_est)); ``device_grads`` float[K, P], ``weights`` float[K].
    """
    g = _as_gradients(device_grads)
    k = g.shape[0]
    w = np.asarray(weights, dtype=np.float64)
    alpha = w / w.sum()
    # Loops run over the K ~ 20 devices only; each step is one vectorised float64 pass over P
    # (a mixed float32/float64 matrix product would bypass BLAS and be ~20x slower).
    global_grad = np.zeros(g.shape[1], dtype=np.float64)
    for v in range(k):
        global_grad += alpha[v] * g[v]
    norms = np.empty(k, dtype=np.float64)
    for v in range(k):
        diff = g[v] - global_grad
        norms[v] = np.sqrt(np.dot(diff, diff))
    return norms


def _divergence_ratios(
    device_grads: ArrayLike,
    weights: ArrayLike,
    label_dist: ArrayLike,
    target_dist: ArrayLike,
) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.float64]]:
    """Ratios ||∇f̂_v − ∇F̂|| / ||p_v − p||₁, the usable-device mask and p_v."""
    g = _as_gradients(device_grads)
    k = g.shape[0]
    if k == 0:  # nobody uploaded: nothing to estimate from (label_dist may be any empty array)
        empty = np.zeros(0, dtype=np.float64)
        return empty, np.zeros(0, dtype=bool), np.zeros((0, 0), dtype=np.float64)
    p_v = np.asarray(label_dist, dtype=np.float64)
    p = np.asarray(target_dist, dtype=np.float64)
    norms = gradient_divergence_norms(g, weights)
    l1 = np.abs(p_v - p[None, :]).sum(axis=1)
    usable = l1 > SAME_DISTRIBUTION_TOL
    ratios = np.zeros(k, dtype=np.float64)
    ratios[usable] = norms[usable] / l1[usable]
    return ratios, usable, p_v


def estimate_class_gradient(
    device_grads: ArrayLike,
    weights: ArrayLike,
    label_dist: ArrayLike,
    target_dist: ArrayLike,
    previous: float,
) -> float:
    """Class-gradient bound Ĝ, paper eq. (G_est).

    Ĝ = max_v ||∇f̂_v − ∇F̂||₂ / ||p_v − p||₁ over the K uploading devices (gradient-norm units per
    unit of L1 distance). Devices with ||p_v − p||₁ <= :data:`SAME_DISTRIBUTION_TOL` are left out;
    when none is left (or K = 0), ``previous`` (Ĝ of the previous round, finite, >= 0) is
    returned. ``device_grads`` float[K, P] are ∇f̂_v (:func:`device_gradient_estimates`),
    ``weights`` float[K] |D_v|, ``label_dist`` float[K, C] the p_v, ``target_dist`` float[C] p.
    """
    ratios, usable, _ = _divergence_ratios(device_grads, weights, label_dist, target_dist)
    return float(ratios[usable].max()) if usable.any() else float(previous)


def estimate_per_class_gradient(
    device_grads: ArrayLike,
    weights: ArrayLike,
    label_dist: ArrayLike,
    target_dist: ArrayLike,
    previous: ArrayLike,
) -> NDArray[np.float64]:
    """Per-class gradient bounds Ĝ_c, float[C], paper eq. (Gc_est).

    Each device is assigned its dominant class argmax_c p_{v,c} (ties: lowest index);
    Ĝ_c = max_{v: class(v) = c} ||∇f̂_v − ∇F̂||₂ / ||p_v − p||₁ with ∇F̂ over all K devices.
    Classes with no usable device keep ``previous[c]`` (float[C]). Other arguments as in
    :func:`estimate_class_gradient`.
    """
    prev = np.asarray(previous, dtype=np.float64)
    ratios, usable, p_v = _divergence_ratios(device_grads, weights, label_dist, target_dist)
    out = prev.copy()
    if p_v.shape[0] == 0:
        return out
    dominant = np.argmax(p_v, axis=1)
    best = np.full(prev.shape[0], -np.inf)
    np.maximum.at(best, dominant[usable], ratios[usable])
    seen = np.isfinite(best)
    out[seen] = best[seen]
    return out
