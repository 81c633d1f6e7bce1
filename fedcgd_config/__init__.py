"""The run config: each setting's definition (:mod:`.schema`), its checks (:mod:`.setting`),
the frozen views both apps read (:mod:`.settings`), the message keys (:mod:`.keys`) and the
``module:Name`` references a setting can hold (:mod:`.imports`). No flwr, no torch."""  # noqa: D205, D209
