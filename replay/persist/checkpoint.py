"""Dump and load of one replay table: raw ``.npy`` tensors plus one JSON file, no pickle.

A table's directory holds:

* ``data-<i>.npy``: the filled rows of storage column ``i`` (slots ``[0, size)``);
* ``insertion_id.npy``: the insertion id of each filled slot;
* ``frames.npy`` (frame-deduplicated tables, ``replay.frames``): the filled frame slots;
* ``sampler-<name>.npy``: sampler arrays (prioritized: the sum-tree leaves ``priority_mass``;
  fifo: the current pass);
* ``table.json``, written last: format, capacity, cursor and counters, the schema, the sampler's
  metadata and generator state, the dedup state (each writer's last receipt), and every file's
  size and CRC-32.

Loading checks each file against ``table.json`` and raises
:class:`replay.persist.npyio.CheckpointError` naming the file that is missing, truncated or corrupt.
The sampling trees are rebuilt from their leaves, which reproduces them bit for bit, so a restored
table holds the same contents, priorities and counters and draws the same next samples.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np

from replay.frames import FrameStackStorage
from replay.persist.npyio import (
    CheckpointError,
    fsync_dir,
    read_array,
    read_json,
    write_array,
    write_json,
)
from replay.receipts import WriteReceipt
from replay.table import MAX_WRITERS, ReplayTable

FORMAT = "relayrl.replay.table/1"
META = "table.json"


def dump_table(table: ReplayTable, directory: Path) -> dict:
    """Writes ``table`` into ``directory`` (created if missing; its files are replaced).

    Returns:
        ``{"files": {name: bytes}, "bytes": total, "items": size}``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    storage, size = table.storage, len(table)
    records, columns = {}, []
    for i, (key, column) in enumerate(storage.columns.items()):
        name = f"data-{i}.npy"
        records[name] = write_array(directory / name, column[:size])
        columns.append({"key": key, "file": name})
    records["insertion_id.npy"] = write_array(
        directory / "insertion_id.npy", table.insertion_ids[:size]
    )
    frames_meta = None
    if isinstance(storage, FrameStackStorage) and storage.frames is not None:
        filled = min(storage.frame_count, storage.frame_capacity)
        records["frames.npy"] = write_array(directory / "frames.npy", storage.frames[:filled])
        frames_meta = {"stack": storage.stack, "frame_count": storage.frame_count}
    elif isinstance(storage, FrameStackStorage):
        frames_meta = {"stack": storage.stack, "frame_count": 0}
    arrays, sampler_meta = table.sampler.state(size)
    sampler_files = {}
    for name, array in arrays.items():
        sampler_files[name] = f"sampler-{name}.npy"
        records[sampler_files[name]] = write_array(directory / sampler_files[name], array)
    meta = {
        "format": FORMAT,
        "shard_id": table.shard_id,
        "capacity": table.capacity,
        "size": size,
        "cursor": storage.cursor,
        "write_count": table.write_count,
        "sample_count": table.sample_count,
        "priority_updates": table.priority_updates,
        "stale_updates": table.stale_updates,
        "columns": columns,
        "frames": frames_meta,
        "sampler": {"kind": table.sampler.kind, "meta": sampler_meta, "files": sampler_files},
        "dedup": {
            writer: {"seq": r.seq, "indices": r.indices.tolist(), "write_count": r.write_count}
            for writer, r in table._last.items()
        },
        "files": records,
    }
    sizes = {name: record["bytes"] for name, record in records.items()}
    sizes[META] = write_json(directory / META, meta)
    fsync_dir(directory)
    return {"files": sizes, "bytes": sum(sizes.values()), "items": size}


def load_table(
    directory: Path, *, shard_id: int | None = None, mmap_dir: str | Path | None = None
) -> ReplayTable:
    """Rebuilds the table that :func:`dump_table` wrote into ``directory``.

    Args:
        directory: The table's checkpoint directory.
        shard_id: Shard id of the restored table (default: the dumped one).
        mmap_dir: Memory-map the restored storage from this directory instead of RAM.

    Raises:
        CheckpointError: If a file is missing, truncated, corrupt or inconsistent (the message
            names it).
    """
    meta_path = directory / META
    meta = read_json(meta_path)
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    try:
        return _restore(directory, meta, shard_id, mmap_dir)
    except (KeyError, TypeError, IndexError) as err:
        raise CheckpointError(f"{meta_path}: inconsistent metadata ({err!r})") from err


def _restore(directory: Path, meta: dict, shard_id: int | None, mmap_dir) -> ReplayTable:
    sampler = meta["sampler"]
    records = meta["files"]
    size, capacity = int(meta["size"]), int(meta["capacity"])
    if not 0 <= size <= capacity or not 0 <= int(meta["cursor"]) < capacity:
        raise CheckpointError(f"{directory / META}: size or cursor out of range")
    table = ReplayTable(
        capacity,
        shard_id=meta["shard_id"] if shard_id is None else shard_id,
        sampler=sampler["kind"],
        alpha=sampler["meta"].get("alpha", 0.6),
        fifo_shuffle=sampler["meta"].get("shuffle", False),
        fifo_queue=sampler["meta"].get("queue", False),
        mmap_dir=mmap_dir,
        frame_stack=(meta.get("frames") or {}).get("stack", 0),
    )
    storage = table.storage
    if meta["columns"]:
        schema = {}
        for column in meta["columns"]:
            record = records[column["file"]]
            if record["shape"][0] != size:
                raise CheckpointError(f"{directory / column['file']}: {size} rows expected")
            schema[column["key"]] = (tuple(record["shape"][1:]), np.dtype(record["dtype"]))
        storage.allocate(schema)
        for column in meta["columns"]:
            out = storage.columns[column["key"]][:size]
            read_array(directory / column["file"], records[column["file"]], out=out)
    storage.size, storage.cursor = size, int(meta["cursor"])
    if meta.get("frames") and "frames.npy" in records:
        record = records["frames.npy"]
        storage.allocate_frames(tuple(record["shape"][1:]), np.dtype(record["dtype"]))
        read_array(directory / "frames.npy", record, out=storage.frames[: record["shape"][0]])
        storage.frame_count = int(meta["frames"]["frame_count"])
    ids_file = "insertion_id.npy"
    read_array(directory / ids_file, records[ids_file], out=table.insertion_ids[:size])
    arrays = {
        name: read_array(directory / file, records[file]) for name, file in sampler["files"].items()
    }
    table.sampler.restore(arrays, sampler["meta"])
    table.write_count = int(meta["write_count"])
    table.sample_count = int(meta["sample_count"])
    table.priority_updates = int(meta["priority_updates"])
    table.stale_updates = int(meta["stale_updates"])
    receipts = [
        WriteReceipt(
            table.shard_id,
            writer,
            int(r["seq"]),
            np.asarray(r["indices"], dtype=np.int64),
            int(r["write_count"]),
        )
        for writer, r in meta["dedup"].items()
    ]
    receipts.sort(key=lambda r: r.write_count)  # least recently written first, as when dumped
    table._last = collections.OrderedDict((r.writer_id, r) for r in receipts[-MAX_WRITERS:])
    return table
