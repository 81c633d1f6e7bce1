"""Scheduling policies: :mod:`~.core` (inputs, Policy, Protocol, Decision), :mod:`~.check` (the
decision's check), :mod:`~.registry` (the built-ins: FedCGD, paper Algorithm 3; BC, BN2, POC,
Fed-CBS, all; run-config names and import paths -> policy objects).
"""  # noqa: D205

from fedcgd_strategy.policies.check import PolicyDecisionError as PolicyDecisionError
from fedcgd_strategy.policies.check import policy_call as policy_call
from fedcgd_strategy.policies.check import schedule_checked as schedule_checked
from fedcgd_strategy.policies.core import PROTOCOL_CHOICES as PROTOCOL_CHOICES
from fedcgd_strategy.policies.core import Decision as Decision
from fedcgd_strategy.policies.core import Policy as Policy
from fedcgd_strategy.policies.core import Protocol as Protocol
from fedcgd_strategy.policies.core import RoundInputs as RoundInputs
from fedcgd_strategy.policies.core import UploadedUpdates as UploadedUpdates
from fedcgd_strategy.policies.core import decision_from_mask as decision_from_mask
from fedcgd_strategy.policies.core import resolve_protocol as resolve_protocol
from fedcgd_strategy.policies.core import round_inputs as round_inputs
from fedcgd_strategy.policies.core import with_reported_terms as with_reported_terms
from fedcgd_strategy.policies.registry import POLICY_NAMES as POLICY_NAMES
from fedcgd_strategy.policies.registry import PolicyContext as PolicyContext
from fedcgd_strategy.policies.registry import make_policy as make_policy
from fedcgd_strategy.policies.registry import policy_class as policy_class
