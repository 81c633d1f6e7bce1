"""Scheduling policies: the core types and checks, FedCGD, the baselines and the registry.

:mod:`~.core` (inputs, Policy, Protocol, Decision and its check), :mod:`~.fedcgd` (paper
Algorithm 3), :mod:`~.baselines` (BC, BN2, POC, Fed-CBS, all), :mod:`~.registry` (run-config
names and import paths -> policy objects).
"""

from fedcgd_strategy.policies.baselines import (
    AllFeasiblePolicy,
    BestChannelPolicy,
    BestNormPolicy,
    FedCBSPolicy,
    PowerOfChoicePolicy,
)
from fedcgd_strategy.policies.core import (
    BUDGET_REL_TOL,
    PROTOCOL_CHOICES,
    Decision,
    Policy,
    PolicyDecisionError,
    Protocol,
    ReportedStats,
    RoundInputs,
    UploadedUpdates,
    check_decision,
    decision_from_mask,
    resolve_protocol,
    round_inputs,
    schedule_checked,
    synthetic_round,
    with_reported_terms,
)
from fedcgd_strategy.policies.fedcgd import FedCGDPolicy
from fedcgd_strategy.policies.registry import POLICY_NAMES, PolicyContext, make_policy, policy_class

__all__ = [
    "BUDGET_REL_TOL",
    "POLICY_NAMES",
    "PROTOCOL_CHOICES",
    "AllFeasiblePolicy",
    "BestChannelPolicy",
    "BestNormPolicy",
    "Decision",
    "FedCBSPolicy",
    "FedCGDPolicy",
    "Policy",
    "PolicyContext",
    "PolicyDecisionError",
    "PowerOfChoicePolicy",
    "Protocol",
    "ReportedStats",
    "RoundInputs",
    "UploadedUpdates",
    "check_decision",
    "decision_from_mask",
    "make_policy",
    "policy_class",
    "resolve_protocol",
    "round_inputs",
    "schedule_checked",
    "synthetic_round",
    "with_reported_terms",
]
