"""The learning task shared by the ServerApp and the ClientApp (Flower's "task" convention):
data sets, partitions, models and local training."""  # noqa: D205, D209
