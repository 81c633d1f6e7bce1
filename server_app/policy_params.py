"""The run-config table ``policy-params``: a policy's own parameters, through Flower and back.

Flower's run config holds scalars under the keys that pyproject.toml declares, and refuses any
other key, so a table whose keys only the researcher's policy knows cannot travel as
``policy-params.<name>`` keys. It travels as one declared string key, ``policy-params``,
holding a TOML inline table (``policy-params = "{window = 20, beta = 0.5}"``). Wherever this
project reads a run config itself (the launcher's and the in-process engine's ``--run-config``,
``compare_policies``, the Hydra presets), ``policy-params.<name> = value`` keys are accepted
too and folded into that string (:func:`fold_policy_params`); :func:`read_policy_params` reads
either form.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from typing import Any

#: The declared run-config key (a TOML inline table as a string).
PARAMS_KEY = "policy-params"
#: Prefix of the flat form ``policy-params.<name>``.
PARAMS_PREFIX = PARAMS_KEY + "."
#: A TOML bare key.
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_toml_value(value: object) -> str:
    """``value`` as a TOML value (bool, int, float, str, or a list of those).

    Raises
    ------
    ValueError
        For any other type (a run config holds nothing else).

    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list | tuple):
        return "[" + ",".join(format_toml_value(v) for v in value) + "]"
    raise ValueError(f"run-config key {PARAMS_KEY!r}: cannot write {value!r} as a TOML value")


def format_policy_params(params: Mapping[str, object]) -> str:
    """``params`` as the string value of ``policy-params``: a TOML inline table, no spaces.

    The names are parameter names (TOML bare keys) and no space stands outside string values,
    so that the text survives being one word of a ``--run-config`` line.
    """
    bad = [k for k in params if not BARE_KEY.fullmatch(k)]
    if bad:
        raise ValueError(
            f"run-config key {PARAMS_KEY}.{bad[0]}: allowed: a parameter name (letters, digits, "
            "'_' and '-')"
        )
    return "{" + ",".join(f"{k}={format_toml_value(v)}" for k, v in params.items()) + "}"


#: Longest ``policy-params`` text (characters): room for a list of a few thousand numbers.
MAX_PARAMS_CHARS = 65536


def _shown(text: str) -> str:
    """``text`` as repr, cut to 80 characters for a one-line message."""
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _parse_table(text: object) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError(
            f"run-config key {PARAMS_KEY!r} = {text!r}; allowed: a TOML inline table as a "
            "string, e.g. '{window = 20}'"
        )
    if len(text) > MAX_PARAMS_CHARS:
        raise ValueError(
            f"run-config key {PARAMS_KEY!r} = {_shown(text)} holds {len(text)} characters; "
            f"allowed: at most {MAX_PARAMS_CHARS}"
        )
    try:
        table = tomllib.loads(f"table = {text.strip() or '{}'}")["table"]
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ValueError(
            f"run-config key {PARAMS_KEY!r} = {_shown(text)} is not a TOML inline table "
            f"({reason}); allowed: e.g. '{{window = 20, beta = 0.5}}'"
        ) from err
    if not isinstance(table, dict):
        raise ValueError(
            f"run-config key {PARAMS_KEY!r} = {text!r}; allowed: a TOML inline table such as "
            "'{window = 20}'"
        )
    return table


def read_policy_params(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The policy's parameters from ``policy-params`` (string) and ``policy-params.<name>`` keys.

    Raises
    ------
    ValueError
        One line: the string is not a TOML inline table, or a name is given in both forms.

    """
    params = _parse_table(run_config.get(PARAMS_KEY, "{}"))
    for key, value in run_config.items():
        if not key.startswith(PARAMS_PREFIX):
            continue
        name = key.removeprefix(PARAMS_PREFIX)
        if name in params:
            raise ValueError(
                f"run-config key {key!r} is also set in {PARAMS_KEY!r} = "
                f"{run_config.get(PARAMS_KEY)!r}; give it once"
            )
        params[name] = value
    return params


def fold_policy_params(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with every ``policy-params.<name>`` key folded into ``policy-params``.

    What Flower accepts: only declared keys. Without flat keys the mapping is returned as is.
    """
    if not any(key.startswith(PARAMS_PREFIX) for key in run_config):
        return dict(run_config)
    params = read_policy_params(run_config)
    out = {k: v for k, v in run_config.items() if not k.startswith(PARAMS_PREFIX)}
    out[PARAMS_KEY] = format_policy_params(params)
    return out
