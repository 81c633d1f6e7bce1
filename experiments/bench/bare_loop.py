"""The bare loop of the in-process benchmark: a run's arithmetic and nothing else, timed per round.

See :mod:`experiments.bench.inprocess` for what it redoes; :class:`BareRun` holds each round's
seconds and test accuracy.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class BareRun:
    """Per bare round: its seconds, those of its parts, the test accuracy (None: not evaluated)."""

    round_s: list[float] = field(default_factory=list)
    sigma_s: list[float] = field(default_factory=list)
    train_s: list[float] = field(default_factory=list)
    aggregate_s: list[float] = field(default_factory=list)
    eval_s: list[float] = field(default_factory=list)
    accuracy: list[float | None] = field(default_factory=list)

    @property
    def per_round_s(self) -> float:
        """Seconds per round over rounds 2..R (as for the in-process run)."""
        return float(statistics.fmean(self.round_s[1:]))


def bare_rounds(
    run_config: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]], threads: int = 1
) -> BareRun:
    """A run's rounds (its ``metrics.jsonl`` lines) redone in a bare loop, timed per round.

    Raises
    ------
    RuntimeError
        If the redrawn channel gives another number of available devices than the run.
    """
    import torch
    from torch.nn import functional as F  # noqa: N812 (torch convention)

    from client_app.sigma import gradient_spread
    from fedcgd_strategy.aggregation import fedavg
    from fedcgd_task.partition import local_split
    from fedcgd_task.training import dropout_seed, evaluate, local_batches
    from server_app.config import parse_run_config
    from server_app.recorder import evaluation_due
    from server_app.setup import build_setup

    torch.set_num_threads(threads)
    setup = build_setup(parse_run_config(run_config))
    config, model = setup.config, setup.model
    training, seed = config.training, config.seed
    splits = [local_split(config.task, v) for v in range(config.task.num_devices)]
    params = list(model.parameters())
    tensors = list(model.state_dict().values())
    global_state = [t.detach().clone() for t in tensors]
    test_x, test_y = setup.test_tensors
    lr = training.learning_rate
    out = BareRun()
    for line in metrics:  # everything a round needs, prepared before its clock starts
        server_round = int(line["round"])
        available = np.flatnonzero(setup.cell.draw_round(setup.model_bits).available).tolist()
        if len(available) != int(line["num_available"]):
            raise RuntimeError(
                f"round {server_round}: the redrawn channel has {len(available)} available "
                f"devices, the run {line['num_available']}"
            )
        queried = available if setup.policy.needs_sigma else []
        first = []
        for v in queried:
            batches = local_batches(seed, training, len(splits[v]), server_round, v)
            first.append(splits[v].tensors(batches[0]))
        trained = []
        for v in (int(u) for u in line["scheduled"]):
            batches = local_batches(seed, training, len(splits[v]), server_round, v)
            x, y = splits[v].tensors(np.concatenate(batches))
            ends = np.cumsum([len(b) for b in batches]).tolist()
            trained.append((v, x, y, ends, dropout_seed(seed, server_round, v)))
        uploaded = [int(v) for v in line["uploaded"]]
        weights = [float(len(splits[v])) for v in uploaded]
        evaluated = evaluation_due(server_round, config.num_server_rounds, config.eval_every)

        t_round = time.perf_counter()
        with torch.no_grad():
            for t, g in zip(tensors, global_state, strict=True):
                t.copy_(g)
        for x_first, y_first in first:  # σ̂ leaves the model as it is
            gradient_spread(model, x_first, y_first)
        t_train = time.perf_counter()
        states = {}
        for v, x, y, ends, torch_seed in trained:
            with torch.no_grad():
                for t, g in zip(tensors, global_state, strict=True):
                    t.copy_(g)
            model.train()
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(torch_seed)
                start = 0
                for end in ends:
                    for p in params:
                        p.grad = None
                    F.cross_entropy(model(x[start:end]), y[start:end]).backward()
                    with torch.no_grad():
                        for p in params:
                            if p.grad is not None:
                                p.add_(p.grad, alpha=-lr)
                    start = end
            states[v] = {str(i): t.detach().numpy().copy() for i, t in enumerate(tensors)}
        t_aggregate = time.perf_counter()
        if uploaded:
            averaged = fedavg([states[v] for v in uploaded], weights)
            global_state = [torch.from_numpy(averaged[str(i)]) for i in range(len(tensors))]
        t_eval = time.perf_counter()
        accuracy = None
        if evaluated:
            with torch.no_grad():
                for t, g in zip(tensors, global_state, strict=True):
                    t.copy_(g)
            accuracy = evaluate(model, test_x, test_y)[1]
        t_end = time.perf_counter()
        out.round_s.append(t_end - t_round)
        out.sigma_s.append(t_train - t_round)
        out.train_s.append(t_aggregate - t_train)
        out.aggregate_s.append(t_eval - t_aggregate)
        out.eval_s.append(t_end - t_eval)
        out.accuracy.append(accuracy)
    return out
