"""The sharded replay service.

Layout:
    * ``storage``: :class:`CircularStorage`, a preallocated TensorDict ring buffer whose schema
      (keys, shapes, dtypes) is fixed by the first write; mismatching writes are refused whole.
    * ``samplers``: index samplers (uniform with replacement).
    * ``table``: :class:`ReplayTable`, the pure core of a shard: storage + sampler + write dedup
      by ``(writer_id, seq)`` + counters.
    * ``shard``: the ``ReplayShard`` Ray actor, named ``<run>.replay-<i>`` in namespace ``relayrl``.
    * ``client``: :class:`ReplayClient`, which routes writes by writer and samples across shards
      in proportion to their sizes, fetching from all shards concurrently.

Wire format: batches travel as ``dict[str, numpy.ndarray]`` (cheap for Ray to serialize);
tables store torch tensors. Sampling an empty table raises :class:`EmptyReplayError`; sampling
more items than stored is allowed (uniform sampling is with replacement).
"""

from replay.client import ReplayClient
from replay.receipts import WriteReceipt
from replay.samplers import EmptyReplayError, UniformSampler
from replay.shard import ReplayShard, remote_shard
from replay.storage import CircularStorage, SchemaError
from replay.table import ReplayTable

__all__ = [
    "CircularStorage",
    "EmptyReplayError",
    "ReplayClient",
    "ReplayShard",
    "ReplayTable",
    "SchemaError",
    "UniformSampler",
    "WriteReceipt",
    "remote_shard",
]
