"""FedCGD scheduling: the math and the policies (pure numpy), and the Flower glue (``flower/``).

Write your own policy by subclassing :class:`Policy`: implement ``schedule(inputs, rng)``
returning :func:`decision_from_mask` of a boolean mask over the devices, and name the class in
the run config (``policy = "package.module:ClassName"``); see docs/bring-your-own.md, "Write
your own policy".
"""

from fedcgd_strategy.policies import Decision as Decision
from fedcgd_strategy.policies import Policy as Policy
from fedcgd_strategy.policies import Protocol as Protocol
from fedcgd_strategy.policies import RoundInputs as RoundInputs
from fedcgd_strategy.policies import UploadedUpdates as UploadedUpdates
from fedcgd_strategy.policies import decision_from_mask as decision_from_mask
from fedcgd_strategy.problem import SchedulingProblem as SchedulingProblem
from fedcgd_strategy.selectors import best_effort_pack as best_effort_pack
from fedcgd_strategy.solvers import METHODS as METHODS
from fedcgd_strategy.solvers import ScheduleResult as ScheduleResult
from fedcgd_strategy.solvers import solve as solve
