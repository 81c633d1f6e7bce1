"""FedCGD ClientApp: Flower handlers, one device at a time or as cohorts, and σ̂."""
