"""The run config of one run, as the commands take it: parsed, checked, rendered for ``flwr run``.

``--run-config`` text (``key=value`` pairs, TOML values) becomes a flat dict
(:func:`parse_run_config_text`); :func:`validated_run_config` applies it to the defaults and
checks every key and value before anything starts; :func:`format_run_config` renders a dict
back as ``flwr run --run-config`` text; :func:`with_resolved_data_dir` pins the data folder.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from collections.abc import Mapping
from typing import Any

from fedcgd_task.settings import default_run_config, flatten, resolve_data_dir, set_once


def format_run_config(values: Mapping[str, Any]) -> str:
    """Render a dict as ``flwr run --run-config`` text (strings quoted, TOML style).

    ``policy-params.<name>`` keys are folded into the declared ``policy-params`` string first
    (Flower refuses keys that pyproject.toml does not declare).
    """
    from server_app.policy_params import fold_policy_params

    parts = []
    for key, value in fold_policy_params(values).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = json.dumps(value)
        else:
            text = repr(value)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def with_resolved_data_dir(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with ``data-dir`` made absolute, relative to this process ("" = ./data).

    The ServerApp and ClientApps run in unrelated working directories, so the data folder is
    pinned here, where the command was started (:func:`fedcgd_task.settings.resolve_data_dir`).
    """
    data_dir = resolve_data_dir(str(run_config.get("data-dir", "")))
    return {**run_config, "data-dir": str(data_dir)}


def parse_run_config_text(text: str) -> dict[str, Any]:
    """Parse ``--run-config`` text (``key=value`` pairs, TOML values) into a flat dict.

    Dotted keys (``channel.deadline-s=2.0``) stay dotted, as in ``flwr run --run-config``.
    """
    values: dict[str, Any] = {}
    try:
        items = shlex.split(text, posix=False)
    except ValueError as err:  # an unclosed quote
        raise ValueError(f"--run-config cannot be split into key=value items ({err})") from err
    for item in items:
        try:
            pairs = flatten(tomllib.loads(item))
        except (tomllib.TOMLDecodeError, RecursionError) as err:
            shown = item if len(item) <= 80 else item[:77] + "..."
            raise ValueError(
                f"--run-config item {shown!r} is not key=value with a TOML value "
                "(quote strings: policy='bc')"
            ) from err
        for key, value in pairs.items():
            clash = f"is given twice ({values.get(key)!r} and {value!r})"
            set_once(values, key, value, key=key, clash=clash)
    return values


def validated_run_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults with ``overrides`` applied, every key and value checked before any start.

    ``policy-params.<name>`` keys are folded into the declared ``policy-params`` string
    (:func:`server_app.policy_params.fold_policy_params`).

    Raises
    ------
    ValueError
        One line naming the key, the bad value and what is allowed (an unknown key lists the
        allowed keys).
    """
    from server_app.config import parse_run_config
    from server_app.policy_params import fold_policy_params

    defaults = default_run_config()
    overrides = fold_policy_params(overrides)  # Flower accepts declared keys only
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown run-config key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(defaults))}"
        )
    merged = {**defaults, **overrides}
    parse_run_config(merged)
    return merged
