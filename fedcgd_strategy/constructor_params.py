"""A class's constructor arguments from a run-config table, checked against its signature.

:func:`constructor_arguments` is the one check ``policy-params`` and ``aggregator-params`` go
through before the start (kebab-case names become snake case); each refusal is one line naming
``<table>.<name>``, the value and what is allowed. No flwr, no torch.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Collection, Mapping

#: The types a run config holds (TOML scalars).
SCALAR_TYPES: tuple[type, ...] = (bool, int, float, str)


def keyword_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor's parameters that can be passed by keyword, by name."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n: p for n, p in inspect.signature(cls).parameters.items() if p.kind in kinds}


def _scalar(hint: object) -> type | None:
    """``hint`` if it is a scalar type; ``X`` for ``X | None``; else None."""
    if hint in SCALAR_TYPES:
        return typing.cast(type, hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) == 1 and members[0] in SCALAR_TYPES:
            return typing.cast(type, members[0])
    return None


def scalar_type(cls: type, parameter: inspect.Parameter) -> type | None:
    """bool, int, float or str: the annotation, else the default's type; None if neither says."""
    try:
        hints = typing.get_type_hints(getattr(cls, "__init__"))  # noqa: B009
    except Exception:  # unresolvable annotations: fall back to the default
        hints = {}
    hinted = _scalar(hints.get(parameter.name))
    if hinted is not None:
        return hinted
    default = parameter.default
    if default is inspect.Parameter.empty or default is None:
        return None
    return next((t for t in SCALAR_TYPES if isinstance(default, t)), None)


def _checked(value: object, wanted: type) -> tuple[bool, object]:
    """(ok, value) for a value meant as ``wanted`` (an int becomes a float where one is wanted)."""
    if wanted is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value  # type: ignore[arg-type]
    if wanted is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    return isinstance(value, wanted), value


def kebab(name: str) -> str:
    """A parameter name as a run-config name: ``num_malicious_nodes`` -> ``num-malicious-nodes``."""
    return name.replace("_", "-")


def constructor_arguments(
    cls: type,
    params: Mapping[str, object],
    *,
    table: str,
    owner: str,
    refused: Mapping[str, str] | None = None,
    untyped: bool = False,
    also_allowed: Collection[str] = (),
) -> dict[str, object]:
    """Check ``params`` (a run-config table) against ``cls``'s constructor; return its kwargs.

    Every name must be a keyword parameter the table may set, every value of the parameter's type
    (:func:`scalar_type`; ``X | None`` as ``X``; an int passes as a float, a bool never as a
    number), one spelling per name, every required parameter given.

    Parameters
    ----------
    cls : type
        The class the table's owner builds.
    params : mapping
        The table (names in kebab or snake case).
    table : str
        The table's run-config key, e.g. ``"policy-params"`` (named in every message).
    owner : str
        What takes the parameters, e.g. ``"policy 'bc'"``.
    refused : mapping of str to str, optional
        Parameter name -> why the table may not set it (the caller supplies it).
    untyped : bool
        Whether a parameter of no scalar type takes any value (policies) or none (aggregators).
    also_allowed : collection of str
        Names the caller reads from the table itself.

    Returns
    -------
    dict
        Snake-case name -> value (ints given for floats converted).
    """
    refused = refused or {}
    parameters = keyword_parameters(cls)
    types_ = {n: scalar_type(cls, p) for n, p in parameters.items()}
    settable = [n for n in parameters if n not in refused and (untyped or types_[n] is not None)]
    allowed = ", ".join([*also_allowed, *map(kebab, settable)]) or "none"
    arguments: dict[str, object] = {}
    spelled: dict[str, str] = {}  # parameter name -> the key that gave it
    for key, value in params.items():
        name = key.replace("-", "_")
        if name in spelled:
            raise ValueError(
                f"run-config key {table}.{key} names the same parameter {name!r} as "
                f"{table}.{spelled[name]}; give it once"
            )
        spelled[name] = key
        if name in refused:
            raise ValueError(f"run-config key {table}.{key}: {refused[name]}; allowed: {allowed}")
        if name not in parameters:
            raise ValueError(
                f"run-config key {table}.{key}: {owner} takes no parameter {name!r}; "
                f"allowed: {allowed}"
            )
        wanted = types_[name]
        if wanted is None:
            if not untyped:
                raise ValueError(
                    f"run-config key {table}.{key}: {owner} cannot take a value for {name!r} "
                    f"from a run config; allowed: {allowed}"
                )
            arguments[name] = value
            continue
        ok, value = _checked(value, wanted)
        if not ok:
            default = parameters[name].default
            like = "" if default is inspect.Parameter.empty else f" (like its default {default!r})"
            article = "an" if wanted is int else "a"
            raise ValueError(
                f"run-config key {table}.{key} = {value!r} for {owner}; allowed: "
                f"{article} {wanted.__name__}{like}"
            )
        arguments[name] = value
    for name, parameter in parameters.items():
        if parameter.default is not inspect.Parameter.empty or name in arguments:
            continue
        if name in refused:
            continue
        how = (
            f"set run-config key {table}.{kebab(name)}"
            if name in settable
            else "it is not a value a run config can hold, so this class cannot be named here"
        )
        raise ValueError(f"{owner} needs a value for {name!r}: {how}")
    return arguments


def with_defaults(
    cls: type, arguments: Mapping[str, object], refused: Collection[str] = ()
) -> dict[str, object]:
    """``arguments`` completed by the constructor's defaults, in its order (what is built)."""
    out: dict[str, object] = {}
    for name, parameter in keyword_parameters(cls).items():
        if name in arguments:
            out[name] = arguments[name]
        elif (
            name not in refused
            and parameter.default is not inspect.Parameter.empty
            and scalar_type(cls, parameter) is not None
        ):
            out[name] = parameter.default
    return out
