"""The learning task shared by the ServerApp and the ClientApp (Flower's "task" convention).

Data sets (:mod:`fedcgd_task.datasets`), partitions and local data sets
(:mod:`fedcgd_task.partition`), models (:mod:`fedcgd_task.models`), local training and
evaluation (:mod:`fedcgd_task.training`), the run-config readers (:mod:`fedcgd_task.settings`)
and the record keys of the message protocol (:mod:`fedcgd_task.keys`). Nothing here imports
flwr; :mod:`fedcgd_task.keys` and :mod:`fedcgd_task.settings` import neither flwr nor torch, so
the scheduling strategy can share the record keys without torch.
"""
