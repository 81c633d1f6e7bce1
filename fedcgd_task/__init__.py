"""The learning task shared by the ServerApp and the ClientApp (Flower's "task" convention).

Data sets, partitions, models, local training, the run-config readers and the record keys;
:mod:`~.keys` and :mod:`~.settings` import neither flwr nor torch.
"""
