"""A run's folder and its files: locks, atomic writes, status, metrics, summary and config.

One writer per folder (``folder_lock``), atomic writes deferred past a stop (``atomic_files``),
bounded JSON reading (``json_files``), ``status.json`` (``run_status``), ``metrics.jsonl``,
``summary.json`` and ``config.json`` (``results``). Used by the ServerApp (server_app/) that
writes a run and by the commands (experiments/) that start, watch, resume, compare and plot
runs. Pure Python: imports neither flwr nor torch.
"""
