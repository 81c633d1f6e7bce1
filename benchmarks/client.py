"""``python -m benchmarks client``: sigma-hat (one pass, vmap) against one SGD step, b = 32.

Medians after a warm-up call, the calls alternated; the numbers are in docs/performance.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Annotated

import numpy as np
import torch
import typer

from benchmarks import app
from client_app.sigma import gradient_spread, gradient_spread_vmap
from fedcgd_task.models import build_model
from fedcgd_task.training import train_local

#: (model name, input shape, classes) of the table, at b = SIGMA_BATCH.
SIGMA_CASES: tuple[tuple[str, tuple[int, ...], int], ...] = (
    ("cnn", (3, 32, 32), 10),
    ("resnet18gn", (3, 32, 32), 100),
)
SIGMA_BATCH = 32


def _timed(calls: Sequence[Callable[[], object]], repeats: int) -> list[float]:
    """Per call: the median seconds of ``repeats`` calls after a warm-up call, alternated."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats + 1):
        for fn, kept in zip(calls, times, strict=True):
            start = time.perf_counter()
            fn()
            kept.append(time.perf_counter() - start)
    return [statistics.median(kept[1:]) for kept in times]


def bench_sigma_vs_sgd(
    name: str, input_shape: tuple[int, ...], num_classes: int, repeats: int, vmap_repeats: int
) -> tuple[float, float, float]:
    """Median seconds of (one-pass sigma-hat, vmap sigma-hat, one SGD step) at b = 32."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SIGMA_BATCH, *input_shape, generator=generator)
    y = torch.randint(0, num_classes, (SIGMA_BATCH,), generator=generator)
    sigma_model, vmap_model, sgd_model = (
        build_model(name, num_classes, input_shape) for _ in range(3)
    )
    batch = [np.arange(SIGMA_BATCH)]
    sigma_s, sgd_s = _timed(
        [
            lambda: gradient_spread(sigma_model, x, y),
            lambda: train_local(sgd_model, x, y, batch, 0.01, torch_seed=0),
        ],
        repeats,
    )
    [vmap_s] = _timed([lambda: gradient_spread_vmap(vmap_model, x, y)], vmap_repeats)
    return sigma_s, vmap_s, sgd_s


@app.command("client")
def main(
    repeats: Annotated[int, typer.Option(min=1, help="timed calls after warm-up")] = 10,
    vmap_repeats: Annotated[
        int, typer.Option(min=1, help="timed calls of the slow vmap sigma-hat")
    ] = 3,
    threads: Annotated[int, typer.Option(min=1, help="torch intra-op threads")] = 1,
) -> int:
    """The sigma-hat table of docs/performance.md: sigma-hat against one SGD step."""
    torch.set_num_threads(threads)
    print(f"torch threads: {torch.get_num_threads()}, repeats: {repeats}")
    print(f"sigma-hat vs one SGD step, b = {SIGMA_BATCH} (median ms)")
    header = ("model", "sigma 1-pass", "sigma vmap", "SGD step", "1-pass/SGD", "vmap/SGD")
    print("{:<12} {:>12} {:>12} {:>10} {:>11} {:>9}".format(*header))
    for name, shape, classes in SIGMA_CASES:
        new_s, vmap_s, sgd_s = bench_sigma_vs_sgd(name, shape, classes, repeats, vmap_repeats)
        print(
            f"{name:<12} {new_s * 1e3:>12.1f} {vmap_s * 1e3:>12.1f} {sgd_s * 1e3:>10.1f} "
            f"{new_s / sgd_s:>10.2f}x {vmap_s / sgd_s:>8.1f}x"
        )
    return 0
