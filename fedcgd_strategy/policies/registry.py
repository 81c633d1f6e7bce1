"""From the run config's ``policy`` and ``policy-params`` to a policy object: one registry.

A built-in name is a class plus the constructor arguments it fixes; a reference names a
researcher's :class:`~fedcgd_strategy.policies.core.Policy` subclass. Both are built alike,
with arguments by parameter name (docs/design.md, "Your own policy"). No flwr, no torch.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
from fedcgd_task.schema import did_you_mean

#: Run-config key of the policy.
POLICY_KEY = "policy"
#: Run-config table of the policy's own parameters.
PARAMS_KEY = "policy-params"


@dataclass(frozen=True)
class PolicyContext:
    """What a policy constructor may receive by parameter name besides ``policy-params``.

    ``num_devices`` (V), ``num_classes`` (C, from the data set) and the run-config keys of the same
    names in kebab case (``initial-g``, ``pack-rule``, ``poc-candidates``, ``fedcbs-lambda``,
    ``exact-time-limit-s``).
    """

    num_devices: int
    num_classes: int
    initial_g: float = 1.0
    pack_rule: str = "stop"
    poc_candidates: int = 0
    fedcbs_lambda: float = 10.0
    exact_time_limit_s: float = 0.0


#: PolicyContext field -> where its value comes from (for error messages).
CONTEXT_SOURCES: dict[str, str] = {
    f.name: "the data set"
    if f.name == "num_classes"
    else f"run-config key {f.name.replace('_', '-')!r}"
    for f in dataclasses.fields(PolicyContext)
}


#: A built-in policy: its class and the constructor arguments its name fixes.
PolicyEntry = tuple[type[Policy], Mapping[str, object]]
_BUILT_IN: dict[str, PolicyEntry] = {
    "fedcgd-fscd": (FedCGDPolicy, {"method": "fscd", "per_class": False}),
    "fedcgd-gs": (FedCGDPolicy, {"method": "gs", "per_class": False}),
    "fedcgd-fscd-gc": (FedCGDPolicy, {"method": "fscd", "per_class": True}),
    "fedcgd-exact": (FedCGDPolicy, {"method": "exact", "per_class": False}),
    "fedcgd-cd": (FedCGDPolicy, {"method": "cd", "per_class": False}),
    "bc": (BestChannelPolicy, {}),
    "bn2": (BestNormPolicy, {}),
    "poc": (PowerOfChoicePolicy, {}),
    "fedcbs": (FedCBSPolicy, {}),
    "all": (AllFeasiblePolicy, {}),
}

#: The built-in policy names (the run-config key ``policy`` also takes references).
POLICY_NAMES: tuple[str, ...] = tuple(_BUILT_IN)

#: Each built-in policy's label, the one every figure, table and console line shows.
POLICY_LABELS: dict[str, str] = {
    "fedcgd-fscd": "FedCGD-FSCD",
    "fedcgd-gs": "FedCGD-GS",
    "fedcgd-fscd-gc": "FedCGD-FSCD (Ĝ_c)",
    "fedcgd-exact": "FedCGD-exact",
    "fedcgd-cd": "FedCGD-CD",
    "bc": "BC (best channel)",
    "bn2": "BN2 (best norm)",
    "poc": "POC (power of choice)",
    "fedcbs": "Fed-CBS",
    "all": "all (no budget)",
}
#: What a misspelt name is compared with: the names, then the labels.
_SPELLINGS = (*POLICY_NAMES, *POLICY_LABELS.values())
#: A built-in's name or label in lower case -> its name.
_BY_LOWER = {k.lower(): name for name, label in POLICY_LABELS.items() for k in (name, label)}


def canonical_policy(setting: str) -> str:
    """The built-in name ``setting`` spells as its name or label, in any case; else ``setting``.

    ``FedCGD-FSCD`` and ``BC (best channel)`` give ``fedcgd-fscd`` and ``bc``: a run records the
    name, whichever spelling it was given.
    """
    return _BY_LOWER.get(setting.lower(), setting) if isinstance(setting, str) else setting


def policy_entry(setting: str) -> PolicyEntry:
    """The class and fixed arguments that the run-config value ``setting`` of ``policy`` names.

    Raises ValueError (one line) for an unknown name, a reference that cannot be imported, or an
    object that is not a concrete :class:`Policy` subclass.
    """
    if not isinstance(setting, str):
        raise ValueError(f"run-config key {POLICY_KEY!r} must be a string; got {setting!r}")
    if canonical_policy(setting) in _BUILT_IN:
        return _BUILT_IN[canonical_policy(setting)]
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
    """Check ``policy-params`` against the constructor of ``setting``'s class; return kwargs.

    The check of :func:`fedcgd_strategy.constructor_params.constructor_arguments`; raises ValueError
    (one line) for a name the constructor does not take, a name that comes from elsewhere (fixed by
    the built-in name, or a :class:`PolicyContext` setting), a value of the wrong type, or a
    required parameter left unset.
    """
    policy_type, fixed = policy_entry(setting)
    refused = {n: f"{n} comes from {source}; set it there" for n, source in CONTEXT_SOURCES.items()}
    for name, value in fixed.items():
        fixes = f"policy {setting!r} fixes {name} = {value!r}"
        refused[name] = f"{fixes}; name another policy to change it"
    return constructor_arguments(
        policy_type, params, table=PARAMS_KEY, owner=f"policy {setting!r}", refused=refused,
        untyped=True,
    )  # fmt: skip


#: Raise a one-line ValueError when ``policy``/``policy-params`` cannot build a policy.
check_policy_params = policy_param_arguments


def resolved_policy_arguments(
    setting: str, context: PolicyContext, params: Mapping[str, object] | None = None
) -> dict[str, dict[str, Any]]:
    """Every keyword argument the policy is built with: its value and where it came from.

    ``from`` is ``the policy name`` (fixed by a built-in name), ``policy-params``, the run-config
    key or data set that :class:`PolicyContext` takes it from, or ``the class default``.
    A parameter with no default and no value is left out (the build would refuse it). Raises
    ValueError (one line) as :func:`policy_param_arguments` does.
    """
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
    setting: str, context: PolicyContext, params: Mapping[str, object] | None = None
) -> Policy:
    """Build the policy the run config names; its ``name`` is ``setting``'s canonical name.

    Its arguments are those of :func:`resolved_policy_arguments` but the class defaults. Raises
    ValueError (one line) for bad parameters or when the constructor raises.
    """
    resolved = resolved_policy_arguments(setting, context, params).items()
    arguments = {k: v["value"] for k, v in resolved if v["from"] != "the class default"}
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
    """Where a run-level setting replaces the policy class's own default, one line each.

    A parameter that :class:`PolicyContext` fills (``pack_rule`` from ``pack-rule``, ...) always
    takes the run's value; when a researcher's class declares another default, the line says so
    (the ServerApp says each once, at the start). A built-in's defaults are none a user wrote: the
    run-level keys are how its parameters are set, so it gets no line.
    """
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
