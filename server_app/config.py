"""The run config, read once into a typed, validated object before any training.

Each key is defined in :mod:`fedcgd_task.schema`; :func:`parse_run_config` adds the checks that
involve other keys or code. A bad value raises one ``ValueError`` naming the key, the value and
what is allowed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channel import CellConfig
from fedcgd_strategy.flower.aggregators import check_aggregator
from fedcgd_strategy.policies import Protocol, resolve_protocol
from fedcgd_strategy.policies.registry import PolicyContext, check_policy_params, policy_class
from fedcgd_task.schema import SETTINGS, read
from fedcgd_task.settings import RECORDED, TaskSettings, TrainingSettings
from server_app.policy_params import AGGREGATOR_PARAMS_KEY, read_params, read_policy_params

#: run-config key (without the ``channel.`` prefix) -> CellConfig field: every field but
#: ``num_devices`` (the run's ``num-devices``), in kebab case (``deadline_s`` -> ``deadline-s``).
#: ``channel.model-bits`` and ``channel.trace`` are read on their own.
CHANNEL_KEYS: dict[str, str] = {
    field.name.replace("_", "-"): field.name
    for field in dataclasses.fields(CellConfig)
    if field.name != "num_devices"
}

#: :class:`RunConfig` fields that :func:`parse_run_config` reads with other keys.
_READ_APART = ("policy", "policy_params", "protocol", "aggregator_params")


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
    """The cell of the ``channel.*`` keys; a refusal names the key of the field it names first."""
    values = {name: read(run_config, f"channel.{key}") for key, name in CHANNEL_KEYS.items()}
    try:
        return CellConfig(num_devices=num_devices, **values)
    except ValueError as err:
        field = re.match(r"CellConfig\.(\w+)", str(err))
        where = f"'channel.{field.group(1).replace('_', '-')}'" if field else "channel.*"
        raise ValueError(f"run-config key {where}: {err}") from err


#: Parent of a bare ``flwr run``'s result folder when ``result-dir`` is empty.
SERVER_RESULTS_DIR = "~/fedcgd-results"


#: Run-config keys a default folder's name leaves out: where and how a run runs or reports
#: (``Setting.computes`` false); the policy and aggregator come first in it.
UNNAMED_KEYS = ("policy", "aggregator", *(s.key for s in SETTINGS if not s.computes))
#: Longest name before the time; a longer one is cut and ends in a digest of the whole.
MAX_NAME_CHARS = 100


def _name_part(text: str) -> str:
    """``text`` with every character but letters, digits, ``.``, ``=``, ``_``, ``-`` as ``_``."""
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.=_-]", "_", text)).strip("._")


def run_folder_name(run_config: Mapping[str, Any]) -> str:
    """What tells a run apart, for its default folder: ``bc_FedAdam_local-steps=5``.

    The policy (a class path as its class name), the aggregator unless the scheduler's FedAvg,
    then every setting whose value differs from its default (in the schema's order, the last
    part of a dotted key), but those of :data:`UNNAMED_KEYS`; cut at :data:`MAX_NAME_CHARS`.
    """
    from fedcgd_task.settings import default_run_config

    defaults = default_run_config()
    parts = [str(run_config.get("policy", "")).rsplit(":", 1)[-1]]
    aggregator = str(run_config.get("aggregator") or "")
    if aggregator:
        parts.append(aggregator.rsplit(":", 1)[-1])
    for key, default in defaults.items():
        value = run_config.get(key, default)
        if key in UNNAMED_KEYS or value == default:
            continue
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{key.rsplit('.', 1)[-1]}={shown}")
    name = "_".join(p for p in (_name_part(part) for part in parts) if p) or "run"
    if len(name) > MAX_NAME_CHARS:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME_CHARS - 9]}-{digest}"
    return name


def timestamped_result_dir(parent: str | Path, run_config: Mapping[str, Any]) -> Path:
    """The folder of a new run: ``<parent>/<name>-<YYYYmmdd-HHMMSS>`` (UTC, absolute, not made).

    ``<name>``: :func:`run_folder_name`.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path(parent).expanduser().resolve() / f"{run_folder_name(run_config)}-{stamp}"


def parse_run_config(run_config: Mapping[str, Any]) -> RunConfig:
    """Read and validate the whole run config (``context.run_config``: flat, kebab-case keys).

    Raises
    ------
    ValueError
        Naming the key, the bad value and what is allowed.
    """
    task = TaskSettings.from_run_config(run_config)
    policy = read(run_config, "policy")
    policy_params = read_policy_params(run_config)
    check_policy_params(policy, policy_params)
    try:
        protocol = resolve_protocol(policy_class(policy), read(run_config, "protocol"), policy)
    except ValueError as err:
        raise ValueError(f"run-config key 'protocol': {err}") from err
    aggregator_params = read_params(run_config, AGGREGATOR_PARAMS_KEY)
    values = {
        name: read(run_config, key)
        for key, name in RECORDED.items()
        if "." not in name and name not in _READ_APART
    }
    check_aggregator(values["aggregator"], aggregator_params, task.num_devices)
    result_dir, resume_from = values["result_dir"], values["resume_from"]
    if resume_from:
        if result_dir and Path(result_dir) != Path(resume_from):
            raise ValueError(
                f"run-config key 'result-dir' = {result_dir!r}: a resumed run continues in its "
                f"own folder (resume-from = {resume_from!r}); leave result-dir empty or the same"
            )
        values["result_dir"] = resume_from
    elif result_dir == "":
        values["result_dir"] = str(timestamped_result_dir(SERVER_RESULTS_DIR, run_config))
    return RunConfig(
        task=task,
        training=TrainingSettings.from_run_config(run_config),
        cell=_cell_config(run_config, task.num_devices),
        policy=policy,
        policy_params=policy_params,
        aggregator_params=aggregator_params,
        protocol=protocol,
        **values,
    )
