"""Whether a model computes each device's samples apart from the others' (cohort's assumption).

The batched σ̂ pass stacks several devices' first batches (docs/design.md, "Cohort execution").
"""

from __future__ import annotations

import copy
import math
from collections.abc import MutableMapping

import torch
from torch import nn

from fedcgd_task.imports import first_line

#: Largest change of a device's outputs, relative to their largest magnitude, that
#: :func:`sample_mixing` accepts between the device's batch alone and in a cohort's batch. The
#: check runs in float64, whose rounding differences between the two batch sizes stay below
#: ~1e-12 here (fewer than 1e4 roundings of 1.1e-16); 1e-6 lies far above them and about at
#: the relative rounding of a float32 forward pass, so a model that passes mixes the devices by
#: less than the float32 computation resolves.
MIXING_TOLERANCE = 1e-6
#: Samples of each of two devices :func:`sample_mixing` computes together and apart.
MIXING_PROBE_SAMPLES = 4


def _structure(model: nn.Module) -> tuple[object, ...]:
    """What :func:`sample_mixing`'s verdict depends on: the module types and the state's shapes."""
    modules = tuple((name, type(module)) for name, module in model.named_modules())
    state = tuple((name, tuple(t.shape), t.dtype) for name, t in model.state_dict().items())
    return (modules, state)


def sample_mixing(
    model: nn.Module,
    x: torch.Tensor,
    *,
    group_size: int,
    verdicts: MutableMapping[tuple[object, ...], str | None] | None = None,
) -> str | None:
    """Why the samples of one group in ``x`` are not computed apart from the others; None: they are.

    The model's eval-mode outputs for all of ``x`` (N >= 2 groups of ``group_size`` samples) are
    compared with each group's alone, on a float64 copy, without gradients or the global random
    stream: a change above :data:`MIXING_TOLERANCE` of the largest output, or a model that cannot
    run so, is the reason returned (one line). ``verdicts`` keeps them by model structure (module
    types and state shapes); non-finite outputs give None and keep nothing. ``model`` is left
    unchanged.
    """
    kept: MutableMapping[tuple[object, ...], str | None] = {} if verdicts is None else verdicts
    key = _structure(model)
    if key in kept:
        return kept[key]
    try:
        twin = copy.deepcopy(model).double().eval()
        device = next(iter(twin.state_dict().values()), x).device
        x64 = x.to(device=device, dtype=torch.float64)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            together = twin(x64)
            apart = torch.cat([twin(group) for group in torch.split(x64, group_size)])
    except Exception as err:  # any failure of the probe sends the model to the per-device path
        reason = (
            "the check that a device's samples are computed apart from the other devices' "
            f"could not run on a float64 copy of the model ({type(err).__name__}: "
            f"{first_line(err)})"
        )
        kept[key] = reason
        return reason
    if not (torch.isfinite(together).all() and torch.isfinite(apart).all()):
        return None
    change = float((together - apart).abs().max())
    scale = float(apart.abs().max())
    if change > MIXING_TOLERANCE * scale:
        relative = change / scale if scale > 0 else math.inf
        reason = (
            f"its outputs for one device's samples change by {relative:.1e} of their "
            "scale when other devices' samples share the batch (the model mixes the samples "
            "of a batch)"
        )
        kept[key] = reason
        return reason
    kept[key] = None
    return None
