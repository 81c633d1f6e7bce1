"""Every key of ``[tool.flwr.app.config]`` with its range and help; the defaults are read from
pyproject.toml (:data:`DEFAULTS`, the one place they are written). No flwr, no torch.
"""  # noqa: D205

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedcgd_config.setting import Scalar, Setting, check_value, did_you_mean


@dataclass(frozen=True)
class BuiltinDataset:
    """A built-in data set: function, title, ``auto``'s model, the other keys it reads."""

    function: str
    title: str
    auto_model: str
    reads: tuple[str, ...] = ()


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    "digits": BuiltinDataset("fedcgd_task.datasets.images:digits_data", "digits", "mlp"),
    "cifar10": BuiltinDataset(
        "fedcgd_task.datasets.images:cifar10_data", "CIFAR-10", "cnn", ("data-dir",)
    ),
    "cifar100": BuiltinDataset(
        "fedcgd_task.datasets.images:cifar100_data", "CIFAR-100", "resnet18gn", ("data-dir",)
    ),
    "mnist1d": BuiltinDataset(
        "fedcgd_task.datasets.mnist1d:mnist1d_data", "MNIST-1D", "cnn1d", ("mnist1d-samples",)
    ),
}


PROJECT_DIR = Path(__file__).resolve().parents[1]


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested tables to dotted keys, as Flower flattens ``[tool.flwr.app.config]``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


_WHEEL = Path(__file__).resolve().parent / "pyproject.toml"  # [tool.hatch...force-include]
_TOML = tomllib.loads((_WHEEL if _WHEEL.is_file() else PROJECT_DIR / "pyproject.toml").read_text())
#: Every key's default, in pyproject.toml's order, flattened as Flower flattens it.
DEFAULTS: dict[str, Scalar] = flatten(_TOML["tool"]["flwr"]["app"]["config"])
MAX_SERVER_ROUNDS = 100_000
#: Choices the code takes from here (``fedcgd_task.models``, ``channel.pathloss``, ``selectors``).
MODELS: tuple[str, ...] = ("auto", "mlp", "cnn", "resnet18gn", "cnn1d")  # mlp, cnn, ...: in order
PACK_RULES: tuple[str, ...] = ("stop", "skip")
PATHLOSS_MODELS: tuple[str, ...] = ("paper", "tr38901")
CHANNEL_MODELS: tuple[str, ...] = (*PATHLOSS_MODELS, "trace")


#: The cell's numbers and flags ``channel.<key>``: (key, limits, help[, why]).
# fmt: off
_CELL: tuple[tuple[str, ...], ...] = (
    ("availability-prob", "[0, 1]", "p_a, the probability that a device is available"),
    ("radius-m", "(0, 5000]", "cell radius (Table I), above `min-distance-m`",
     "TR 38.901 UMi validity range of d2D"),
    ("min-distance-m", ">= 0", "smallest horizontal device distance (Table I)"),
    ("h-bs-m", "(0, 1000]", "base-station antenna height (Table I; > 1 m for `tr38901`)"),
    ("h-ut-m", "(0, 1000]", "device antenna height (Table I; > 1 m for `tr38901`)"),
    ("carrier-frequency-hz", "[5e+08, 1e+11]", "carrier frequency (Table I)",
     "TR 38.901 validity range"),
    ("total-bandwidth-hz", "> 0", "B, the uplink bandwidth"),
    ("deadline-s", "> 0", "upload deadline d (FedCGD schedules about 9 of ~20 by default)"),
    ("tx-power-dbm", "[-100, 100]", "device transmit power S (Table I)"),
    ("noise-psd-dbm-per-hz", "[-300, 0]", "thermal noise density (Table I)"),
    ("noise-figure-db", "[0, 100]", "receiver noise figure (Table I)"),
    ("redraw-los-each-round", "", "redraw LOS states every round (false: once per seed)"),
    ("redraw-shadowing-each-round", "", "redraw shadow fading every round (as LOS)"),
    ("model-bits", ">= 0", "D_w, the bits of an upload; 0 = parameters × 32"),
)
# fmt: on


def _setting(key: str, help: str, **details: Any) -> Setting:
    return Setting(key, DEFAULTS[key], help, **details)


#: Every key of ``[tool.flwr.app.config]``, in pyproject.toml's order.
SETTINGS: tuple[Setting, ...] = (
    _setting(
        "seed",
        "one seed for everything: device drop, channel, partitions, batches, model init, policies",
        limits=f"[0, {2**63 - 1}]",
        why="torch's generators take a signed 64-bit seed",
    ),
    _setting(
        "num-server-rounds",
        "rounds J (every round's metrics line stays in memory, about 10 kB each)",
        limits=f"[1, {MAX_SERVER_ROUNDS}]",
        why="every round's metrics line is kept in memory, about 10 kB each",
    ),
    _setting("num-devices", "V (the simulation's number of SuperNodes)", limits=">= 1"),
    _setting(
        "policy",
        "`fedcgd-fscd`, `fedcgd-gs`, `fedcgd-fscd-gc` (per-class Ĝ_c), `fedcgd-exact` (MILP "
        "optimum of P1), `fedcgd-cd` (plain coordinate descent), `bc` (best channel), `bn2` "
        "(best update norm), `poc` (power of choice), `fedcbs` (Fed-CBS), `all` (every available "
        "device that meets the deadline: the FedAvg reference), also by figure label "
        "(`FedCGD-FSCD`); or your class ([Write your own policy](bring-your-own.md"
        "#write-your-own-policy))",
        form="class",
    ),
    _setting(
        "policy-params",
        "your policy's constructor arguments, a TOML inline table in a string "
        '(`policy-params="{window = 20}"`); the project\'s commands also take the table itself '
        "and `policy-params.<name>=value`. Names the constructor does not take, or values of "
        "another type, are refused before the start; at most 65,536 characters",
        form="table",
    ),
    _setting(
        "protocol",
        "`channel`: schedule from the channel draw alone, no query phase (enough for `bc`, "
        "`all`); `query`: devices report label histograms (and σ̂, for FedCGD only) before "
        "training and only the scheduled devices train (`fedcgd-*`, `fedcbs`); `train-all`: "
        "every available device trains, only the scheduled ones upload (needed by `bn2`, "
        "`poc`); `auto` picks the one with the least work. Same seed, same schedules and model "
        "under every protocol a policy allows",
        choices=("auto", "channel", "query", "train-all"),
    ),
    _setting(
        "aggregator",
        'how the scheduled uploads are combined: `""` the scheduler\'s FedAvg (weights '
        "\\|D_v\\|, float64 accumulation); or a Flower strategy whose own `aggregate_train` "
        "runs on the scheduled, validated uploads, by its name in `flwr.serverapp.strategy` "
        "(`FedMedian`, `Krum`, `FedAdam`, the server-side DP wrappers, ...: [Robust "
        'aggregation](aggregation.md)) or as `"package.module:ClassName"`',
        form="class",
    ),
    _setting(
        "aggregator-params",
        "its constructor arguments, as `policy-params`, checked before the start; a DP "
        "wrapper's also `strategy` (the wrapped one, default `FedAvg`) and the table "
        "`strategy-params` ([Robust aggregation](aggregation.md))",
        form="table",
    ),
    _setting(
        "dataset",
        "`digits` (bundled, offline), `cifar10`, `cifar100` (read as data, never code: [Safe "
        "loading](design.md#safe-loading)), "
        "`mnist1d` (MNIST-1D, generated offline by the `mnist1d` package: 10 classes, inputs "
        "1×40, 80/20 train/test split), or your function `'package.module:function'` / "
        "`'/abs/file.py:function'` (see [Bring your own data set and model](bring-your-own.md"
        "#bring-your-own-data-set-and-model))",
        choices=tuple(BUILTIN_DATASETS),
        form="reference",
    ),
    _setting(
        "data-dir",
        "folder with the CIFAR files and the cached MNIST-1D arrays (`mnist1d-<N>-<hash>.npz`), "
        'also passed to your data-set function (`""` = `./data` of the process that reads the '
        "settings)",
        form="path",
        computes=False,
    ),
    _setting(
        "mnist1d-samples",
        "N, the samples `mnist1d` generates (0.8 N training, 0.2 N test; N/10 of each digit; "
        "about 0.8 kB and 0.18 ms per sample), cached in `data-dir`; read by `mnist1d` only",
        limits="[100, 1000000]",
        multiple_of=10,
        why="N / 10 samples of each digit; generating takes about 0.8 kB of memory per sample",
    ),
    _setting(
        "model",
        "`mlp` (digits, 4,810 parameters; any input shape), `cnn` (the paper's CIFAR-10 CNN, "
        "258,898 parameters), `resnet18gn` (ResNet-18 with GroupNorm), `cnn1d` (MNIST-1D's "
        "CNN: three 25-channel Conv1d layers and a linear layer, 5,210 parameters for 1×40), "
        "or your function `'package.module:function'` / `'/abs/file.py:function'`; `auto` "
        "picks by dataset ("
        + ", ".join(f"`{d.auto_model}` for {name}" for name, d in BUILTIN_DATASETS.items())
        + ", `mlp` for your own)",
        choices=MODELS,
        form="reference",
    ),
    _setting(
        "device",
        "where each process trains and evaluates: `auto` (CUDA when torch sees a GPU, else the "
        "CPU), `cpu`, `cuda` or `cuda:N`; one GPU per SuperNode: `CUDA_VISIBLE_DEVICES` "
        '(docs/deployment.md, "GPUs")',
        choices=("auto", "cpu", "cuda"),
        form="device",
        computes=False,
    ),
    _setting(
        "partition",
        "`dirichlet`: p_v ~ Dir(α p), equal sizes; `shards`: sort-and-partition with l shards "
        "per device",
        choices=("dirichlet", "shards"),
    ),
    _setting("dirichlet-alpha", "α of the Dirichlet split", limits="> 0"),
    _setting("shards-per-device", "l, shards per device of the shards split", limits=">= 1"),
    _setting("imbalance-ratio", "r = n2/n1 (first half of classes kept at 1/r)", limits=">= 1"),
    _setting("local-steps", "τ, SGD steps per round (sent with each round)", limits=">= 1"),
    _setting("learning-rate", "η, the SGD learning rate (sent likewise)", limits="> 0"),
    _setting("batch-size", "b, the mini-batch size (sent likewise)", limits=">= 1"),
    _setting(
        "eval-every",
        "central test-set evaluation every k rounds (and after the last)",
        limits=">= 1",
        computes=False,
    ),
    _setting(
        "result-dir",
        'output folder (`""`: a new `<name>-<UTC time>` folder under `--out`, `results/` by '
        "default; `~/fedcgd-results` in a bare `flwr run`); one that holds a run's results is "
        "refused (never overwritten)",
        form="absolute-path",
        computes=False,
    ),
    _setting(
        "initial-g",
        "Ĝ before the first upload (recorded per round as `class_gradient_used`)",
        limits=">= 0",
    ),
    _setting(
        "target-dist",
        "WEMD target p: class distribution of the full training set, or `devices` (union of "
        "this round's histograms)",
        choices=("global", "devices"),
    ),
    _setting(
        "pack-rule",
        "best effort of the baselines: stop at the first device that does not fit, or `skip` it",
        choices=PACK_RULES,
    ),
    _setting("poc-candidates", "POC's V' (0 = all available)", limits=">= 0"),
    _setting("fedcbs-lambda", "Fed-CBS exploration weight λ", limits=">= 0"),
    _setting(
        "exact-time-limit-s",
        '`fedcgd-exact`: cap per MILP in seconds (0 = none, the true optimum; see "The scheduler")',
        limits=">= 0",
    ),
    _setting(
        "max-update-norm-ratio",
        "refuse an upload whose update norm ‖w_v − w‖ is more than k × the median norm of the "
        "round's other uploads; 0 = off ([Screening replies](design.md#screening-replies))",
        limits=">= 0",
    ),
    _setting(
        "query-timeout-s",
        "deployments: how long to wait for query replies (a device that misses them is lost for "
        "the round, in `devices_lost`), and for all `num-devices` SuperNodes to connect",
        limits="> 0",
        computes=False,
    ),
    _setting(
        "train-timeout-s",
        "deployments: how long to wait for training replies (as `query-timeout-s`)",
        limits="> 0",
        computes=False,
    ),
    _setting(
        "stall-limit-s",
        "a run without progress (no reply, no phase done) for this many seconds stops "
        "(`failed`, exit 1, resumable; [Host load](design.md#host-load-and-simulated-time))",
        limits="[1, 43200]",
        why="Flower drops an unanswered message after 12 h",
        computes=False,
    ),
    _setting(
        "checkpoint-every",
        "save `checkpoint.pt` every k rounds and after the last; 0 = off (a stopped run cannot "
        "be resumed; a killed one computes up to k − 1 rounds again)",
        limits=">= 0",
        computes=False,
    ),
    _setting(
        "resume-from",
        "result directory of a run with a checkpoint: continue it there up to "
        "`num-server-rounds`, bit for bit as the uninterrupted run (same settings required); "
        '`""` = a new run',
        form="absolute-path",
        computes=False,
    ),
    _setting(
        "verbose",
        "true: also Flower's own log lines; false: one progress line per round (round, "
        "accuracy, scheduled / available, elapsed, ETA), warnings and errors",
        computes=False,
    ),
    _setting(
        "channel.model",
        "the uplink: the UMi cell with the paper's path loss (`paper`) or the full standard's "
        "(`tr38901`); `trace`, the recorded `channel.trace`; or your class, built with the "
        "`channel.*` values its constructor names ([Your own channel](bring-your-own.md"
        "#your-own-channel))",
        choices=CHANNEL_MODELS,
        form="class",
    ),
    *(_setting(f"channel.{k}", h, limits=lim, why="".join(w)) for k, lim, h, *w in _CELL),
    _setting(
        "channel.trace",
        'absolute path of the recorded channel `channel.model = "trace"` replays (`""`: none); '
        "at most 512 MiB of arrays, V = `num-devices`, R ≥ `num-server-rounds`, checked from "
        "the headers before any data is read",
        form="absolute-path",
    ),
)

SCHEMA: dict[str, Setting] = {setting.key: setting for setting in SETTINGS}


def read(run_config: Mapping[str, Any], key: str) -> Any:
    """The value of ``key`` in a run config, checked (ValueError: one line)."""
    if key not in run_config:
        raise ValueError(
            f"run-config key '{key}' is missing; it must be set in [tool.flwr.app.config] of "
            "pyproject.toml or with --run-config"
        )
    return check_value(SCHEMA[key], run_config[key], f"run-config key '{key}'")


def unknown_key(key: str) -> str:
    """One line for a key no setting has: up to three close keys, then where all are."""
    guess = did_you_mean(key, SCHEMA)
    return f"unknown run-config key {key!r}; {guess}every key: `fedcgd settings`"
