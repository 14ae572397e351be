"""How items are drawn: the samplers, their trees, and a sample's path across the shards.

* ``samplers``: uniform, prioritized (sum and min trees) and FIFO (on-policy passes).
* ``sumtree``: the sum/min tree of priority masses (pure).
* ``sharding``: how one sample is split across shards and the replies merged (pure).
* ``fetch``: the client's concurrent fetch of a sample's parts and its prefetch queue.
* ``prefetch``: batches requested ahead, and when they are stale.
* ``priorities``: priority updates held, routed to their shards, flushed.
* ``streams``: named random streams, so a deterministic run draws the same items.
"""
