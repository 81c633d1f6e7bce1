"""From the run config's ``policy`` and ``policy-params`` to a policy object.

docs/design.md, "Your own policy". No flwr, no torch.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from fedcgd_strategy.constructor_params import constructor_arguments, keyword_parameters
from fedcgd_strategy.policies.builtin import (
    AllFeasiblePolicy,
    BestChannelPolicy,
    BestNormPolicy,
    FedCBSPolicy,
    FedCGDPolicy,
    PowerOfChoicePolicy,
)
from fedcgd_strategy.policies.core import Policy
from fedcgd_task.imports import REFERENCE_FORMS, import_object, is_reference
from fedcgd_task.schema import DEFAULTS
from fedcgd_task.setting import did_you_mean

#: Run-config key of the policy.
POLICY_KEY = "policy"
#: Run-config table of the policy's own parameters.
PARAMS_KEY = "policy-params"


@dataclass(frozen=True)
class PolicyContext:
    """What a policy constructor may receive by parameter name besides ``policy-params``: V, C
    (from the data set) and the run-config keys of the same names in kebab case."""  # noqa: D205, D209

    num_devices: int
    num_classes: int
    initial_g: float = cast(float, DEFAULTS["initial-g"])
    pack_rule: str = cast(str, DEFAULTS["pack-rule"])
    poc_candidates: int = cast(int, DEFAULTS["poc-candidates"])
    fedcbs_lambda: float = cast(float, DEFAULTS["fedcbs-lambda"])
    exact_time_limit_s: float = cast(float, DEFAULTS["exact-time-limit-s"])


#: PolicyContext field -> where its value comes from (for error messages).
CONTEXT_SOURCES: dict[str, str] = {
    f.name: f"run-config key {f.name.replace('_', '-')!r}"
    for f in dataclasses.fields(PolicyContext)
} | {"num_classes": "the data set"}


def _fedcgd(method: str, per_class: bool = False) -> tuple[type[Policy], Mapping[str, object]]:
    return FedCGDPolicy, {"method": method, "per_class": per_class}


#: A built-in policy: its label (every figure, table and console line shows it), its class and
#: the constructor arguments its name fixes.
_BUILT_IN: dict[str, tuple[str, tuple[type[Policy], Mapping[str, object]]]] = {
    "fedcgd-fscd": ("FedCGD-FSCD", _fedcgd("fscd")),
    "fedcgd-gs": ("FedCGD-GS", _fedcgd("gs")),
    "fedcgd-fscd-gc": ("FedCGD-FSCD (Ĝ_c)", _fedcgd("fscd", per_class=True)),
    "fedcgd-exact": ("FedCGD-exact", _fedcgd("exact")),
    "fedcgd-cd": ("FedCGD-CD", _fedcgd("cd")),
    "bc": ("BC (best channel)", (BestChannelPolicy, {})),
    "bn2": ("BN2 (best norm)", (BestNormPolicy, {})),
    "poc": ("POC (power of choice)", (PowerOfChoicePolicy, {})),
    "fedcbs": ("Fed-CBS", (FedCBSPolicy, {})),
    "all": ("all (no budget)", (AllFeasiblePolicy, {})),
}
#: The built-in policy names (the run-config key ``policy`` also takes references).
POLICY_NAMES: tuple[str, ...] = tuple(_BUILT_IN)
#: Each built-in policy's label.
POLICY_LABELS: dict[str, str] = {name: label for name, (label, _) in _BUILT_IN.items()}
#: What a misspelt name is compared with: the names, then the labels.
_SPELLINGS = (*POLICY_NAMES, *POLICY_LABELS.values())
#: A built-in's name or label in lower case -> its name.
_BY_LOWER = {k.lower(): name for name, label in POLICY_LABELS.items() for k in (name, label)}


def canonical_policy(setting: str) -> str:
    """The built-in name ``setting`` spells as its name or label, any case (``BC (best
    channel)``: ``bc``); else ``setting``."""  # noqa: D205, D209
    return _BY_LOWER.get(setting.lower(), setting) if isinstance(setting, str) else setting


def policy_entry(setting: str) -> tuple[type[Policy], Mapping[str, object]]:
    """The class and fixed arguments ``policy = setting`` names (ValueError: one line)."""
    if not isinstance(setting, str):
        raise ValueError(f"run-config key {POLICY_KEY!r} must be a string; got {setting!r}")
    if canonical_policy(setting) in _BUILT_IN:
        return _BUILT_IN[canonical_policy(setting)][1]
    if not is_reference(setting):
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}; {did_you_mean(setting, _SPELLINGS)}"
            f"allowed: {', '.join(POLICY_NAMES)} (or their figure labels), or your Policy "
            f"subclass as {REFERENCE_FORMS}"
        )
    found = import_object(setting, POLICY_KEY)
    if not (isinstance(found, type) and issubclass(found, Policy)):
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r} names {found!r}; allowed: a subclass "
            "of fedcgd_strategy.Policy"
        )
    if inspect.isabstract(found):
        missing = ", ".join(sorted(getattr(found, "__abstractmethods__", ())))
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}: {found.__name__} does not implement "
            f"{missing}"
        )
    return found, {}


def policy_class(setting: str) -> type[Policy]:
    """The class of the policy ``setting`` names (its class attributes say what it needs)."""
    return policy_entry(setting)[0]


def policy_param_arguments(setting: str, params: Mapping[str, object]) -> dict[str, object]:
    """``policy-params`` checked against ``setting``'s constructor, as kwargs (ValueError)."""
    policy_type, fixed = policy_entry(setting)
    refused = {n: f"{n} comes from {source}; set it there" for n, source in CONTEXT_SOURCES.items()}
    for name, value in fixed.items():
        fixes = f"policy {setting!r} fixes {name} = {value!r}"
        refused[name] = f"{fixes}; name another policy to change it"
    return constructor_arguments(
        policy_type, params, table=PARAMS_KEY, owner=f"policy {setting!r}", refused=refused,
        untyped=True,
    )  # fmt: skip


def resolved_policy_arguments(
    setting: str, context: PolicyContext, params: Mapping[str, object] | None = None
) -> dict[str, dict[str, Any]]:
    """Every keyword argument the policy is built with: its value and where it came from."""
    policy_type, fixed = policy_entry(setting)
    given = policy_param_arguments(setting, params or {})
    resolved: dict[str, dict[str, Any]] = {}
    for name, parameter in keyword_parameters(policy_type).items():
        if name in fixed:
            resolved[name] = {"value": fixed[name], "from": f"the policy name {setting!r}"}
        elif name in given:
            resolved[name] = {"value": given[name], "from": f"run-config key {PARAMS_KEY!r}"}
        elif name in CONTEXT_SOURCES:
            resolved[name] = {"value": getattr(context, name), "from": CONTEXT_SOURCES[name]}
        elif parameter.default is not inspect.Parameter.empty:
            resolved[name] = {"value": parameter.default, "from": "the class default"}
    return resolved


def make_policy(
    setting: str, context: PolicyContext, params: Mapping[str, object] | None = None, *,
    resolved: Mapping[str, Mapping[str, Any]] | None = None,
) -> Policy:  # fmt: skip
    """Build the policy the run config names, ``name`` canonical (ValueError: one line);
    ``resolved``: its :func:`resolved_policy_arguments` where already computed."""  # noqa: D205, D209
    if resolved is None:
        resolved = resolved_policy_arguments(setting, context, params)
    arguments = {k: v["value"] for k, v in resolved.items() if v["from"] != "the class default"}
    try:
        policy = policy_class(setting)(**arguments)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}: building it with "
            f"{arguments} raised {type(err).__name__}: {err}"
        ) from err
    policy.name = canonical_policy(setting)
    return policy


def replaced_defaults(setting: str, context: PolicyContext) -> list[str]:
    """Where a run-level setting replaces a researcher's class's own default, one line each."""
    if canonical_policy(setting) in _BUILT_IN:
        return []
    lines = []
    for name, parameter in keyword_parameters(policy_class(setting)).items():
        if name not in CONTEXT_SOURCES or parameter.default is inspect.Parameter.empty:
            continue
        value = getattr(context, name)
        if value != parameter.default:
            lines.append(
                f"policy {setting!r}: its default {name} = {parameter.default!r} is replaced by "
                f"{CONTEXT_SOURCES[name]} = {value!r}"
            )
    return lines
