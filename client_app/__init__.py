"""FedCGD ClientApp: the Flower handlers (:mod:`client_app.app`) and the devices' σ̂.

:mod:`client_app.device_round` holds what a device computes for a message, one device at a time;
:mod:`client_app.cohort` computes the devices of the in-process engine that received the same
model together. :mod:`client_app.sigma` and :mod:`client_app.per_sample_norms` compute σ̂_v
without flwr; datasets, partitions, models and local SGD, which the server needs too, live in
:mod:`fedcgd_task`.
"""
