"""RoundInputs, the protocol rule and Decision terms (pure numpy, no Flower)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedcgd_strategy.policies import (
    POLICY_NAMES,
    PolicyContext,
    RoundInputs,
    decision_from_mask,
    make_policy,
    policy_class,
    resolve_protocol,
)


def inputs(**changes: Any) -> RoundInputs:
    fields: dict[str, Any] = {
        "candidate": np.array([True, True, False]),
        "label_dist": np.array([[1.0, 0.0], [0.25, 0.75], [0.0, 0.0]]),
        "num_examples": np.array([10.0, 30.0, 0.0]),
        "sigma_v": np.array([1.0, 3.0, 0.0]),
        "min_bandwidth_hz": np.array([1.0, 2.0, np.inf]),
        "gain_lin": np.array([1e-9, 2e-9, 3e-9]),
        "total_bandwidth_hz": 10.0,
        "batch_size": 4,
        "target_dist": np.array([0.5, 0.5]),
    }
    fields.update(changes)
    return RoundInputs(**fields)


def test_non_candidate_rows_are_not_checked_and_nan_sigma_means_not_computed() -> None:
    ok = inputs(sigma_v=np.array([np.nan, np.nan, -5.0]))
    assert math.isnan(ok.global_sigma())
    # eq. (global_est_sigma) by hand: sqrt(0.25 * 1 + 0.75 * 9) = sqrt(7).
    assert inputs().global_sigma() == pytest.approx(math.sqrt(7.0))


def test_decision_terms_by_hand() -> None:
    decision = decision_from_mask(inputs(), np.array([True, True, False]))
    # p̄ = (0.625, 0.375): |0.125| + |0.125| = 0.25; σ̂ / sqrt(b |S|) = sqrt(7) / sqrt(8).
    assert decision.wemd == pytest.approx(0.25)
    assert decision.sampling_term == pytest.approx(math.sqrt(7.0 / 8.0))
    assert decision.bandwidth_used_hz == 3.0


def test_protocol_rule() -> None:
    def rule(name: str, requested: str = "auto") -> str:
        return resolve_protocol(policy_class(name), requested, name)

    auto = {
        "fedcgd-fscd": "query", "fedcgd-gs": "query", "fedcgd-fscd-gc": "query",
        "fedcgd-exact": "query", "fedcgd-cd": "query", "bc": "channel", "bn2": "train-all",
        "poc": "train-all", "fedcbs": "channel", "all": "channel",
    }  # fmt: skip
    assert {name: rule(name) for name in POLICY_NAMES} == auto
    assert rule("bc", "query") == "query"
    with pytest.raises(ValueError, match="'channel' does not work with policy 'fedcgd-fscd'"):
        rule("fedcgd-fscd", "channel")
    with pytest.raises(ValueError, match="'query' does not work with policy 'poc'"):
        rule("poc", "query")
    with pytest.raises(ValueError, match="'policy' = 'xyz'; allowed: fedcgd-fscd, "):
        rule("xyz")
    with pytest.raises(ValueError, match="protocol: got 'push'"):
        rule("bc", "push")


def test_class_gradient_is_one_array_shape_per_variant() -> None:
    context = PolicyContext(num_devices=3, num_classes=2, initial_g=2.0)
    g, gc = (
        make_policy(name, context).class_gradient for name in ("fedcgd-fscd", "fedcgd-fscd-gc")
    )
    assert g is not None and g.tolist() == [2.0]
    assert gc is not None and gc.tolist() == [2.0, 2.0]
    assert make_policy("bc", context).class_gradient is None


def test_only_the_flower_glue_imports_flwr() -> None:
    import pkgutil

    from subprocesses import assert_import_pulls_neither_flwr_nor_torch

    import fedcgd_strategy

    modules = [
        m.name
        for m in pkgutil.walk_packages(fedcgd_strategy.__path__, "fedcgd_strategy.")
        if not m.name.startswith("fedcgd_strategy.flower")
    ]
    pure = {"policies.registry", "nodes", "problem", "solvers.heuristics", "solvers.exact"}
    assert {f"fedcgd_strategy.{m}" for m in pure} <= set(modules)
    assert len(modules) >= 15
    assert_import_pulls_neither_flwr_nor_torch(*modules)


def test_a_misspelt_policy_name_gets_the_close_names() -> None:
    close = r"'policy' = 'fedcgd-fcsd'; did you mean fedcgd-fscd or fedcgd-cd\? allowed: "
    with pytest.raises(ValueError, match=close):
        policy_class("fedcgd-fcsd")
    label = r"'policy' = 'BC \(best chanel\)'; did you mean BC \(best channel\)\? "
    with pytest.raises(ValueError, match=label):
        policy_class("BC (best chanel)")


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("FedCGD-FSCD", "fedcgd-fscd"), ("BC (best channel)", "bc"), ("bc (BEST CHANNEL)", "bc"),
        ("BC", "bc"), ("Fed-CBS", "fedcbs"), ("FEDCGD-FSCD (Ĝ_C)", "fedcgd-fscd-gc"),
    ],
)  # fmt: skip
def test_a_policy_is_named_by_its_figure_label_and_keeps_its_name(given: str, name: str) -> None:
    policy = make_policy(given, PolicyContext(num_devices=4, num_classes=2))
    assert (type(policy), policy.name) == (policy_class(name), name)
