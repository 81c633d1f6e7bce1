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
run starts (:func:`check_policy_params`, :func:`make_policy`), by the check that
``aggregator-params`` go through too (:mod:`fedcgd_task.constructor_params`). See
docs/design.md, "Your own policy". Pure: no flwr, no torch.
"""

from __future__ import annotations

import dataclasses
import inspect
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
from fedcgd_task.constructor_params import constructor_arguments, keyword_parameters
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


def _refused(setting: str, entry: PolicyEntry) -> dict[str, str]:
    """Constructor parameters ``policy-params`` may not set, and why (they come from elsewhere)."""
    refused = {n: f"{n} comes from {source}; set it there" for n, source in CONTEXT_SOURCES.items()}
    for name, value in entry.fixed.items():
        refused[name] = (
            f"policy {setting!r} fixes {name} = {value!r}; name another policy to change it"
        )
    return refused


def policy_param_arguments(setting: str, params: Mapping[str, object]) -> dict[str, object]:
    """Check ``policy-params`` against the constructor of ``setting``'s class; return kwargs.

    The check is :func:`fedcgd_task.constructor_params.constructor_arguments` (the one
    ``aggregator-params`` go through too); a parameter whose type neither its annotation nor
    its default says takes any value.

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
        the wrong type, a required parameter left unset.

    """
    entry = policy_entry(setting)
    return constructor_arguments(
        entry.policy_type,
        params,
        table=PARAMS_KEY,
        owner=f"policy {setting!r}",
        refused=_refused(setting, entry),
        untyped=True,
    )


def check_policy_params(setting: str, params: Mapping[str, object]) -> None:
    """Raise a one-line ValueError when ``policy``/``policy-params`` cannot build a policy.

    Checks what can be checked without the data set: the policy resolves to a class, every
    parameter is one its constructor takes, with a value of the right type, and every required
    parameter is given.
    """
    policy_param_arguments(setting, params)


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
    parameters = keyword_parameters(entry.policy_type)
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
