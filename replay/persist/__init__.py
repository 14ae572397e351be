"""A table's contents on disk and in motion: checkpoint files, item sets, re-sharding.

* ``npyio``: raw ``.npy`` files with sizes and CRC-32s, and :class:`CheckpointError`.
* ``checkpoint``: dump and load of one table (no pickle).
* ``items``: :class:`ItemSet`, every stored item of a table with its priority and pass
state, taken out of a table and put into another.
* ``reshard``: items dealt over another number of shards, exactly once each (pure).
* ``elastic``: the client's side of re-sharding: loading a checkpoint into another number of
shards, moving a removed shard's items into the others.
"""
