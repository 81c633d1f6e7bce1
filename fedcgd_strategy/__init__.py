"""FedCGD scheduling: the math and the policies (pure numpy), and the Flower glue (``flower/``).

Write your own policy by subclassing :class:`Policy`: implement ``schedule(inputs, rng)``
returning :func:`decision_from_mask` of a boolean mask over the devices, and name the class in
the run config (``policy = "package.module:ClassName"``); see docs/bring-your-own.md, "Write
your own policy".
"""

from fedcgd_strategy.estimators import device_gradient_estimates as device_gradient_estimates
from fedcgd_strategy.estimators import estimate_class_gradient as estimate_class_gradient
from fedcgd_strategy.estimators import estimate_global_sigma as estimate_global_sigma
from fedcgd_strategy.estimators import estimate_per_class_gradient as estimate_per_class_gradient
from fedcgd_strategy.policies import Decision as Decision
from fedcgd_strategy.policies import Policy as Policy
from fedcgd_strategy.policies import Protocol as Protocol
from fedcgd_strategy.policies import RoundInputs as RoundInputs
from fedcgd_strategy.policies import UploadedUpdates as UploadedUpdates
from fedcgd_strategy.policies import decision_from_mask as decision_from_mask
from fedcgd_strategy.problem import SchedulingProblem as SchedulingProblem
from fedcgd_strategy.selectors import FedCBSState as FedCBSState
from fedcgd_strategy.selectors import best_effort_pack as best_effort_pack
from fedcgd_strategy.selectors import best_score_first as best_score_first
from fedcgd_strategy.selectors import fedcbs_select as fedcbs_select
from fedcgd_strategy.selectors import power_of_choice as power_of_choice
from fedcgd_strategy.selectors import qcid as qcid
from fedcgd_strategy.solvers import METHODS as METHODS
from fedcgd_strategy.solvers import ScheduleResult as ScheduleResult
from fedcgd_strategy.solvers import solve as solve
