"""Cohort execution: devices that received the same global model in one phase, computed together
(docs/design.md): the in-process grid opens them, each handler replies with its device's result.
"""  # noqa: D205

from __future__ import annotations

import copy
import logging
import math
import queue
from collections.abc import Iterator, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType
from torch import nn

from client_app.device_round import (
    DeviceRound,
    PreTrainingStats,
    cohort_train,
    device_round,
    label_hist,
    pre_training_stats,
    received_model,
    same_config,
    seeded_for,
    training_blockers,
)
from client_app.per_sample_norms import UnsupportedModelError, unsupported_reasons
from client_app.sigma import gradient_spreads
from fedcgd_config import keys
from fedcgd_config.imports import first_line

LOG = logging.getLogger(__name__)

#: Samples per batched sigma-hat pass (128 devices of b = 32): the per-pass overheads vanish,
#: the activations stay in the CPU's caches.
QUERY_CHUNK_SAMPLES = 4096
#: Cohorts smaller than this are left to the per-device path.
MIN_COHORT = 2


#: Largest change of a device's outputs, relative to their largest magnitude, that
#: :func:`sample_mixing` accepts: far above float64 rounding (~1e-12), about a float32
#: forward pass's relative rounding.
MIXING_TOLERANCE = 1e-6


def sample_mixing(
    model: nn.Module,
    x: torch.Tensor,
    *,
    group_size: int,
    verdicts: MutableMapping[tuple[object, ...], str | None] | None = None,
) -> str | None:
    """Why one group's samples in ``x`` are not computed apart from the others; None: they are.

    Eval-mode outputs on a copy: in float64, all of ``x`` against each group alone; in the
    model's dtype with autograd, the first group in ``x`` against ``x`` with every group
    replaced by the first. ``verdicts`` keeps the answers by model structure and shapes.
    """
    kept: MutableMapping[tuple[object, ...], str | None] = {} if verdicts is None else verdicts
    key = (  # a model may mix the samples of large batches only: the batch shape counts too
        tuple((name, type(module)) for name, module in model.named_modules()),
        tuple((name, tuple(t.shape), t.dtype) for name, t in model.state_dict().items()),
        tuple(x.shape),
        group_size,
    )
    if key in kept:
        return kept[key]
    reason = None
    try:
        twin = copy.deepcopy(model).eval()
        for p in twin.parameters():
            p.requires_grad_(True)  # as gradient_spreads sets them
        device = next(iter(twin.state_dict().values()), x).device
        x_own = x.to(device)
        first = torch.split(x_own, group_size)[0]
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            own = twin(x_own)[: len(first)].detach()
            own_alone = twin(first.repeat(len(x_own) // len(first), *[1] * (x.dim() - 1)))
            pairs = [(own, own_alone[: len(first)].detach())]
        twin = twin.double()
        x64 = x_own.double()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            pairs.append((twin(x64), torch.cat([twin(g) for g in torch.split(x64, group_size)])))
    except Exception as err:  # any failure of the probe sends the model to the per-device path
        reason = (
            "the check that a device's samples are computed apart from the other devices' "
            f"could not run on a copy of the model ({type(err).__name__}: {first_line(err)})"
        )
    else:
        if not all(torch.isfinite(t).all() for pair in pairs for t in pair):
            return None
        for together, apart in pairs:
            change, scale = float((together - apart).abs().max()), float(apart.abs().max())
            if change > MIXING_TOLERANCE * scale:
                relative = change / scale if scale > 0 else math.inf
                reason = (
                    f"its outputs for one device's samples change by {relative:.1e} of their "
                    "scale when other devices' samples share the batch (the model mixes the "
                    "samples of a batch)"
                )
                break
    kept[key] = reason
    return reason


@dataclass
class _Cohort:
    """Messages computed together, and (once computed) each one's result by ``id(message)``."""

    kind: str
    members: list[tuple[Message, Context]]
    results: dict[int, tuple[DeviceRound, object]] | None = None


def _cohort_key(msg: Message) -> tuple[object, ...] | None:
    """Messages computed together share this key and an equal run config; None: not cohort."""
    kind = msg.metadata.message_type
    if kind not in (keys.QUERY_STATS, MessageType.TRAIN):
        return None
    # Not ``content.array_records`` (nor config_, metric_): each builds a filtered copy, ~25 us.
    arrays, config = msg.content.get(keys.ARRAYS), msg.content.get(keys.CONFIG)
    if not isinstance(arrays, ArrayRecord) or not isinstance(config, ConfigRecord):
        return None
    round_config = tuple(sorted((k, type(v).__name__, repr(v)) for k, v in config.items()))
    return (kind, id(arrays), round_config)


def _stats_key(device: DeviceRound) -> tuple[object, ...]:
    """What a device's statistics depend on besides the model (its batches and sigma-hat)."""
    steps, b = device.training.local_steps, device.training.batch_size
    return (device.settings, device.partition_id, device.server_round, steps, b, device.want_sigma)


class Cohorts:
    """One engine's cohorts: its grid opens them, its ClientApp reads them (``threads``: σ̂'s)."""

    def __init__(self, *, threads: int = 1) -> None:
        self.threads = threads
        self._open: dict[int, _Cohort] = {}  # id(message) -> its cohort, while opened
        #: The last model's arrays (name, Array) and the statistics computed at it.
        self._kept: tuple[list[tuple[str, Array]], dict[tuple[object, ...], PreTrainingStats]]
        self._kept = ([], {})
        self._mixing: dict[tuple[object, ...], str | None] = {}  # sample_mixing's verdicts
        self._logged: set[tuple[str, str, str]] = set()  # (model name, kind, reason) logged
        #: (model name, kind) whose batched path failed at run time: per device from then on.
        self._failed: set[tuple[str, str]] = set()

    @contextmanager
    def opened(self, deliveries: Sequence[tuple[Message, Context]]) -> Iterator[None]:
        """Open the cohorts among ``deliveries`` (message, its node's context) in the block."""
        by_key: dict[tuple[object, ...], list[_Cohort]] = {}
        for msg, context in deliveries:
            if (key := _cohort_key(msg)) is None:
                continue
            alike = by_key.setdefault(key, [])
            run_config = context.run_config
            cohort = next(
                (c for c in alike if same_config(c.members[0][1].run_config, run_config)), None
            )
            if cohort is None:
                alike.append(cohort := _Cohort(str(key[0]), []))
            cohort.members.append((msg, context))
        opened = {id(msg): c for found in by_key.values() for c in found
                  if len(c.members) >= MIN_COHORT for msg, _ in c.members}  # fmt: skip
        self._open.update(opened)
        try:
            yield
        finally:
            for msg_id in opened:
                self._open.pop(msg_id, None)

    def result_of(self, msg: Message) -> tuple[DeviceRound, Any] | None:
        """The device's round and result (statistics or training) from its cohort; None: alone."""
        cohort = self._open.get(id(msg))
        if cohort is None:
            return None
        if cohort.results is None:
            cohort.results = self._compute(cohort)
        return cohort.results.get(id(msg))

    def _log_once(self, model: str, kind: str, reason: str) -> None:
        if (model, kind, reason) not in self._logged:
            self._logged.add((model, kind, reason))
            LOG.warning(
                "cohort execution: %s of model '%s' computed one device at a time: %s",
                "training" if kind == MessageType.TRAIN else "sigma-hat",
                model,
                reason,
            )

    def _compute(self, cohort: _Cohort) -> dict[int, tuple[DeviceRound, object]]:
        """Compute every member of ``cohort`` that reads cleanly; the others are left out."""
        rounds: list[tuple[Message, DeviceRound]] = []
        for msg, context in cohort.members:
            try:
                rounds.append((msg, device_round(msg, context)))
            except (ValueError, TypeError):  # its handler raises the same error alone
                continue
        if len(rounds) < MIN_COHORT or (rounds[0][1].settings.model, cohort.kind) in self._failed:
            return {}
        with seeded_for(rounds[0][1]):  # as the first device alone: the model's own draws
            return self._computed(cohort, rounds)

    def _computed(
        self, cohort: _Cohort, rounds: list[tuple[Message, DeviceRound]]
    ) -> dict[int, tuple[DeviceRound, object]]:
        first_msg, first = rounds[0]
        name = first.settings.model
        try:
            model = received_model(first_msg, first.settings, first.split)
        except (ValueError, RuntimeError):  # a bad record: each handler says so alone
            return {}
        devices = [rnd for _, rnd in rounds]
        ids = [id(msg) for msg, _ in rounds]
        record = first_msg.content[keys.ARRAYS]
        assert isinstance(record, ArrayRecord)  # a cohort's messages carry one (_cohort_key)
        stats = self._kept_or_computed_stats(record, model, devices)
        if cohort.kind == keys.QUERY_STATS:
            return {i: (rnd, s) for i, rnd, s in zip(ids, devices, stats, strict=True)}
        blockers = training_blockers(model)
        if blockers:
            self._log_once(name, cohort.kind, "; ".join(blockers))
            return {}
        try:
            trained = cohort_train(model, devices, stats=stats)
        except RuntimeError as err:  # vmap rejects the model
            self._failed.add((name, cohort.kind))
            self._log_once(name, cohort.kind, f"torch.func.vmap raised {type(err).__name__}: {err}")
            return {}
        return {i: (rnd, t) for i, rnd, t in zip(ids, devices, trained, strict=True)}

    def _kept_or_computed_stats(
        self, record: ArrayRecord, model: nn.Module, devices: Sequence[DeviceRound]
    ) -> list[PreTrainingStats]:
        """:meth:`cohort_stats`, reusing the query phase's at the same model's record."""
        items, kept = self._kept
        now = list(record.items())  # the very Array objects: the same model, not an equal one
        if len(now) != len(items) or any(
            n != m or a is not b for (n, a), (m, b) in zip(now, items, strict=False)
        ):
            self._kept = (now, kept := {})
        missing = [d for d in devices if _stats_key(d) not in kept]
        if missing:
            kept.update(
                zip(map(_stats_key, missing), self.cohort_stats(model, missing), strict=True)
            )
        return [kept[_stats_key(d)] for d in devices]

    def cohort_stats(
        self, model: nn.Module, devices: Sequence[DeviceRound]
    ) -> list[PreTrainingStats]:
        """Pre-training statistics of devices sharing ``model`` and the round config (σ̂ batched
        over chunks of :data:`QUERY_CHUNK_SAMPLES` samples, one model copy per thread)."""  # noqa: D205, D209
        want_sigma = devices[0].want_sigma
        name = devices[0].settings.model
        alone = [(d.split, d.batches) for d in devices]
        reasons = unsupported_reasons(model) if want_sigma else []
        if reasons:
            self._log_once(name, keys.QUERY_STATS, "; ".join(reasons))
        if not want_sigma or reasons:
            return [pre_training_stats(model, *d, want_sigma=want_sigma) for d in alone]
        b = len(devices[0].batches[0])
        per_chunk = max(1, QUERY_CHUNK_SAMPLES // b)
        chunks = [devices[i : i + per_chunk] for i in range(0, len(devices), per_chunk)]
        for chunk in {len(c): c for c in chunks if len(c) > 1}.values():  # each batch size once
            probe = torch.cat([d.split.tensors(d.batches[0])[0] for d in chunk])
            mixing = sample_mixing(model, probe, group_size=b, verdicts=self._mixing)
            if mixing is not None:
                self._log_once(name, keys.QUERY_STATS, mixing)
                return [pre_training_stats(model, *d) for d in alone]
        workers = max(1, min(self.threads, len(chunks)))

        models: queue.SimpleQueue[nn.Module] = queue.SimpleQueue()
        for copied in [model, *(copy.deepcopy(model) for _ in range(workers - 1))]:
            models.put(copied)

        def spreads_of(chunk: Sequence[DeviceRound]) -> list[float]:
            worker_model = models.get()  # a model of its own while the chunk runs
            try:
                xs, ys = zip(*(d.split.tensors(d.batches[0]) for d in chunk), strict=True)
                return gradient_spreads(worker_model, torch.cat(xs), torch.cat(ys), group_size=b)
            finally:
                models.put(worker_model)

        try:
            with ThreadPoolExecutor(workers) as pool:  # one worker: on this thread
                parts = pool.map(spreads_of, chunks) if workers > 1 else map(spreads_of, chunks)
                sigmas = [sigma for part in parts for sigma in part]
        except UnsupportedModelError as err:  # found during the pass (e.g. a layer ran twice)
            self._log_once(name, keys.QUERY_STATS, str(err))
            return [pre_training_stats(model, *d) for d in alone]
        return [
            PreTrainingStats(label_hist=label_hist(d.split, d.batches), sigma=float(sigma))
            for d, sigma in zip(devices, sigmas, strict=True)
        ]
