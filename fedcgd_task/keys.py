"""Message types, record keys and node_config keys shared by the apps and the launchers.

Every key is kebab-case, as in Flower's own strategies. The client replies with a
``MetricRecord`` under :data:`METRICS` (and, for training, an ``ArrayRecord`` under
:data:`ARRAYS`); the server reads them with validating helpers that name the missing key.
This module is pure Python: it imports neither flwr nor torch.
"""

# --- node_config keys (a node's Context) -----------------------------------------------------
#: The node's partition id: Flower's simulation sets it, deployments pass it with
#: ``--node-config "partition-id=<v> num-partitions=<V>"``.
NODE_PARTITION_ID = "partition-id"
#: The number of partitions, which must equal the run config's ``num-devices``.
NODE_NUM_PARTITIONS = "num-partitions"

# --- message types -------------------------------------------------------------------------
#: Discovery: the node answers with its partition id, local dataset size and class counts.
QUERY_INFO = "query.info"
#: Pre-training statistics at the received model: sigma-hat and label histogram.
QUERY_STATS = "query.stats"
#: The handler names used in ``@app.query(...)`` for the two query types above.
QUERY_INFO_ACTION = "info"
QUERY_STATS_ACTION = "stats"

# --- record names inside a Message's RecordDict ---------------------------------------------
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"

# --- ConfigRecord keys, server -> client -----------------------------------------------------
SERVER_ROUND = "server-round"
#: τ, η and b travel under their run-config keys (:data:`fedcgd_task.settings.TRAINING_KEYS`).
#: Whether the device must compute sigma-hat (bool; only FedCGD's rule uses it). Absent = True.
WANT_SIGMA = "want-sigma"

# --- MetricRecord keys, client -> server -----------------------------------------------------
PARTITION_ID = "partition-id"
#: Local dataset size |D_v| (FedAvg weight), an int.
NUM_EXAMPLES = "num-examples"
#: Per-class counts (list[int], length C) of the samples the device uses this round.
LABEL_HIST = "label-hist"
#: Per-class counts (list[int], length C) of the device's whole local dataset (query.info).
LOCAL_LABEL_HIST = "local-label-hist"
#: sigma-hat_v, paper eq. (local_est_sigma), a float >= 0 (sent only when asked, see WANT_SIGMA).
SIGMA = "sigma-hat"
#: Mean training loss accumulated over this round's local steps (POC's ranking key).
TRAIN_LOSS = "train-loss"
#: L2 norm of the local update w_v^{(j+1)} - w^{(j)} (BN2's ranking key).
UPDATE_NORM = "update-norm"
#: Seconds the device spent in local training (for the time-split report).
TRAIN_TIME_S = "train-time-s"
