"""Flower's server-side differential privacy behind the scheduler (docs/aggregation.md).

Flower's wrappers clip, aggregate (the wrapped strategy) and add noise in their own
``aggregate_train``; here are the two steps of the adaptive one that are replaced and what the
scheduler sets around each call (docs/design.md, "Server-side differential privacy").
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp import strategy as flower
from numpy.typing import NDArray

#: Flower's server-side DP wrappers (and their subclasses).
SERVER_SIDE_DP = (
    flower.DifferentialPrivacyServerSideFixedClipping,
    flower.DifferentialPrivacyServerSideAdaptiveClipping,
)
#: Stream tag of the noise's seed (mixed with the run seed and the round): "NOIS".
NOISE_STREAM = 0x4E4F4953
Arrays = Mapping[str, NDArray[np.generic]]


class DifferentialPrivacyServerSideAdaptiveClipping(
    flower.DifferentialPrivacyServerSideAdaptiveClipping
):
    """Flower's adaptive clipping with the two steps of Andrew et al.'s Algorithm 1.

    The clipping-norm update (:meth:`_geometric_update`) and the norm the noise is scaled by
    (the round's C_t, not the updated C_{t+1}); Flower's name, so messages name the class as
    the run config does.
    """

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's, the norm it clips with held for the round's noise (during the call only)."""
        self._round_norm = self.clipping_norm
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            del self._round_norm

    def _geometric_update(self, clipped_fraction: float) -> None:
        """C <- C exp(-lr (b - gamma)): Andrew et al. 2019 (arXiv:1905.03871), Algorithm 1.

        b = 1 - ``clipped_fraction`` (the noisy fraction not clipped), gamma = 1 -
        ``target_clipped_quantile``, lr = ``clip_norm_lr``.
        """
        unclipped, target_unclipped = 1.0 - clipped_fraction, 1.0 - self.target_clipped_quantile
        self.clipping_norm *= math.exp(-self.clip_norm_lr * (unclipped - target_unclipped))

    def _add_noise_to_aggregated_arrays(self, aggregated: ArrayRecord) -> ArrayRecord:
        """Flower's Gaussian noise, standard deviation z C_t / n (C_t: the round's norm)."""
        updated, self.clipping_norm = self.clipping_norm, self._round_norm
        try:
            return super()._add_noise_to_aggregated_arrays(aggregated)
        finally:
            self.clipping_norm = updated


def is_dp(aggregator: object) -> bool:
    """True for an instance of Flower's server-side DP wrappers."""
    return isinstance(aggregator, SERVER_SIDE_DP)


def dp_inputs(
    aggregator: Any, models: Sequence[Arrays], reference: Arrays
) -> tuple[list[dict[str, NDArray[np.generic]]], list[int], dict[str, NDArray[np.generic]]]:
    """A DP wrapper's round: (uploads as float, weights all 1, global model as float).

    Integer arrays become float64 (Flower clips in place); the wrapper's
    ``num_sampled_clients`` becomes the round's number of uploads n (its noise is z C / n).
    """

    def floats(arrays: Arrays) -> dict[str, NDArray[np.generic]]:
        return {k: v.astype(np.float64) if v.dtype.kind in "biu" else v
                for k, v in ((k, np.asarray(v)) for k, v in arrays.items())}  # fmt: skip

    aggregator.num_sampled_clients = len(models)
    return [floats(m) for m in models], [1] * len(models), floats(reference)


def noise_seed(seed: int, server_round: int) -> NDArray[np.uint32]:
    """The seed of numpy's global generator for round ``server_round`` of run ``seed``."""
    state = np.random.SeedSequence([seed, NOISE_STREAM, server_round]).generate_state(8)
    return state.astype(np.uint32)


@contextlib.contextmanager
def numpy_global_seeded(seed: int, server_round: int) -> Iterator[None]:
    """Seed numpy's global generator (Flower's noise) from the run seed and round; restore it."""
    saved = np.random.get_state()  # noqa: NPY002  (the generator Flower's wrappers draw from)
    np.random.seed(noise_seed(seed, server_round))  # noqa: NPY002
    try:
        yield
    finally:
        np.random.set_state(saved)  # noqa: NPY002


def dp_round_noise(aggregator: object, uploads: int) -> tuple[float, float] | None:
    """The clipping norm C a round clips with and its noise's standard deviation z C / n.

    Read before the round (which moves the adaptive C to the next round's); z is the wrapper's
    noise multiplier (the adaptive one's share for the updates, as Flower splits it), n =
    ``uploads``. None for an aggregator without DP.
    """
    if not is_dp(aggregator):
        return None
    wrapper: Any = aggregator
    norm = float(wrapper.clipping_norm)
    return norm, float(wrapper.noise_multiplier) * norm / uploads
