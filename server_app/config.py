"""The run config, read once into a typed, validated object before any training.

Every key of ``[tool.flwr.app.config]`` in pyproject.toml is read here (the learning task's keys
through :class:`fedcgd_task.settings.TaskSettings`, τ, η, b through
:class:`fedcgd_task.settings.TrainingSettings`, the uplink's through :class:`channel.CellConfig`).
A bad value raises one ``ValueError`` naming the run-config key, the value and what is allowed.

=============================  ==================================================================
run-config key                 meaning
=============================  ==================================================================
``num-server-rounds``          rounds J, int in [1, 100,000] (:data:`MAX_SERVER_ROUNDS`)
``policy``                     scheduling rule: a built-in name
                               (:data:`fedcgd_strategy.policies.POLICY_NAMES`) or your own
                               :class:`fedcgd_strategy.Policy` subclass as
                               ``"package.module:ClassName"`` or ``"/abs/path/file.py:ClassName"``
                               (:mod:`fedcgd_strategy.policies.registry`)
``policy-params``              the policy's own constructor arguments: a TOML inline table as a
                               string (``"{window = 20}"``), or ``policy-params.<name>`` keys
                               where this project reads the run config
                               (:mod:`server_app.policy_params`)
``aggregator``                 how the scheduled uploads are combined: ``""`` (default) the
                               scheduler's FedAvg, or a Flower strategy whose own
                               ``aggregate_train`` runs on them: a name of
                               ``flwr.serverapp.strategy`` (``FedMedian``, ``FedTrimmedAvg``,
                               ``Krum``, ``MultiKrum``, ``Bulyan``, ``FedAvgM``, ``FedAdam``, ...)
                               or ``"package.module:ClassName"``
                               (:mod:`fedcgd_strategy.flower.aggregators`)
``aggregator-params``          its constructor arguments, as ``policy-params`` (e.g.
                               ``aggregator-params.num-malicious-nodes = 1``); checked against
                               its signature and each number against its range before the
                               start (:mod:`fedcgd_strategy.flower.aggregator_params`)
``protocol``                   ``"auto"`` | ``"channel"`` | ``"query"`` | ``"train-all"`` (auto:
                               train-all for bn2/poc, channel for bc/all, query otherwise)
``eval-every``                 central evaluation every k rounds (and always after the last)
``result-dir``                 absolute folder for the run's results; ``""`` = a new folder
                               (:func:`timestamped_result_dir`: ``~/fedcgd-results/<policy>-<UTC
                               time>`` in a bare ``flwr run``); a folder that is a file or
                               already holds a run's results is refused (never overwritten)
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
``query-timeout-s``            deployment: wait for query replies, seconds > 0; also how long
                               the run waits for ``num-devices`` nodes to connect (any engine)
``train-timeout-s``            deployment: wait for training replies, seconds > 0
``stall-limit-s``              simulation (``flwr run`` on a simulation federation, the
                               in-process engine): replies are waited for as long as the host
                               needs; a run that gets no reply at all for this many seconds is
                               stuck and stopped (status failed, exit 1, one line), seconds in
                               [1, 43,200] (Flower drops a message after 12 h)
                               (:mod:`fedcgd_strategy.flower.simulation`)
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
``channel.trace``              absolute path of a recorded channel (``.npz`` with
                               ``available[R, V]`` bool and ``gain_lin[R, V]`` float, V =
                               num-devices, R >= num-server-rounds): round j replays row j-1, B*
                               is recomputed from its gains; ``""`` = simulate the UMi cell (see
                               :mod:`channel.trace`; the file is checked by
                               :func:`server_app.uplink.check_channel_trace`)
=============================  ==================================================================
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channel import CellConfig
from fedcgd_strategy.flower.aggregator_registry import AGGREGATOR_KEY
from fedcgd_strategy.flower.aggregators import check_aggregator
from fedcgd_strategy.flower.simulation import MAX_STALL_LIMIT_S, MIN_STALL_LIMIT_S
from fedcgd_strategy.policies import PROTOCOL_CHOICES, Protocol, resolve_protocol
from fedcgd_strategy.policies.registry import PolicyContext, check_policy_params, policy_class
from fedcgd_strategy.selectors import PACK_RULES
from fedcgd_task.settings import (
    TaskSettings,
    TrainingSettings,
    check_path_names,
    read_choice,
    read_int,
    read_real,
    require_key,
)
from server_app.policy_params import AGGREGATOR_PARAMS_KEY, read_params, read_policy_params

TARGET_CHOICES = ("global", "devices")

#: Largest ``num-server-rounds``. The ServerApp keeps every round's metrics line in memory (the
#: summary and the no-upload check read them) and on disk: about 2 kB per line on disk and
#: 10 kB as Python objects for 40 devices, so 100,000 rounds are about 1 GB of memory and
#: 200 MB of ``metrics.jsonl`` (the paper's runs have at most a few thousand rounds).
MAX_SERVER_ROUNDS = 100_000

#: run-config key (without the ``channel.`` prefix) -> CellConfig field: every field but
#: ``num_devices`` (the run's ``num-devices``), in kebab case (``deadline_s`` -> ``deadline-s``).
#: ``channel.model-bits`` and ``channel.trace`` are read on their own.
CHANNEL_KEYS: dict[str, str] = {
    field.name.replace("_", "-"): field.name
    for field in dataclasses.fields(CellConfig)
    if field.name != "num_devices"
}


@dataclass(frozen=True)
class RunConfig:
    """The validated run config (see the module docstring for the keys)."""

    task: TaskSettings
    training: TrainingSettings
    cell: CellConfig
    num_server_rounds: int
    policy: str
    protocol: Protocol
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
    stall_limit_s: float
    model_bits: int
    checkpoint_every: int
    resume_from: str
    verbose: bool = False
    channel_trace: str = ""
    policy_params: dict[str, Any] = dataclasses.field(default_factory=dict)
    aggregator: str = ""
    aggregator_params: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def seed(self) -> int:
        """The run seed."""
        return self.task.seed

    def policy_context(self, num_classes: int) -> PolicyContext:
        """What the policy's constructor may take by name besides ``policy-params``."""
        return PolicyContext(
            num_devices=self.task.num_devices,
            num_classes=num_classes,
            initial_g=self.initial_g,
            pack_rule=self.pack_rule,
            poc_candidates=self.poc_candidates,
            fedcbs_lambda=self.fedcbs_lambda,
            exact_time_limit_s=self.exact_time_limit_s,
        )

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
        # CellConfig names the bad field first ("CellConfig.h_bs_m = ..."); other fields may
        # follow in the explanation.
        named = sorted(CHANNEL_KEYS, key=lambda key: _position(text, CHANNEL_KEYS[key]))
        if named and CHANNEL_KEYS[named[0]] in text:
            raise ValueError(f"run-config key 'channel.{named[0]}': {text}") from err
        raise ValueError(f"channel settings: {text}") from err


def _position(text: str, name: str) -> int:
    """Where ``name`` first stands in ``text`` as a whole word (``len(text)`` if nowhere)."""
    found = re.search(rf"\b{re.escape(name)}\b", text)
    return found.start() if found else len(text)


def read_stall_limit(run_config: Mapping[str, Any]) -> float:
    """The ``stall-limit-s`` value: seconds in [``MIN_STALL_LIMIT_S``, ``MAX_STALL_LIMIT_S``]."""
    value = read_real(run_config, "stall-limit-s", minimum=0.0, strict=True)
    if not MIN_STALL_LIMIT_S <= value <= MAX_STALL_LIMIT_S:
        raise ValueError(
            f"run-config key 'stall-limit-s' = {value!r}; allowed: seconds in "
            f"[{MIN_STALL_LIMIT_S:.0f}, {MAX_STALL_LIMIT_S:.0f}] (no reply for this long stops "
            "a simulation as stuck; Flower drops an unanswered message after 12 h)"
        )
    return value


def read_channel_trace(run_config: Mapping[str, Any]) -> str:
    """The ``channel.trace`` value: ``""`` (simulate the cell) or an absolute path, ``~`` expanded.

    Only the value is checked here (no file is read: the launcher may validate a run config for
    a SuperLink on another machine); :func:`server_app.uplink.check_channel_trace` checks the
    file before the start.

    Raises
    ------
    ValueError
        One line naming ``channel.trace``, the value and what is allowed.

    """
    value = require_key(run_config, "channel.trace")
    if value == "":
        return ""
    if isinstance(value, str):
        check_path_names(value, "channel.trace")
    if not isinstance(value, str) or not Path(value).expanduser().is_absolute():
        raise ValueError(
            f"run-config key 'channel.trace' = {value!r} must be the absolute path of a channel "
            'trace (.npz; the ServerApp runs in an unrelated working directory), or "" to '
            "simulate the UMi cell"
        )
    return str(Path(value).expanduser())


#: Parent of the result folder of a run whose ``result-dir`` is empty when the ServerApp starts.
#: Only a bare ``flwr run`` gets there: the project's commands fill ``result-dir`` first, under
#: their ``--out`` (``results/`` of the project by default). The ServerApp runs in a working
#: directory unrelated to the project, so its fallback is a fixed folder in the home directory.
SERVER_RESULTS_DIR = "~/fedcgd-results"


def timestamped_result_dir(parent: str | Path, policy: str) -> Path:
    """The folder of a new run: ``<parent>/<policy>-<UTC time>``, absolute.

    The one rule for a run whose ``result-dir`` is empty: the project's commands use their
    ``--out`` folder as ``parent`` (:func:`experiments.run.preflight.with_result_dir`), a bare
    ``flwr run`` uses :data:`SERVER_RESULTS_DIR` (:func:`parse_run_config`).

    Parameters
    ----------
    parent : str or pathlib.Path
        The folder that holds the runs (``~`` expanded, relative to the working directory).
    policy : str
        The run's policy; characters other than letters, digits, ``.``, ``_`` and ``-`` (those
        of a ``package.module:Name`` or file path policy) become ``_`` in the folder name.

    Returns
    -------
    pathlib.Path
        ``<parent>/<policy>-<YYYYmmdd-HHMMSS>`` in UTC; the folder is not created.

    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    name = re.sub(r"[^A-Za-z0-9._-]", "_", policy).strip("._") or "policy"
    return Path(parent).expanduser().resolve() / f"{name}-{stamp}"


def read_rounds(run_config: Mapping[str, Any]) -> int:
    """``num-server-rounds``: an int in [1, :data:`MAX_SERVER_ROUNDS`]."""
    rounds = read_int(run_config, "num-server-rounds", minimum=1)
    if rounds > MAX_SERVER_ROUNDS:
        raise ValueError(
            f"run-config key 'num-server-rounds' must be an integer in [1, {MAX_SERVER_ROUNDS}] "
            f"(every round's metrics line is kept in memory, about 10 kB each); got {rounds}"
        )
    return rounds


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
    policy = require_key(run_config, "policy")
    policy_params = read_policy_params(run_config)
    check_policy_params(policy, policy_params)
    try:
        requested = read_choice(run_config, "protocol", PROTOCOL_CHOICES)
        protocol = resolve_protocol(policy_class(policy), requested, policy)
    except ValueError as err:
        raise ValueError(f"run-config key 'protocol': {err}") from err
    aggregator = run_config.get(AGGREGATOR_KEY, "")
    if not isinstance(aggregator, str):
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} must be a string (a Flower strategy's name or "
            f"'package.module:ClassName'); got {aggregator!r}"
        )
    aggregator_params = read_params(run_config, AGGREGATOR_PARAMS_KEY)
    check_aggregator(aggregator, aggregator_params, task.num_devices)
    result_dir = require_key(run_config, "result-dir")
    if not isinstance(result_dir, str):
        raise ValueError(f"run-config key 'result-dir' must be a string; got {result_dir!r}")
    check_path_names(result_dir, "result-dir")
    if result_dir and not Path(result_dir).expanduser().is_absolute():
        raise ValueError(
            f"run-config key 'result-dir' = {result_dir!r} must be an absolute path (the "
            'ServerApp runs in an unrelated working directory), or "" for the default'
        )
    model_bits = read_int(run_config, "channel.model-bits", minimum=0)
    resume_from = require_key(run_config, "resume-from")
    if isinstance(resume_from, str):
        check_path_names(resume_from, "resume-from")
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
        result_dir = str(timestamped_result_dir(SERVER_RESULTS_DIR, policy))
    verbose = require_key(run_config, "verbose")
    if not isinstance(verbose, bool):
        raise ValueError(f"run-config key 'verbose' must be true or false; got {verbose!r}")
    return RunConfig(
        task=task,
        training=TrainingSettings.from_run_config(run_config),
        cell=_cell_config(run_config, task.num_devices),
        num_server_rounds=read_rounds(run_config),
        policy=policy,
        policy_params=policy_params,
        aggregator=aggregator,
        aggregator_params=aggregator_params,
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
        stall_limit_s=read_stall_limit(run_config),
        model_bits=model_bits,
        checkpoint_every=read_int(run_config, "checkpoint-every", minimum=0),
        resume_from=str(Path(resume_from).expanduser()) if resume_from else "",
        verbose=verbose,
        channel_trace=read_channel_trace(run_config),
    )
