"""The experience wire contract, spoken by the driver's gRPC server and every replay shard.

Modules:
    * ``experience.proto`` (and its generated modules): ``relayrl.v1.Experience``.
    * ``reader``: the zero-copy ``InsertRequest`` reader, its work bounded by limits.
    * ``batches``: the run's transition spec and every batch's checks (spec, fields that carry
      meaning, writer ids); ``sequences``: a recurrent run's sequence items on the wire
      (their spec, checks and new-step frame count); ``codecs``: arrays and weights to and from
      named tensors.
    * ``service``: what both servers answer alike (handlers, admission, refusal statuses,
      receipts); ``auth``: scoped credentials and the caller's identity; ``leases``: writer
      ids scoped to their caller (one dedup state per writer on the driver's path and the
      shards'), ``seq`` windows, rate limits, fair shares per credential; ``transport``: TLS, server
      limits, keepalive, capped and watched Insert streams; ``planes``: threads and limits of
      their own for the operator, health checks and experience, receive deadlines.
    * ``heap``: freed megabyte buffers kept for reuse.
"""
