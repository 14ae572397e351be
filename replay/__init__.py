"""The sharded replay service.

Layout:
    * ``storage``: :class:`CircularStorage`, a preallocated TensorDict ring buffer whose schema
      (keys, shapes, dtypes) is fixed by the first write, in RAM or memory-mapped ``.npy`` files
      (``storage: mmap``); mismatching writes are refused whole, naming the key.
    * ``frames``: :class:`FrameStackStorage`, pixel replay that stores each frame once
      (``replay.frame_stack: 4``): single uint8 frames in their own ring, stacks rebuilt at
      sample time; collectors write frame streams (:func:`encode_stacks`) instead of stacked
      ``observation`` / ``next_observation`` (about 7.5 KB per Atari transition instead of 56).
    * ``sequence_frames``: the same for sequence items (R2D2, ``replay.frame_stack`` with
      ``replay.sequence_length``): each item holds its stacks' unique frames
      (``observation_frames``), an ordinary column; the learner rebuilds the stacks.
    * ``table``: :class:`ReplayTable`, the pure core of a shard: storage + sampler + write dedup
      by ``(writer_id, seq)`` + insertion ids + priority updates + counters.
    * ``shard``: the ``ReplayShard`` Ray actor, named ``<run>.replay-<i>`` in namespace ``relayrl``.
      With ``grpc.direct_writes`` it also serves ``relayrl.v1.Experience/Insert`` on its own
      port (``replay.intake``): server threads and actor methods share the table under
      one lock.
    * ``shm``: large writes from a writer on the shard's node through a pool of shared-memory
      blocks (``ReplayShard.write_shared_many``) instead of the object store (the driver's gRPC
      inserts use it).
    * ``client``: :class:`ReplayClient`, which routes writes by writer, samples across shards,
      routes priority updates and makes the service-wide calls (stats, clear, dump, load), each
      job in a part of its own:
    * ``health``: :class:`replay.health.ShardView`, the client's view of its shards (each one's
      last figures, marking one down, probing it back) and ``SHARD_FAILURES``, what a call to a
      shard that died or did not answer raises (collectors and the driver catch it too).
    * ``sampling`` (room): how items are drawn: ``samplers`` (``uniform`` with replacement,
      ``prioritized`` proportional with ``alpha``, ``fifo``: each item exactly once per pass,
      for on-policy learners), ``sumtree`` (:class:`SumMinTree`, the numpy sum-tree + min-tree
      of prioritized sampling), ``sharding`` (the pure split of a sample across shards and
      merge of their replies), ``fetch`` (:class:`replay.sampling.fetch.SampleFetcher`, which
      asks every shard for its part at once, draws a lost shard's part again from the others,
      and keeps batches ahead; ``prefetch``: its pure bookkeeping), ``priorities`` (priority
      updates held per shard and sent one call at a time) and ``streams`` (random streams
      derived from ``(seed, component, index, generation)`` and a request key, used by every
      layer in a deterministic run, ``run.deterministic``).
    * ``persist`` (room): a table's contents on disk and in motion: ``checkpoint`` / ``npyio``
      (a table's dump and load: raw ``.npy`` + JSON, CRC-checked, no pickle), ``items``
      (:class:`replay.persist.items.ItemSet`: items taken out of a table and put into another
      exactly: masses, FIFO pass, all columns), ``reshard`` (the deal of items over new
      shards, ``reshard_tables``, ``reshard_checkpoint``) and ``elastic`` (a checkpoint of
      another shard count loaded by ``ReplayClient.load``; ``ReplayClient.remove_shards`` /
      ``add_shards``).

Shard faults: a shard is a restartable actor (``replay.max_restarts``) that comes back empty
(its ``health`` reports a new incarnation; the driver refills it from the latest checkpoint). A
client marks a shard whose call fails as down: its share of each sample is drawn again from the
live shards (batches keep their size), its priority updates are dropped, and a probe brings it
back once Ray has restarted it; a collector whose write fails sends it to the next shard.

Using it from a learner (prioritized, annealed beta, priority updates, prefetch)::

    client = ReplayClient(shards, seed=seed)
    beta = config.replay.beta(collected_frames)             # linear anneal, driver-side frames
    for step in range(num_steps):
        batch = client.sample(256, beta=beta, prefetch=4)   # 4 more batches stay ahead
        loss = (batch["weight"] * td_error**2).mean()       # service-wide importance weights
        client.update_priorities(batch, np.abs(td_error) + 1e-6, defer=True)
    client.flush_updates(wait=True)                         # all applied before the round ends

Prefetch: ``sample(n, prefetch=k)`` keeps ``k`` batches ahead of the one it returns and fetches
them ``k`` at a time (one call per shard per ``k`` batches: a Ray call costs as much CPU as
moving a large batch, see ``docs/benchmarks.md``, so fewer and larger calls are what makes the
rates of ``python -m replay.bench``); prefetched batches were drawn from the shards' state when
fetched, like Ape-X's. Priority updates:
``update_priorities`` sends at once (``defer=False``) unless the previous update call to that
shard is still in flight, in which case the updates wait and go together; ``defer=True`` holds
them until the next sample request carries them (no extra call); :meth:`ReplayClient.flush_updates`
sends what is held (``wait=True``: until applied). A batch carries ``"shard"``, ``"index"``
(slot) and ``"insertion_id"`` (the shard's write count when the item was stored); a priority
update for a slot that has since been overwritten is dropped. Prioritized batches also carry
``"probability"`` (with which each item was drawn, over the whole service) and ``"weight"``
(``(P(i) / min_j P(j)) ** -beta``, the minimum over every sampleable item of every shard,
computed by the client from each shard's reply); FIFO batches carry ``"fifo_pass"``.

On-policy iterations: ``client.clear()`` drops every shard's items after the learners took
their batch (write counts and writers' dedup state are kept), so each FIFO pass is exactly one
iteration's data.

Checkpoints: ``client.dump(dir)`` makes every shard write ``dir/replay-<i>/`` in parallel
(``ReplayShard.dump(path)`` / ``replay.persist.checkpoint.dump_table`` each return their files and
sizes); ``client.load(dir)`` (``ReplayShard.load(path)``, ``replay.persist.checkpoint.load_table``)
restores contents, priorities, counters, dedup state and sampler RNG bit for bit, and refuses a
missing, truncated or corrupt file with :class:`CheckpointError` naming it.

Wire format: batches travel as ``dict[str, numpy.ndarray]`` (cheap for Ray to serialize).
Sampling when every shard is empty raises :class:`EmptyReplayError` at once (callers wait for
``stats()`` sizes, e.g. the controller's ``init_random_frames``). Sampling more items than
stored is allowed: uniform and prioritized sampling are with replacement; FIFO continues into
the next pass.
"""

from replay.client import ReplayClient
from replay.config import ReplayConfig
from replay.frames import FrameStackStorage, encode_stacks
from replay.persist.npyio import CheckpointError
from replay.receipts import WriteReceipt
from replay.sampling.samplers import (
    EmptyReplayError,
    FifoSampler,
    PrioritizedSampler,
    UniformSampler,
    importance_weights,
)
from replay.sampling.sumtree import SumMinTree
from replay.shard import ReplayShard, remote_shard, remote_shards
from replay.storage import CircularStorage, SchemaError
from replay.table import SAMPLERS, ReplayTable

__all__ = [
    "SAMPLERS",
    "CheckpointError",
    "CircularStorage",
    "EmptyReplayError",
    "FifoSampler",
    "FrameStackStorage",
    "PrioritizedSampler",
    "ReplayClient",
    "ReplayConfig",
    "ReplayShard",
    "ReplayTable",
    "SchemaError",
    "SumMinTree",
    "UniformSampler",
    "WriteReceipt",
    "encode_stacks",
    "importance_weights",
    "remote_shard",
    "remote_shards",
]
