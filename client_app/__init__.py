"""FedCGD ClientApp: data partitions, models, local SGD, sigma-hat and the Flower handlers.

The library modules (:mod:`client_app.settings`, :mod:`client_app.partition`,
:mod:`client_app.datasets`, :mod:`client_app.models`, :mod:`client_app.training`,
:mod:`client_app.sigma`, :mod:`client_app.local_data`) do not import flwr; only
:mod:`client_app.app` does.
"""
