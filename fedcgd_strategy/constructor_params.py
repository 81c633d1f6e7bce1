"""A class's constructor arguments from a run-config table (``policy-params``,
``aggregator-params``), checked against its signature in one line per refusal."""  # noqa: D205, D209

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Collection, Mapping

SCALAR_TYPES: tuple[type, ...] = (bool, int, float, str)


def keyword_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor's parameters that can be passed by keyword, by name."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n: p for n, p in inspect.signature(cls).parameters.items() if p.kind in kinds}


def scalar_type(cls: type, parameter: inspect.Parameter) -> type | None:
    """bool, int, float or str: the annotation (``X | None`` as ``X``), else the default's type."""
    try:
        hint = typing.get_type_hints(getattr(cls, "__init__")).get(parameter.name)  # noqa: B009
    except Exception:  # unresolvable annotations: fall back to the default
        hint = None
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = members[0] if len(members) == 1 else None
    if hint in SCALAR_TYPES:
        return typing.cast(type, hint)
    return next((t for t in SCALAR_TYPES if isinstance(parameter.default, t)), None)


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
    """``params`` (kebab-case) as ``cls``'s keyword arguments of their :func:`scalar_type`.

    ``table``: the run-config key; ``owner``: what takes them (``"policy 'bc'"``); ``refused``:
    parameter -> why the table may not set it; ``untyped``: whether a parameter of no scalar type
    takes any value (policies) or none (aggregators); ``also_allowed``: names the caller reads.
    """
    refused = refused or {}
    parameters = keyword_parameters(cls)
    types_ = {n: scalar_type(cls, p) for n, p in parameters.items()}
    settable = [n for n in parameters if n not in refused and (untyped or types_[n] is not None)]
    allowed = ", ".join([*also_allowed, *map(kebab, settable)]) or "none"
    arguments: dict[str, object] = {}
    for key, value in params.items():
        name = key.replace("-", "_")
        where = f"run-config key {table}.{key}"
        if name in refused:
            raise ValueError(f"{where}: {refused[name]}; allowed: {allowed}")
        if name in parameters and key != kebab(name):
            raise ValueError(f"{where}: written {kebab(name)} (kebab case); allowed: {allowed}")
        if name in parameters and name not in settable:
            raise ValueError(
                f"{where}: {owner} cannot take a value for {name!r} from a run config; "
                f"allowed: {allowed}"
            )
        if name not in settable:
            raise ValueError(f"{where}: {owner} takes no parameter {name!r}; allowed: {allowed}")
        wanted = types_[name]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if wanted is float and number:
            value = float(value)  # type: ignore[arg-type]
        elif wanted is not None and (type(value) is not wanted):
            default = parameters[name].default
            like = "" if default is inspect.Parameter.empty else f" (like its default {default!r})"
            article = "an" if wanted is int else "a"
            raise ValueError(
                f"{where} = {value!r} for {owner}; allowed: {article} {wanted.__name__}{like}"
            )
        arguments[name] = value
    for name, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty and name not in (*arguments, *refused):
            how = (
                f"set run-config key {table}.{kebab(name)}"
                if name in settable
                else "it is not a value a run config can hold, so this class cannot be named here"
            )
            raise ValueError(f"{owner} needs a value for {name!r}: {how}")
    return arguments
