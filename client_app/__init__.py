"""FedCGD ClientApp: the Flower handlers (:mod:`client_app.app`) and the devices' σ̂.

:mod:`client_app.sigma` and :mod:`client_app.per_sample_norms` compute σ̂_v without flwr;
datasets, partitions, models and local SGD, which the server needs too, live in
:mod:`fedcgd_task`.
"""
