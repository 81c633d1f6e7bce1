"""Message types, record keys and node_config keys shared by the apps (kebab case, as Flower's)."""

# node_config keys: Flower's simulation sets them; deployments pass
# --node-config "partition-id=<v> num-partitions=<V>" (V must equal num-devices)
NODE_PARTITION_ID = "partition-id"
NODE_NUM_PARTITIONS = "num-partitions"

# message types: discovery (partition id, |D_v|, class counts), then σ̂ and the label histogram
# at the received model; the handler names of @app.query(...)
QUERY_INFO = "query.info"
QUERY_STATS = "query.stats"
QUERY_INFO_ACTION = "info"
QUERY_STATS_ACTION = "stats"

# records of a Message's RecordDict
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"

# ConfigRecord, server -> client: the round, τ, η, b under their run-config keys
# (fedcgd_config.settings.TRAINING_KEYS), and whether to compute σ̂ (absent: True)
SERVER_ROUND = "server-round"
WANT_SIGMA = "want-sigma"

# MetricRecord, client -> server
PARTITION_ID = "partition-id"
NUM_EXAMPLES = "num-examples"  #: |D_v|, the FedAvg weight
LABEL_HIST = "label-hist"  #: per-class counts of the samples used this round
LOCAL_LABEL_HIST = "local-label-hist"  #: per-class counts of the whole local data set
SIGMA = "sigma-hat"  #: σ̂_v >= 0, sent only when asked (WANT_SIGMA)
TRAIN_LOSS = "train-loss"  #: mean training loss of the round's local steps (POC's key)
UPDATE_NORM = "update-norm"  #: ||w_v^{(j+1)} - w^{(j)}|| (BN2's key)
TRAIN_TIME_S = "train-time-s"  #: seconds of local training
