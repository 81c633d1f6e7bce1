"""ServerApp of the FedCGD Flower app: run config, strategy set-up, central evaluation, results."""
