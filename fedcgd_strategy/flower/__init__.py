"""The Flower glue: messages in and out (the strategy, reply screening, node discovery,
aggregators, simulation waiting), nothing else; the only modules that import flwr."""  # noqa: D205, D209
