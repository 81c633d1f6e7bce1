"""On-demand timing of one ClientApp train call and of its sigma-hat share.

Run ``python -m client_app.benchmark [--repeats N] [--threads T]``. Two cases:

* ``digits/mlp``: the real ``train`` handler on the digits split (tau = 1, b = 32), timed end to
  end, plus sigma-hat alone on the same first batch;
* ``cnn 3x32x32``: the handler's steps (build model and load the received weights, sigma-hat on
  the first batch, one SGD step, export the state dict) on random 3 x 32 x 32 data, because the
  CIFAR files may be absent.

Times are medians over the repeats after one warm-up call (the first call in a fresh process
pays for torch's lazy initialisation); the first call is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from client_app.models import build_model
from client_app.sigma import gradient_spread
from client_app.training import train_local


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
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict, UserConfig
    from flwr.supercore.task_identity import TaskIdentity

    from client_app.app import app
    from client_app.local_data import local_split
    from client_app.settings import ClientSettings
    from client_app.training import local_batches
    from fedcgd_strategy import keys

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    run_config: UserConfig = {
        "seed": 0,
        "num-devices": 20,
        "dataset": "digits",
        "data-dir": "",
        "model": "mlp",
        "partition": "dirichlet",
        "dirichlet-alpha": 0.3,
        "shards-per-device": 2,
        "imbalance-ratio": 1.0,
        "batch-size": 32,
        "local-steps": 1,
        "learning-rate": 0.1,
    }
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 20},
        state=RecordDict(),
        run_config=run_config,
    )
    state = build_model("mlp", 10, (1, 8, 8)).state_dict()

    def call() -> object:
        content = RecordDict(
            {
                keys.ARRAYS: ArrayRecord(state),
                keys.CONFIG: ConfigRecord(
                    {
                        keys.SERVER_ROUND: 1,
                        keys.LOCAL_STEPS: 1,
                        keys.LEARNING_RATE: 0.1,
                        keys.BATCH_SIZE: 32,
                    }
                ),
            }
        )
        return app(Message(content, dst_node_id=1, message_type="train"), context)

    first, handler_s = _median_time_s(call, repeats)
    settings = ClientSettings.from_run_config(run_config)
    split = local_split(settings, 0)
    x, y = split.tensors(local_batches(settings, len(split), 1, 0)[0])
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


def main() -> None:
    """Print the timings of both cases."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed calls after warm-up")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}, repeats: {args.repeats}")
    for label, bench in (
        ("digits/mlp train handler", bench_digits_handler),
        ("cnn 3x32x32 train steps", bench_cnn_steps),
    ):
        first, total_s, sigma_s = bench(args.repeats)
        print(
            f"{label}: first call {first * 1e3:.1f} ms, median {total_s * 1e3:.1f} ms, "
            f"sigma-hat {sigma_s * 1e3:.1f} ms ({100 * sigma_s / total_s:.0f} %)"
        )


if __name__ == "__main__":
    main()
