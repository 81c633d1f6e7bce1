"""The run config, read once into a typed, validated object before any training.

Each key is defined in :mod:`fedcgd_task.schema`; :func:`parse_run_config` adds the checks that
involve other keys or code. A bad value raises one ``ValueError`` naming the key, the value and
what is allowed. The tables ``policy-params`` and ``aggregator-params`` travel as TOML inline
tables in strings (Flower's run config holds declared scalar keys only); the project's commands
also take ``<table>.<name>`` keys and fold them in (docs/bring-your-own.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from channel import CellConfig
from channel.pathloss import PATHLOSS_MODELS
from fedcgd_strategy.constructor_params import keyword_parameters
from fedcgd_strategy.flower.aggregators import make_aggregator
from fedcgd_strategy.policies import Protocol, resolve_protocol
from fedcgd_strategy.policies.registry import (
    PolicyContext,
    canonical_policy,
    policy_class,
    policy_param_arguments,
)
from fedcgd_task.imports import import_object
from fedcgd_task.schema import SETTINGS
from fedcgd_task.settings import TaskSettings, TrainingSettings, read_part, set_nested

#: The declared run-config key (a TOML inline table as a string).
PARAMS_KEY = "policy-params"
#: Prefix of the flat form ``policy-params.<name>``.
PARAMS_PREFIX = PARAMS_KEY + "."
#: The declared run-config key of the aggregator's parameters (same form as ``policy-params``).
AGGREGATOR_PARAMS_KEY = "aggregator-params"
#: Every parameter table of the run config.
PARAMS_KEYS = (PARAMS_KEY, AGGREGATOR_PARAMS_KEY)
#: A TOML bare key.
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_toml_value(value: object, key: str = PARAMS_KEY) -> str:
    """``value`` as the text of one TOML value, on one line (scalars by ``tomli_w``).

    Raises
    ------
    ValueError
        Naming ``key``: a value TOML cannot hold, or a table name that is not a bare key.
    """
    if isinstance(value, Mapping):  # a one-line inline table
        bad = [k for k in value if not isinstance(k, str) or not BARE_KEY.fullmatch(k)]
        if bad:
            raise ValueError(
                f"run-config key {key}.{bad[0]}: allowed: a parameter name (letters, digits, "
                "'_' and '-')"
            )
        items = ", ".join(f"{k} = {format_toml_value(v, f'{key}.{k}')}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_toml_value(v, key) for v in value) + "]"
    try:
        text = tomli_w.dumps({"v": value}).removeprefix("v = ").removesuffix("\n")
        text.encode("utf-8")  # what a TOML file and Flower's messages hold
    except (TypeError, UnicodeEncodeError) as err:
        raise ValueError(
            f"run-config key {key!r}: cannot write {value!r} as a TOML value ({err}); "
            "allowed: a bool, number, string of Unicode characters, or an array or table of them"
        ) from err
    return text


#: Longest ``policy-params`` text (characters): room for a list of a few thousand numbers.
MAX_PARAMS_CHARS = 65536


def _shown(text: str) -> str:
    """``text`` as repr, cut to 80 characters for a one-line message."""
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _parse_table(text: object, key: str = PARAMS_KEY) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError(
            f"run-config key {key!r} = {text!r}; allowed: a TOML inline table as a "
            "string, e.g. '{window = 20}'"
        )
    if len(text) > MAX_PARAMS_CHARS:
        raise ValueError(
            f"run-config key {key!r} = {_shown(text)} holds {len(text)} characters; "
            f"allowed: at most {MAX_PARAMS_CHARS}"
        )
    try:
        table = tomllib.loads(f"table = {text.strip() or '{}'}")["table"]
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ValueError(
            f"run-config key {key!r} = {_shown(text)} is not a TOML inline table "
            f"({reason}); allowed: e.g. '{{window = 20, beta = 0.5}}'"
        ) from err
    if not isinstance(table, dict):
        raise ValueError(
            f"run-config key {key!r} = {text!r}; allowed: a TOML inline table such as "
            "'{window = 20}'"
        )
    return table


def read_params(run_config: Mapping[str, Any], key: str = PARAMS_KEY) -> dict[str, Any]:
    """The table ``key`` (the policy's by default) from its string and its ``<key>.<name>`` keys.

    A dotted name is a nested table, as in TOML: ``aggregator-params.strategy-params.beta``
    is ``beta`` in the table ``strategy-params``.

    Raises
    ------
    ValueError
        One line: the string is not a TOML inline table, or a name is given in both forms.

    """
    params = _parse_table(run_config.get(key, "{}"), key)
    prefix = key + "."
    for flat, value in run_config.items():
        if not flat.startswith(prefix):
            continue
        clash = f"is also set in {key!r} = {run_config.get(key)!r}"
        set_nested(params, flat.removeprefix(prefix), value, key=flat, clash=clash)
    return params


def fold_policy_params(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with every ``<table>.<name>`` key folded into its table's string.

    The tables are :data:`PARAMS_KEYS` (``policy-params``, ``aggregator-params``): what Flower
    accepts are declared keys only. Without flat keys the mapping is returned as is.
    """
    out = dict(run_config)
    for key in PARAMS_KEYS:
        prefix = key + "."
        if not any(flat.startswith(prefix) for flat in out):
            continue
        params = read_params(out, key)
        out = {k: v for k, v in out.items() if not k.startswith(prefix)}
        out[key] = format_toml_value(params, key)
    return out


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
    channel_model: str = "paper"
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


def _cell_config(run_config: Mapping[str, Any], num_devices: int, model: str) -> CellConfig:
    """The cell of the ``channel.*`` keys; a refusal names the key of the field it names first.

    Its path loss is ``channel.model``'s (the paper's for a trace or your own channel).
    """
    pathloss = model if model in PATHLOSS_MODELS else PATHLOSS_MODELS[0]
    try:
        return CellConfig(
            num_devices=num_devices, pathloss_model=pathloss, **read_part(run_config, "cell")
        )
    except ValueError as err:
        field = re.match(r"CellConfig\.(\w+)", str(err))
        where = f"'channel.{field.group(1).replace('_', '-')}'" if field else "channel.*"
        raise ValueError(f"run-config key {where}: {err}") from err


#: The run-config key that names the uplink.
CHANNEL_KEY = "channel.model"


def channel_class(value: str) -> type:
    """The researcher's channel class ``channel.model`` names (``module:Class``), checked.

    It must have ``draw_round`` (:class:`channel.ChannelModel`) and a constructor whose
    parameters without a default are all among :func:`channel_values`'s names. Raises ValueError
    (one line naming the key and the value).
    """
    found = import_object(value, CHANNEL_KEY)
    where = f"run-config key {CHANNEL_KEY!r} = {value!r}"
    if not (isinstance(found, type) and callable(getattr(found, "draw_round", None))):
        raise ValueError(
            f"{where} names {found!r}; allowed: a class with draw_round(model_bits) returning a "
            "channel.RoundDraw (channel.ChannelModel)"
        )
    given = channel_values(CellConfig(), None)
    for name, parameter in keyword_parameters(found).items():
        if name not in given and parameter.default is inspect.Parameter.empty:
            raise ValueError(
                f"{where}: {found.__name__}() needs {name!r}, which no setting gives; allowed "
                f"parameters: {', '.join(given)}"
            )
    return found


def channel_values(cell: CellConfig, rng: object) -> dict[str, object]:
    """What a channel class's constructor may take by name.

    ``rng`` (the run's channel generator, its only randomness), ``cell`` (the
    :class:`CellConfig` of the ``channel.*`` keys) and each of its fields (``num_devices``,
    ``deadline_s`` for ``channel.deadline-s``, ...).
    """
    fields = {f.name: getattr(cell, f.name) for f in dataclasses.fields(cell)}
    del fields["pathloss_model"]  # channel.model's: the paper's for your own channel
    return {"rng": rng, "cell": cell, **fields}


def _check_channel(model: str, trace: str) -> None:
    """``channel.trace`` is given just when ``channel.model`` is ``trace``; a class is checked."""
    if model == "trace" and not trace:
        raise ValueError(
            f"run-config key {CHANNEL_KEY!r} = 'trace' replays run-config key 'channel.trace', "
            "which is empty; allowed: the absolute path of a recorded channel (.npz)"
        )
    if trace and model != "trace":
        raise ValueError(
            f"run-config key 'channel.trace' = {trace!r} is replayed only with channel.model = "
            f"'trace' (got {model!r}); set channel.model='trace' or leave channel.trace empty"
        )
    if model not in PATHLOSS_MODELS and model != "trace":
        channel_class(model)


#: Parent of a bare ``flwr run``'s result folder when ``result-dir`` is empty.
SERVER_RESULTS_DIR = "~/fedcgd-results"


#: Run-config keys a default folder's name leaves out: where and how a run runs or reports
#: (``Setting.computes`` false); the policy, aggregator and channel come first in it.
UNNAMED_KEYS = ("policy", "aggregator", CHANNEL_KEY, *(s.key for s in SETTINGS if not s.computes))
#: Longest name before the time; a longer one is cut and ends in a digest of the whole.
MAX_NAME_CHARS = 100


def _name_part(text: str) -> str:
    """``text`` with every character but letters, digits, ``.``, ``=``, ``_``, ``-`` as ``_``."""
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.=_-]", "_", text)).strip("._")


def run_folder_name(run_config: Mapping[str, Any]) -> str:
    """What tells a run apart, for its default folder: ``bc_FedAdam_channel=tr38901_local-steps=5``.

    The policy (a class path as its class name), the aggregator unless the scheduler's FedAvg,
    ``channel=<channel.model>`` unless the default (a class path as its class name), then every
    setting whose value differs from its default (in the schema's order, the last part of a
    dotted key), but those of :data:`UNNAMED_KEYS`; cut at :data:`MAX_NAME_CHARS`.
    """
    from fedcgd_task.settings import default_run_config

    defaults = default_run_config()
    parts = [str(run_config.get("policy", "")).rsplit(":", 1)[-1]]
    aggregator = str(run_config.get("aggregator") or "")
    if aggregator:
        parts.append(aggregator.rsplit(":", 1)[-1])
    channel = str(run_config.get(CHANNEL_KEY, defaults[CHANNEL_KEY]))
    if channel != defaults[CHANNEL_KEY]:
        parts.append(f"channel={channel.rsplit(':', 1)[-1]}")
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


def with_canonical_policy(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with a built-in's label or any case of its name as the name (``bc``)."""
    policy = run_config.get("policy")
    return {**run_config, "policy": canonical_policy(policy)} if policy else dict(run_config)


def parse_run_config(run_config: Mapping[str, Any]) -> RunConfig:
    """Read and validate the whole run config (``context.run_config``: flat, kebab-case keys).

    Raises
    ------
    ValueError
        Naming the key, the bad value and what is allowed.
    """
    run_config = with_canonical_policy(run_config)
    task = TaskSettings.from_run_config(run_config)
    values = read_part(run_config, "")  # the tables as strings, the protocol unresolved
    policy = values["policy"]
    values["policy_params"] = read_params(run_config)
    policy_param_arguments(policy, values["policy_params"])
    try:
        values["protocol"] = resolve_protocol(policy_class(policy), values["protocol"], policy)
    except ValueError as err:
        raise ValueError(f"run-config key 'protocol': {err}") from err
    values["aggregator_params"] = read_params(run_config, AGGREGATOR_PARAMS_KEY)
    make_aggregator(values["aggregator"], values["aggregator_params"], task.num_devices)
    _check_channel(values["channel_model"], values["channel_trace"])
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
        training=TrainingSettings(**read_part(run_config, "training")),
        cell=_cell_config(run_config, task.num_devices, values["channel_model"]),
        **values,
    )
