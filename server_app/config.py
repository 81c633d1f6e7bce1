"""The run config, read once into a typed, validated object before any training.

Every key of ``[tool.flwr.app.config]`` in pyproject.toml is read here (the learning task's keys
through :class:`fedcgd_task.settings.TaskSettings`, τ, η, b through
:class:`fedcgd_task.settings.TrainingSettings`, the uplink's through :class:`channel.CellConfig`).
A bad value raises one ``ValueError`` naming the run-config key, the value and what is allowed.

=============================  ==================================================================
run-config key                 meaning
=============================  ==================================================================
``num-server-rounds``          rounds J, int >= 1
``policy``                     scheduling rule (:data:`fedcgd_strategy.policies.POLICY_NAMES`)
``protocol``                   ``"auto"`` | ``"channel"`` | ``"query"`` | ``"train-all"`` (auto:
                               train-all for bn2/poc, channel for bc/all, query otherwise)
``eval-every``                 central evaluation every k rounds (and always after the last)
``result-dir``                 absolute folder for the run's results; ``""`` =
                               ``~/fedcgd-results/<policy>-<UTC time>``; a folder that is a file
                               or already holds a run's results is refused (never overwritten)
``initial-g``                  Ĝ before the first upload (FedCGD), float >= 0
``target-dist``                WEMD target: ``"global"`` (class distribution of the full
                               training set) or ``"devices"`` (union of this round's histograms)
``pack-rule``                  best-effort rule of the baselines: ``"stop"`` | ``"skip"``
``poc-candidates``             POC's V' (0 = all available)
``fedcbs-lambda``              Fed-CBS exploration weight λ
``exact-time-limit-s``         ``fedcgd-exact``: cap per MILP in seconds (0 = none: the optimum)
``max-update-norm-ratio``      k >= 0: refuse an upload whose update norm ||w_v - w|| is above k x
                               the median norm of the round's other uploads (the median ignores
                               one absurd upload; a round with one upload uses the last round's
                               median; uploads whose norm is not a finite float32 are always
                               refused); 0 = off (see :mod:`fedcgd_strategy.screening`)
``query-timeout-s``            wait for query replies, seconds > 0
``train-timeout-s``            wait for training replies, seconds > 0
``checkpoint-every``           save a checkpoint every k rounds (and after the last); 0 = off
``resume-from``                a result directory with a checkpoint: continue that run there up
                               to ``num-server-rounds`` (``""`` = a new run); with no rounds left
                               it only writes the end a crash left unwritten (model, summary)
``verbose``                    true: also Flower's own log lines of every round; false (default):
                               one progress line per round, warnings and errors
``channel.*``                  :class:`channel.CellConfig` fields in kebab case (among them
                               ``channel.redraw-los-each-round`` and
                               ``channel.redraw-shadowing-each-round``, true/false), plus
                               ``channel.model-bits`` (0 = parameters × 32)
=============================  ==================================================================
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channel import CellConfig
from fedcgd_strategy.policies import POLICY_NAMES, PROTOCOL_CHOICES, resolve_protocol
from fedcgd_strategy.selectors import PACK_RULES
from fedcgd_task.settings import (
    TaskSettings,
    TrainingSettings,
    read_choice,
    read_int,
    read_real,
    require_key,
)

TARGET_CHOICES = ("global", "devices")

#: run-config key (without the ``channel.`` prefix) -> CellConfig field.
CHANNEL_KEYS: dict[str, str] = {
    "pathloss-model": "pathloss_model",
    "availability-prob": "availability_prob",
    "radius-m": "radius_m",
    "min-distance-m": "min_distance_m",
    "h-bs-m": "h_bs_m",
    "h-ut-m": "h_ut_m",
    "carrier-frequency-hz": "carrier_frequency_hz",
    "total-bandwidth-hz": "total_bandwidth_hz",
    "deadline-s": "deadline_s",
    "tx-power-dbm": "tx_power_dbm",
    "noise-psd-dbm-per-hz": "noise_psd_dbm_per_hz",
    "noise-figure-db": "noise_figure_db",
    "redraw-los-each-round": "redraw_los_each_round",
    "redraw-shadowing-each-round": "redraw_shadowing_each_round",
}


@dataclass(frozen=True)
class RunConfig:
    """The validated run config (see the module docstring for the keys)."""

    task: TaskSettings
    training: TrainingSettings
    cell: CellConfig
    num_server_rounds: int
    policy: str
    protocol: str
    eval_every: int
    result_dir: str
    initial_g: float
    target_dist: str
    pack_rule: str
    poc_candidates: int
    fedcbs_lambda: float
    exact_time_limit_s: float
    max_update_norm_ratio: float
    query_timeout_s: float
    train_timeout_s: float
    model_bits: int
    checkpoint_every: int
    resume_from: str
    verbose: bool = False

    @property
    def seed(self) -> int:
        """The run seed."""
        return self.task.seed

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable view (nested task, training and cell settings)."""
        return dataclasses.asdict(self)


def _cell_config(run_config: Mapping[str, Any], num_devices: int) -> CellConfig:
    values: dict[str, Any] = {"num_devices": num_devices}
    for key, name in CHANNEL_KEYS.items():
        full = f"channel.{key}"
        if full in run_config:
            values[name] = run_config[full]
    try:
        return CellConfig(**values)
    except (ValueError, TypeError) as err:
        text = str(err)
        for key, name in CHANNEL_KEYS.items():
            if name in text:
                raise ValueError(f"run-config key 'channel.{key}': {text}") from err
        raise ValueError(f"channel settings: {text}") from err


def default_result_dir(policy: str) -> str:
    """``~/fedcgd-results/<policy>-<UTC time>`` (absolute)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return str(Path("~/fedcgd-results").expanduser() / f"{policy}-{stamp}")


def parse_run_config(run_config: Mapping[str, Any]) -> RunConfig:
    """Read and validate the whole run config.

    Parameters
    ----------
    run_config : mapping
        ``context.run_config`` (flat, kebab-case, dotted keys for nested tables).

    Returns
    -------
    RunConfig

    Raises
    ------
    ValueError
        Naming the key, the bad value and what is allowed.

    """
    task = TaskSettings.from_run_config(run_config)
    policy = read_choice(run_config, "policy", POLICY_NAMES)
    try:
        protocol = resolve_protocol(policy, read_choice(run_config, "protocol", PROTOCOL_CHOICES))
    except ValueError as err:
        raise ValueError(f"run-config key 'protocol': {err}") from err
    result_dir = require_key(run_config, "result-dir")
    if not isinstance(result_dir, str):
        raise ValueError(f"run-config key 'result-dir' must be a string; got {result_dir!r}")
    if result_dir and not Path(result_dir).expanduser().is_absolute():
        raise ValueError(
            f"run-config key 'result-dir' = {result_dir!r} must be an absolute path (the "
            'ServerApp runs in an unrelated working directory), or "" for the default'
        )
    model_bits = read_int(run_config, "channel.model-bits", minimum=0)
    resume_from = require_key(run_config, "resume-from")
    if not isinstance(resume_from, str) or (
        resume_from and not Path(resume_from).expanduser().is_absolute()
    ):
        raise ValueError(
            f"run-config key 'resume-from' = {resume_from!r} must be the absolute path of a "
            'result directory, or "" for a new run'
        )
    if resume_from:
        if result_dir and Path(result_dir).expanduser() != Path(resume_from).expanduser():
            raise ValueError(
                f"run-config key 'result-dir' = {result_dir!r}: a resumed run continues in its "
                f"own folder (resume-from = {resume_from!r}); leave result-dir empty or the same"
            )
        result_dir = resume_from
    elif result_dir == "":
        result_dir = default_result_dir(policy)
    verbose = require_key(run_config, "verbose")
    if not isinstance(verbose, bool):
        raise ValueError(f"run-config key 'verbose' must be true or false; got {verbose!r}")
    return RunConfig(
        task=task,
        training=TrainingSettings.from_run_config(run_config),
        cell=_cell_config(run_config, task.num_devices),
        num_server_rounds=read_int(run_config, "num-server-rounds", minimum=1),
        policy=policy,
        protocol=protocol,
        eval_every=read_int(run_config, "eval-every", minimum=1),
        result_dir=str(Path(result_dir).expanduser()),
        initial_g=read_real(run_config, "initial-g", minimum=0.0, strict=False),
        target_dist=read_choice(run_config, "target-dist", TARGET_CHOICES),
        pack_rule=read_choice(run_config, "pack-rule", PACK_RULES),
        poc_candidates=read_int(run_config, "poc-candidates", minimum=0),
        fedcbs_lambda=read_real(run_config, "fedcbs-lambda", minimum=0.0, strict=False),
        exact_time_limit_s=read_real(run_config, "exact-time-limit-s", minimum=0.0, strict=False),
        max_update_norm_ratio=read_real(
            run_config, "max-update-norm-ratio", minimum=0.0, strict=False
        ),
        query_timeout_s=read_real(run_config, "query-timeout-s", minimum=0.0, strict=True),
        train_timeout_s=read_real(run_config, "train-timeout-s", minimum=0.0, strict=True),
        model_bits=model_bits,
        checkpoint_every=read_int(run_config, "checkpoint-every", minimum=0),
        resume_from=str(Path(resume_from).expanduser()) if resume_from else "",
        verbose=verbose,
    )
