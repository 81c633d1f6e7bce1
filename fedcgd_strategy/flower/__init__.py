"""The Flower glue: messages in and out, nothing else (the only modules that import flwr).

:mod:`~.strategy` runs a scheduled round in Flower's Strategy shape, :mod:`~.replies` validates
device replies and turns them into arrays, :mod:`~.discovery` learns which node serves which
partition. Every rule they apply lives in a pure module of :mod:`fedcgd_strategy`.
"""
