"""The run config, read once into a frozen :class:`RunConfig`
(keys: :mod:`fedcgd_config.schema`)."""  # noqa: D205, D209

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
from fedcgd_config.imports import import_object
from fedcgd_config.schema import DEFAULTS, SETTINGS
from fedcgd_config.settings import TaskSettings, TrainingSettings, read_part, set_nested
from fedcgd_strategy.constructor_params import keyword_parameters
from fedcgd_strategy.policies import Protocol, resolve_protocol
from fedcgd_strategy.policies.registry import PolicyContext, canonical_policy, policy_class

PARAMS_KEY, AGGREGATOR_PARAMS_KEY = "policy-params", "aggregator-params"
PARAMS_PREFIX = PARAMS_KEY + "."
MAX_PARAMS_CHARS = 65536
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_toml_value(value: object, key: str = PARAMS_KEY) -> str:
    """``value`` as one line of TOML (tables inline; ValueError naming ``key`` if it cannot)."""
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str) or not _BARE_KEY.fullmatch(k)]
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


def read_params(run_config: Mapping[str, Any], key: str = PARAMS_KEY) -> dict[str, Any]:
    """The table ``key`` from its string and its ``<key>.<name>`` keys (ValueError: one line)."""
    text = run_config.get(key, "{}")
    shown = repr(text) if len(repr(text)) <= 80 else repr(text)[:77] + "..."
    allowed = "allowed: a TOML inline table as a string, e.g. '{window = 20, beta = 0.5}'"
    if not isinstance(text, str) or len(text) > MAX_PARAMS_CHARS:
        size = f" holds {len(text)} characters" if isinstance(text, str) else ""
        raise ValueError(
            f"run-config key {key!r} = {shown}{size}; {allowed}, of at most {MAX_PARAMS_CHARS} "
            "characters"
        )
    try:
        params = tomllib.loads(f"table = {text.strip() or '{}'}")["table"]
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ValueError(
            f"run-config key {key!r} = {shown} is not a TOML inline table ({reason}); {allowed}"
        ) from err
    if not isinstance(params, dict):
        raise ValueError(f"run-config key {key!r} = {shown}; {allowed}")
    for flat, value in run_config.items():
        if flat.startswith(key + "."):
            clash = f"is also set in {key!r} = {text!r}"
            set_nested(params, flat.removeprefix(key + "."), value, key=flat, clash=clash)
    return params


def fold_policy_params(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with every ``<table>.<name>`` key folded into its table's string."""
    out = dict(run_config)
    for key in (PARAMS_KEY, AGGREGATOR_PARAMS_KEY):
        if any(flat.startswith(key + ".") for flat in out):
            params = read_params(out, key)
            out = {k: v for k, v in out.items() if not k.startswith(key + ".")}
            out[key] = format_toml_value(params, key)
    return out


@dataclass(frozen=True)
class RunConfig:
    """The checked run config, by the schema's keys in snake case."""

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
    verbose: bool
    channel_model: str
    channel_trace: str
    policy_params: dict[str, Any]
    aggregator: str
    aggregator_params: dict[str, Any]

    @property
    def seed(self) -> int:  # noqa: D102
        return self.task.seed

    def policy_context(self, num_classes: int) -> PolicyContext:
        """What the policy's constructor may take by name besides ``policy-params``."""
        fields = (f.name for f in dataclasses.fields(PolicyContext) if hasattr(self, f.name))
        shared = {name: getattr(self, name) for name in fields}  # initial_g, pack_rule, ...
        return PolicyContext(num_devices=self.task.num_devices, num_classes=num_classes, **shared)

    def to_dict(self) -> dict[str, Any]:
        """The view ``config.json`` holds."""
        return dataclasses.asdict(self)


CHANNEL_KEY = "channel.model"


def channel_class(value: str) -> type:
    """Your channel class ``channel.model`` names, checked (ValueError: one line)."""
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
    """What a channel class's constructor may take by name: ``rng``, ``cell``, its fields."""
    fields = {f.name: getattr(cell, f.name) for f in dataclasses.fields(cell)}
    del fields["pathloss_model"]  # channel.model's: the paper's for your own channel
    return {"rng": rng, "cell": cell, **fields}


SERVER_RESULTS_DIR = "~/fedcgd-results"
#: Keys a folder's name leaves out: those named first, and those whose ``computes`` is false.
UNNAMED_KEYS = ("policy", "aggregator", CHANNEL_KEY, *(s.key for s in SETTINGS if not s.computes))
MAX_NAME_CHARS = 100


def run_folder_name(run_config: Mapping[str, Any]) -> str:
    """A run's default folder name: ``bc_FedAdam_channel=tr38901_local-steps=5`` (non-defaults)."""
    parts = [str(run_config.get(k) or "").rsplit(":", 1)[-1] for k in ("policy", "aggregator")]
    channel = str(run_config.get(CHANNEL_KEY, DEFAULTS[CHANNEL_KEY]))
    if channel != DEFAULTS[CHANNEL_KEY]:
        parts.append(f"channel={channel.rsplit(':', 1)[-1]}")
    for key, default in DEFAULTS.items():
        value = run_config.get(key, default)
        if key not in UNNAMED_KEYS and value != default:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            parts.append(f"{key.rsplit('.', 1)[-1]}={shown}")
    safe = (re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.=_-]", "_", p)).strip("._") for p in parts)
    name = "_".join(p for p in safe if p) or "run"
    if len(name) > MAX_NAME_CHARS:
        name = f"{name[: MAX_NAME_CHARS - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name


def timestamped_result_dir(parent: str | Path, run_config: Mapping[str, Any]) -> Path:
    """``<parent>/<run_folder_name>-<YYYYmmdd-HHMMSS>`` (UTC, absolute, not made)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path(parent).expanduser().resolve() / f"{run_folder_name(run_config)}-{stamp}"


def with_canonical_policy(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with ``policy`` as a built-in's name (``BC`` -> ``bc``)."""
    policy = run_config.get("policy")
    return {**run_config, "policy": canonical_policy(policy)} if policy else dict(run_config)


def check_components(config: RunConfig) -> None:
    """Check ``policy-params`` against the policy and build the aggregator once (ValueError)."""
    from fedcgd_strategy.flower.aggregators import make_aggregator
    from fedcgd_strategy.policies.registry import policy_param_arguments

    policy_param_arguments(config.policy, config.policy_params)
    make_aggregator(config.aggregator, config.aggregator_params, config.task.num_devices)


def parse_run_config(run_config: Mapping[str, Any]) -> RunConfig:
    """Read and check the flat run config (ValueError naming key, value and what is allowed)."""
    run_config = with_canonical_policy(run_config)
    task = TaskSettings.from_run_config(run_config)
    values = read_part(run_config, "")  # the tables as strings, the protocol unresolved
    policy, model, trace = values["policy"], values["channel_model"], values["channel_trace"]
    values["policy_params"] = read_params(run_config)
    cls = policy_class(policy)
    try:
        values["protocol"] = resolve_protocol(cls, values["protocol"], policy)
    except ValueError as err:
        raise ValueError(f"run-config key 'protocol': {err}") from err
    values["aggregator_params"] = read_params(run_config, AGGREGATOR_PARAMS_KEY)
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
    if model not in (*PATHLOSS_MODELS, "trace"):
        channel_class(model)
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
    training = TrainingSettings(**read_part(run_config, "training"))
    pathloss = model if model in PATHLOSS_MODELS else PATHLOSS_MODELS[0]  # your channel: paper's
    cell_values = {"num_devices": task.num_devices, **read_part(run_config, "cell")}
    try:
        cell = CellConfig(pathloss_model=pathloss, **cell_values)
    except ValueError as err:  # a check of two fields: name the key of the first
        field = re.match(r"CellConfig\.(\w+)", str(err))
        where = f"'channel.{field.group(1).replace('_', '-')}'" if field else "channel.*"
        raise ValueError(f"run-config key {where}: {err}") from err
    return RunConfig(task=task, training=training, cell=cell, **values)
