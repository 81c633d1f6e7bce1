"""From the run config's ``policy`` and ``policy-params`` to a policy object: one registry.

The run-config key ``policy`` holds a built-in name (:data:`POLICY_NAMES`) or a reference to a
researcher's own :class:`~fedcgd_strategy.policies.base.Policy` subclass,
``package.module:ClassName`` or ``/absolute/path/file.py:ClassName``
(:mod:`fedcgd_task.imports`). Built-ins and references are built the same way: a class plus
keyword arguments. A built-in name may fix some arguments (``fedcgd-gs`` is
:class:`~fedcgd_strategy.policies.fedcgd.FedCGDPolicy` with ``method="gs"``). The other
arguments come, by constructor parameter name, from

* the run's :class:`PolicyContext` (the cell's ``num_devices`` and ``num_classes``, and the
  scheduling settings every policy may share: run-config keys ``initial-g``, ``pack-rule``,
  ``poc-candidates``, ``fedcbs-lambda``, ``exact-time-limit-s`` as ``initial_g``,
  ``pack_rule``, ...): a constructor that declares such a parameter receives the run's value;
* the run-config table ``policy-params`` (``policy-params.<name> = value``; kebab-case names
  become snake case): any other parameter of the constructor.

A parameter name the constructor does not declare, a value of another type than the
parameter's default, or a required parameter left unset is refused with one line before the
run starts (:func:`check_policy_params`, :func:`make_policy`). See docs/design.md, "Your own
policy". Pure: no flwr, no torch.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedcgd_strategy.policies.base import Policy
from fedcgd_strategy.policies.baselines import (
    AllFeasiblePolicy,
    BestChannelPolicy,
    BestNormPolicy,
    FedCBSPolicy,
    PowerOfChoicePolicy,
)
from fedcgd_strategy.policies.fedcgd import FedCGDPolicy
from fedcgd_task.imports import REFERENCE_FORMS, import_object, is_reference

#: Run-config key of the policy.
POLICY_KEY = "policy"
#: Run-config table of the policy's own parameters.
PARAMS_KEY = "policy-params"


@dataclass(frozen=True)
class PolicyContext:
    """What a policy constructor may receive by parameter name besides ``policy-params``.

    Attributes
    ----------
    num_devices : int
        V (run-config ``num-devices``).
    num_classes : int
        C (from the data set).
    initial_g : float
        Run-config ``initial-g``: FedCGD's Ĝ before the first upload.
    pack_rule : str
        Run-config ``pack-rule``: best-effort packing, ``"stop"`` or ``"skip"``.
    poc_candidates : int
        Run-config ``poc-candidates``: POC's V' (0 = all available).
    fedcbs_lambda : float
        Run-config ``fedcbs-lambda``: Fed-CBS exploration weight λ.
    exact_time_limit_s : float
        Run-config ``exact-time-limit-s``: cap per MILP of ``fedcgd-exact`` (0 = none).

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


@dataclass(frozen=True)
class PolicyEntry:
    """A built-in policy: its class and the constructor arguments its name fixes."""

    policy_type: type[Policy]
    fixed: Mapping[str, object]


_BUILT_IN: dict[str, PolicyEntry] = {}


def register_policy(name: str, policy_type: type[Policy], **fixed: object) -> None:
    """Register ``policy_type`` (with the constructor arguments ``fixed``) under ``name``.

    Raises
    ------
    ValueError
        When ``name`` is taken or looks like a reference (holds a colon).

    """
    if name in _BUILT_IN or is_reference(name):
        raise ValueError(f"policy name {name!r} is taken or holds a colon")
    _BUILT_IN[name] = PolicyEntry(policy_type, dict(fixed))


register_policy("fedcgd-fscd", FedCGDPolicy, method="fscd", per_class=False)
register_policy("fedcgd-gs", FedCGDPolicy, method="gs", per_class=False)
register_policy("fedcgd-fscd-gc", FedCGDPolicy, method="fscd", per_class=True)
register_policy("fedcgd-exact", FedCGDPolicy, method="exact", per_class=False)
register_policy("fedcgd-cd", FedCGDPolicy, method="cd", per_class=False)
register_policy("bc", BestChannelPolicy)
register_policy("bn2", BestNormPolicy)
register_policy("poc", PowerOfChoicePolicy)
register_policy("fedcbs", FedCBSPolicy)
register_policy("all", AllFeasiblePolicy)

#: The built-in policy names (the run-config key ``policy`` also takes references).
POLICY_NAMES: tuple[str, ...] = tuple(_BUILT_IN)


def policy_entry(setting: str) -> PolicyEntry:
    """The class and fixed arguments that the run-config value ``setting`` of ``policy`` names.

    Raises
    ------
    ValueError
        One line: an unknown name, a reference that cannot be imported, or an object that is
        not a :class:`Policy` subclass.

    """
    if not isinstance(setting, str):
        raise ValueError(f"run-config key {POLICY_KEY!r} must be a string; got {setting!r}")
    if setting in _BUILT_IN:
        return _BUILT_IN[setting]
    if not is_reference(setting):
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}; allowed: {', '.join(POLICY_NAMES)}, "
            f"or your Policy subclass as {REFERENCE_FORMS}"
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
    return PolicyEntry(found, {})


def policy_class(setting: str) -> type[Policy]:
    """The class of the policy ``setting`` names (its class attributes say what it needs)."""
    return policy_entry(setting).policy_type


def _parameters(policy_type: type[Policy]) -> dict[str, inspect.Parameter]:
    """The constructor's keyword-capable parameters, by name."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    signature = inspect.signature(policy_type)
    return {n: p for n, p in signature.parameters.items() if p.kind in kinds}


def _expected_type(policy_type: type[Policy], parameter: inspect.Parameter) -> type | None:
    """bool, int, float or str: the parameter's annotation, else its default's type; or None."""
    try:
        hints = typing.get_type_hints(policy_type.__init__)
    except Exception:  # unresolvable annotations: fall back to the default
        hints = {}
    hinted = hints.get(parameter.name)
    if hinted in (bool, int, float, str):
        return typing.cast(type, hinted)
    default = parameter.default
    if default is inspect.Parameter.empty or default is None:
        return None
    return next((t for t in (bool, int, float, str) if isinstance(default, t)), None)


def _checked_value(
    setting: str, key: str, value: object, wanted: type | None, parameter: inspect.Parameter
) -> object:
    """``value`` checked against ``wanted`` (ints pass as floats; bools never pass as numbers)."""
    if wanted is None:
        return value
    if wanted is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value  # type: ignore[arg-type]
    elif wanted is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, wanted)
    if not ok:
        default = parameter.default
        like = "" if default is inspect.Parameter.empty else f" (like its default {default!r})"
        raise ValueError(
            f"run-config key {PARAMS_KEY}.{key} = {value!r} for policy {setting!r}; allowed: "
            f"a {wanted.__name__}{like}"
        )
    return value


def policy_param_arguments(setting: str, params: Mapping[str, object]) -> dict[str, object]:
    """Check ``policy-params`` against the constructor of ``setting``'s class; return kwargs.

    Parameters
    ----------
    setting : str
        The run-config value of ``policy``.
    params : mapping
        ``policy-params`` (names in kebab or snake case).

    Raises
    ------
    ValueError
        One line per problem: a name the constructor does not take, a name that comes from
        elsewhere (fixed by a built-in name, or a :class:`PolicyContext` setting), a value of
        the wrong type.

    """
    entry = policy_entry(setting)
    parameters = _parameters(entry.policy_type)
    arguments: dict[str, object] = {}
    for key, value in params.items():
        name = key.replace("-", "_")
        if name in entry.fixed:
            raise ValueError(
                f"run-config key {PARAMS_KEY}.{key}: policy {setting!r} fixes {name} = "
                f"{entry.fixed[name]!r}; name another policy to change it"
            )
        if name in CONTEXT_SOURCES:
            raise ValueError(
                f"run-config key {PARAMS_KEY}.{key}: {name} comes from {CONTEXT_SOURCES[name]}; "
                "set it there"
            )
        if name not in parameters:
            free = [n for n in parameters if n not in entry.fixed and n not in CONTEXT_SOURCES]
            allowed = ", ".join(n.replace("_", "-") for n in free) or "none"
            raise ValueError(
                f"run-config key {PARAMS_KEY}.{key}: policy {setting!r} takes no parameter "
                f"{name!r}; allowed: {allowed}"
            )
        wanted = _expected_type(entry.policy_type, parameters[name])
        arguments[name] = _checked_value(setting, key, value, wanted, parameters[name])
    return arguments


def check_policy_params(setting: str, params: Mapping[str, object]) -> None:
    """Raise a one-line ValueError when ``policy``/``policy-params`` cannot build a policy.

    Checks what can be checked without the data set: the policy resolves to a class, every
    parameter is one its constructor takes, with a value of the right type, and every required
    parameter is given.
    """
    entry = policy_entry(setting)
    given = set(policy_param_arguments(setting, params)) | set(entry.fixed) | set(CONTEXT_SOURCES)
    for name, parameter in _parameters(entry.policy_type).items():
        if parameter.default is inspect.Parameter.empty and name not in given:
            raise ValueError(
                f"policy {setting!r} needs a value for {name!r}: set run-config key "
                f"{PARAMS_KEY}.{name.replace('_', '-')}"
            )


def make_policy(
    setting: str, context: PolicyContext, params: Mapping[str, object] | None = None
) -> Policy:
    """Build the policy the run config names.

    Parameters
    ----------
    setting : str
        A built-in name (:data:`POLICY_NAMES`) or a reference to a :class:`Policy` subclass.
    context : PolicyContext
        The cell and the shared scheduling settings (passed to the parameters of the same name).
    params : mapping, optional
        ``policy-params``: the constructor's other arguments.

    Returns
    -------
    Policy
        A fresh policy (it may hold state across rounds) whose ``name`` is ``setting``.

    Raises
    ------
    ValueError
        One line: see :func:`check_policy_params`; or the constructor raised.

    """
    check_policy_params(setting, params or {})
    entry = policy_entry(setting)
    parameters = _parameters(entry.policy_type)
    shared = {name: getattr(context, name) for name in CONTEXT_SOURCES if name in parameters}
    arguments: dict[str, Any] = {
        **shared,
        **entry.fixed,
        **policy_param_arguments(setting, params or {}),
    }
    try:
        policy = entry.policy_type(**arguments)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}: building it with "
            f"{arguments} raised {type(err).__name__}: {err}"
        ) from err
    policy.name = setting
    return policy
