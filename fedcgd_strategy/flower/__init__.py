"""The Flower glue: messages in and out, nothing else (the only modules that import flwr).

:mod:`~.strategy` runs a scheduled round in Flower's Strategy shape, :mod:`~.replies` validates
device replies (every rule on what a device sends) and turns them into arrays, :mod:`~.discovery`
learns which node serves which partition.
"""
