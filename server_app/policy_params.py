"""The run-config tables ``policy-params`` and ``aggregator-params``: TOML inline tables as strings.

Flower's run config holds declared scalar keys only, so each table travels as one string key;
the project's own commands also accept ``<table>.<name>`` keys and fold them into it
(docs/bring-your-own.md).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

import tomli_w

from fedcgd_task.settings import set_once

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
    if isinstance(value, Mapping):
        return format_policy_params(value, key)
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


def format_policy_params(params: Mapping[str, object], key: str = PARAMS_KEY) -> str:
    """``params`` as the string value of ``key``: a one-line TOML inline table."""
    bad = [k for k in params if not isinstance(k, str) or not BARE_KEY.fullmatch(k)]
    if bad:
        raise ValueError(
            f"run-config key {key}.{bad[0]}: allowed: a parameter name (letters, digits, "
            "'_' and '-')"
        )
    items = ", ".join(f"{k} = {format_toml_value(v, f'{key}.{k}')}" for k, v in params.items())
    return "{" + items + "}"


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


def read_params(run_config: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The table ``key`` from its string value and its ``<key>.<name>`` keys.

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
        *tables, name = flat.removeprefix(prefix).split(".")
        table = params
        for part in tables:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ValueError(
                    f"run-config key {flat!r}: {prefix}{part} is set to a value, not a table; "
                    "give it once"
                )
        clash = f"is also set in {key!r} = {run_config.get(key)!r}"
        set_once(table, name, value, key=flat, clash=clash)
    return params


def read_policy_params(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The policy's parameters (:func:`read_params` of ``policy-params``)."""
    return read_params(run_config, PARAMS_KEY)


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
        out[key] = format_policy_params(params, key)
    return out
