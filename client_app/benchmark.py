"""On-demand timing of one ClientApp train call and of sigma-hat against one SGD step.

``fedcgd bench client [--repeats N] [--vmap-repeats M] [--threads T]``: for ``cnn`` and
``resnet18gn`` at b = 32, the one-pass sigma-hat, the vmap reference and one SGD step with their
ratios; then the real ``train`` handler on ``digits/mlp`` and the handler's steps for a
``cnn`` on random 3 x 32 x 32 data; a model's ArrayRecord written and read by Flower and by
:mod:`fedcgd_task.array_codec`. Medians after one warm-up call (the first call is printed
too); the numbers are in docs/performance.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from client_app.sigma import gradient_spread, gradient_spread_vmap
from fedcgd_task.models import build_model
from fedcgd_task.training import train_local


def _median_time_s(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Return (first-call seconds, median seconds of ``repeats`` further calls)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def bench_digits_handler(repeats: int) -> tuple[float, float, float]:
    """Time the real train handler on digits / mlp (tau = 1, b = 32) and sigma-hat alone."""
    from fedcgd_task.local_data import local_split
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict, UserConfig
    from flwr.supercore.task_identity import TaskIdentity

    from client_app.app import app, node_context
    from fedcgd_task import keys
    from fedcgd_task.settings import TaskSettings, TrainingSettings, default_run_config
    from fedcgd_task.training import local_batches

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    run_config: UserConfig = {**default_run_config(), "num-devices": 20, "model": "mlp"}
    context = node_context(run_config, 0, 20)
    state = build_model("mlp", 10, (1, 8, 8)).state_dict()
    training = TrainingSettings(local_steps=1, learning_rate=0.1, batch_size=32)
    config = {keys.SERVER_ROUND: 1, **training.to_config(), keys.WANT_SIGMA: True}

    def call() -> object:
        content = RecordDict({keys.ARRAYS: ArrayRecord(state), keys.CONFIG: ConfigRecord(config)})
        return app(Message(content, dst_node_id=1, message_type="train"), context)

    first, handler_s = _median_time_s(call, repeats)
    settings = TaskSettings.from_run_config(run_config)
    split = local_split(settings, 0)
    x, y = split.tensors(local_batches(settings.seed, training, len(split), 1, 0)[0])
    model = build_model("mlp", 10, (1, 8, 8))
    _, sigma_s = _median_time_s(lambda: gradient_spread(model, x, y), repeats)
    return first, handler_s, sigma_s


def bench_cnn_steps(repeats: int) -> tuple[float, float, float]:
    """Time the train handler's steps for the cnn on random 3 x 32 x 32 data (tau = 1, b = 32)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (32,), generator=generator)
    received = build_model("cnn", 10, (3, 32, 32)).state_dict()
    batch = [np.arange(32)]

    def call() -> object:
        model = build_model("cnn", 10, (3, 32, 32))
        model.load_state_dict(received)
        gradient_spread(model, x, y)
        train_local(model, x, y, batch, 0.1, torch_seed=0)
        return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}

    first, total_s = _median_time_s(call, repeats)
    model = build_model("cnn", 10, (3, 32, 32))
    _, sigma_s = _median_time_s(lambda: gradient_spread(model, x, y), repeats)
    return first, total_s, sigma_s


#: (model name, input shape, classes) of the sigma-hat vs SGD-step table.
SIGMA_CASES: tuple[tuple[str, tuple[int, int, int], int], ...] = (
    ("cnn", (3, 32, 32), 10),
    ("resnet18gn", (3, 32, 32), 100),
)
#: Mini-batch size b of the table.
SIGMA_BATCH = 32


def bench_sigma_vs_sgd(
    name: str,
    input_shape: tuple[int, int, int],
    num_classes: int,
    repeats: int,
    vmap_repeats: int,
) -> tuple[float, float, float]:
    """Median seconds of (one-pass sigma-hat, vmap sigma-hat, one SGD step) at b = 32.

    Each on its own copy of the model; the one-pass sigma-hat and the SGD step alternate call by
    call, so that load from other processes affects both alike.
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SIGMA_BATCH, *input_shape, generator=generator)
    y = torch.randint(0, num_classes, (SIGMA_BATCH,), generator=generator)
    sigma_model, vmap_model, sgd_model = (
        build_model(name, num_classes, input_shape) for _ in range(3)
    )
    batch = [np.arange(SIGMA_BATCH)]

    def sigma_call() -> object:
        return gradient_spread(sigma_model, x, y)

    def sgd_call() -> object:
        return train_local(sgd_model, x, y, batch, 0.01, torch_seed=0)

    sigma_call()
    sgd_call()
    sigma_times: list[float] = []
    sgd_times: list[float] = []
    for _ in range(repeats):
        for fn, times in ((sigma_call, sigma_times), (sgd_call, sgd_times)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    _, vmap_s = _median_time_s(lambda: gradient_spread_vmap(vmap_model, x, y), vmap_repeats)
    return statistics.median(sigma_times), vmap_s, statistics.median(sgd_times)


def print_sigma_table(repeats: int, vmap_repeats: int) -> None:
    """Print the sigma-hat vs SGD-step table for :data:`SIGMA_CASES`."""
    print(f"sigma-hat vs one SGD step, b = {SIGMA_BATCH} (median ms)")
    header = ("model", "sigma 1-pass", "sigma vmap", "SGD step", "1-pass/SGD", "vmap/SGD")
    print("{:<12} {:>12} {:>12} {:>10} {:>11} {:>9}".format(*header))
    for name, shape, classes in SIGMA_CASES:
        new_s, vmap_s, sgd_s = bench_sigma_vs_sgd(name, shape, classes, repeats, vmap_repeats)
        print(
            f"{name:<12} {new_s * 1e3:>12.1f} {vmap_s * 1e3:>12.1f} {sgd_s * 1e3:>10.1f} "
            f"{new_s / sgd_s:>10.2f}x {vmap_s / sgd_s:>8.1f}x"
        )


#: (model name, input shape, classes) of the record table: MNIST-1D's, CIFAR-10's and CIFAR-100's.
RECORD_CASES: tuple[tuple[str, tuple[int, ...], int], ...] = (
    ("cnn1d", (1, 40), 10),
    ("cnn", (3, 32, 32), 10),
    ("resnet18gn", (3, 32, 32), 100),
)


def bench_records(
    name: str, input_shape: tuple[int, ...], num_classes: int, repeats: int
) -> tuple[float, float, float, float]:
    """Median seconds to write and read a model's ArrayRecord, Flower's way and the codec's.

    Returns (Flower write, codec write, Flower read, codec read), timed alternately call by
    call; both give the same bytes and arrays (tests/test_array_codec.py).
    """
    from flwr.app import ArrayRecord

    from fedcgd_task.array_codec import array_record, torch_state

    state = build_model(name, num_classes, input_shape).state_dict()
    record = ArrayRecord(state)
    calls: tuple[Callable[[], object], ...] = (
        lambda: ArrayRecord(state),
        lambda: array_record(state),
        record.to_torch_state_dict,
        lambda: torch_state(record),
    )
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats + 1):
        for fn, kept in zip(calls, times, strict=True):
            start = time.perf_counter()
            fn()
            kept.append(time.perf_counter() - start)
    medians = [statistics.median(kept[1:]) for kept in times]
    return medians[0], medians[1], medians[2], medians[3]


def print_record_table(repeats: int) -> None:
    """Print the ArrayRecord write / read table for :data:`RECORD_CASES`."""
    print("a model's ArrayRecord, Flower's np.save / np.load against the codec (median ms)")
    header = ("model", "write Flower", "write codec", "read Flower", "read codec")
    print("{:<12} {:>12} {:>12} {:>12} {:>11}".format(*header))
    for name, shape, classes in RECORD_CASES:
        times = bench_records(name, shape, classes, repeats)
        print(f"{name:<12} " + " ".join(f"{t * 1e3:>12.3f}" for t in times))


def main(repeats: int = 10, vmap_repeats: int = 3, threads: int = 1) -> int:
    """``fedcgd bench client``: the sigma-hat table, then the timings of both ClientApp cases."""
    torch.set_num_threads(threads)
    print(f"torch threads: {torch.get_num_threads()}, repeats: {repeats}")
    print_sigma_table(repeats, vmap_repeats)
    print_record_table(max(repeats, 20))
    for label, bench in (
        ("digits/mlp train handler", bench_digits_handler),
        ("cnn 3x32x32 train steps", bench_cnn_steps),
    ):
        first, total_s, sigma_s = bench(repeats)
        print(
            f"{label}: first call {first * 1e3:.1f} ms, median {total_s * 1e3:.1f} ms, "
            f"sigma-hat {sigma_s * 1e3:.1f} ms ({100 * sigma_s / total_s:.0f} %)"
        )
    return 0
