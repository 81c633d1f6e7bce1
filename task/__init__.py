"""The learning task shared by the ServerApp and the ClientApp (Flower's ``task`` convention).

Data sets (:mod:`task.datasets`), partitions (:mod:`task.partition`, :mod:`task.local_data`),
models (:mod:`task.models`), local training and evaluation (:mod:`task.training`), the
run-config readers (:mod:`task.settings`) and the record keys of the message protocol
(:mod:`task.keys`). Nothing here imports flwr; :mod:`task.keys` and :mod:`task.settings` import
neither flwr nor torch, so the scheduling strategy can share the record keys without torch.
"""
