"""Scheduling policies: the base types, FedCGD, the baselines, the protocol rule, the registry.

=====================  ==========================================================================
module                 holds
=====================  ==========================================================================
:mod:`~.inputs`        :class:`RoundInputs` (what a policy sees) and :func:`round_inputs`, the one
                       place it is assembled
:mod:`~.decision`      :class:`Decision` and :func:`decision_from_mask`
:mod:`~.decision_check` :func:`check_decision`: every decision against the round's physics
                       (candidates, deadline, budget), and the pre-start probe of a policy
:mod:`~.base`          :class:`Policy` (subclass it for your own rule) and :class:`UploadedUpdates`
:mod:`~.protocol`      :class:`Protocol` and :func:`resolve_protocol` (from the policy's class)
:mod:`~.fedcgd`        FedCGD (paper Algorithm 3)
:mod:`~.baselines`     BC, BN2, POC, Fed-CBS, all
:mod:`~.registry`      built-in names and references -> policy objects (:func:`make_policy`)
=====================  ==========================================================================
"""

from fedcgd_strategy.policies.base import Policy as Policy
from fedcgd_strategy.policies.base import UploadedUpdates as UploadedUpdates
from fedcgd_strategy.policies.baselines import AllFeasiblePolicy as AllFeasiblePolicy
from fedcgd_strategy.policies.baselines import BestChannelPolicy as BestChannelPolicy
from fedcgd_strategy.policies.baselines import BestNormPolicy as BestNormPolicy
from fedcgd_strategy.policies.baselines import FedCBSPolicy as FedCBSPolicy
from fedcgd_strategy.policies.baselines import PowerOfChoicePolicy as PowerOfChoicePolicy
from fedcgd_strategy.policies.decision import Decision as Decision
from fedcgd_strategy.policies.decision import decision_from_mask as decision_from_mask
from fedcgd_strategy.policies.decision import with_reported_terms as with_reported_terms
from fedcgd_strategy.policies.decision_check import BUDGET_REL_TOL as BUDGET_REL_TOL
from fedcgd_strategy.policies.decision_check import PolicyDecisionError as PolicyDecisionError
from fedcgd_strategy.policies.decision_check import check_decision as check_decision
from fedcgd_strategy.policies.fedcgd import FedCGDPolicy as FedCGDPolicy
from fedcgd_strategy.policies.inputs import ReportedStats as ReportedStats
from fedcgd_strategy.policies.inputs import RoundInputs as RoundInputs
from fedcgd_strategy.policies.inputs import round_inputs as round_inputs
from fedcgd_strategy.policies.protocol import PROTOCOL_CHOICES as PROTOCOL_CHOICES
from fedcgd_strategy.policies.protocol import Protocol as Protocol
from fedcgd_strategy.policies.protocol import resolve_protocol as resolve_protocol
from fedcgd_strategy.policies.registry import POLICY_NAMES as POLICY_NAMES
from fedcgd_strategy.policies.registry import PolicyContext as PolicyContext
from fedcgd_strategy.policies.registry import make_policy as make_policy
from fedcgd_strategy.policies.registry import policy_class as policy_class
