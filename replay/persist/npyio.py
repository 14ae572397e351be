"""Checkpoint files of the replay service: raw ``.npy`` arrays and JSON, checked on read, no pickle.

It also holds what every checkpoint writer and reader of relayrl shares: :class:`CheckpointError`
and :func:`fsync_dir`.

Every file is written, flushed and fsynced; its size and CRC-32 go into the table's metadata, and
reading refuses a file whose header, size or checksum differs, with a
:class:`CheckpointError` naming the file. Arrays are read straight into their destination
(e.g. the table's preallocated storage), so a restore copies each byte once.
"""

from __future__ import annotations

import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


class CheckpointError(ValueError, RuntimeError):
    """A missing, partial, corrupt or incompatible checkpoint; the message names the file.

    The one checkpoint error of relayrl: the replay files' reader raises it, and so do the
    driver's checkpoint directories (``services.checkpoints``), so one ``except`` catches a bad
    checkpoint whichever part found it. Both bases: the replay files' error was a ``ValueError``
    and the driver's a ``RuntimeError``, and a caller that caught either still does.
    """


# Files move in chunks so that the CRC of one chunk (zlib releases the GIL) overlaps the disk
# transfer of the next.
CHUNK_BYTES = 32 << 20
_crc_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-crc")


def _bytes_of(array: np.ndarray) -> memoryview:
    return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _chunked_crc(data: memoryview, transfer) -> int:
    """Calls ``transfer(chunk)`` on consecutive chunks while checksumming the previous one."""
    crc, pending = 0, None
    for start in range(0, len(data), CHUNK_BYTES):
        chunk = data[start : start + CHUNK_BYTES]
        transfer(chunk)
        if pending is not None:
            crc = pending.result()
        pending = _crc_thread.submit(zlib.crc32, chunk, crc)
    return crc if pending is None else pending.result()


def write_array(path: Path, array: np.ndarray) -> dict:
    """Writes ``array`` as a ``.npy`` file and returns its record ``{bytes, crc32, shape, dtype}``.

    Raises:
        CheckpointError: If the array holds Python objects (those would need pickle).
    """
    array = np.ascontiguousarray(array)
    if array.dtype.hasobject:
        raise CheckpointError(f"{path.name}: object arrays are not checkpointable")
    with open(path, "wb") as f:
        np.lib.format.write_array_header_2_0(f, np.lib.format.header_data_from_array_1_0(array))
        crc = _chunked_crc(_bytes_of(array), f.write)
        f.flush()
        os.fsync(f.fileno())
        size = f.tell()
    return {
        "bytes": size,
        "crc32": crc,
        "shape": list(array.shape),
        "dtype": array.dtype.str,
    }


def read_array(path: Path, record: dict, out: np.ndarray | None = None) -> np.ndarray:
    """Reads a ``.npy`` file written by :func:`write_array`, checking it against its record.

    Args:
        path: The file.
        record: Its record from the checkpoint metadata.
        out: Optional contiguous destination of the recorded shape and dtype (read into in place).

    Returns:
        The array (``out`` when given).

    Raises:
        CheckpointError: If the file is missing, its header differs from the record, it is
            truncated or longer, or its checksum differs.
    """
    shape, dtype = tuple(record["shape"]), np.dtype(record["dtype"])
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below, errors name the file)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot open ({err.strerror})") from err
    with f:
        try:
            version = np.lib.format.read_magic(f)
            if version not in HEADER_READERS:
                raise ValueError(f"unsupported .npy version {version}")
            header = HEADER_READERS[version](f)  # parses a literal dict, never unpickles
        except (ValueError, OSError) as err:
            raise CheckpointError(f"{path}: not a valid .npy file ({err})") from err
        file_shape, fortran, file_dtype = header
        if file_shape != shape or file_dtype != dtype or fortran or file_dtype.hasobject:
            raise CheckpointError(
                f"{path}: header says {file_shape} {file_dtype}, expected {shape} {dtype}"
            )
        size = os.fstat(f.fileno()).st_size
        if size != record["bytes"]:
            raise CheckpointError(f"{path}: {size} bytes, expected {record['bytes']} (truncated?)")
        if out is None:
            out = np.empty(shape, dtype=dtype)
        elif out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
            raise ValueError(f"{path}: destination does not match {shape} {dtype}")
        data = _bytes_of(out) if out.size else memoryview(b"")

        def read_chunk(chunk: memoryview) -> None:
            if f.readinto(chunk) != len(chunk):
                raise CheckpointError(f"{path}: shorter than its header says (truncated)")

        crc = _chunked_crc(data, read_chunk)
    if crc != record["crc32"]:
        raise CheckpointError(f"{path}: checksum mismatch (corrupt)")
    return out


def fsync_dir(path: Path) -> None:
    """Flushes a directory entry table to disk (so renames and new files are durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, value: dict) -> int:
    """Writes ``value`` as JSON (flushed and fsynced); returns the file size."""
    text = json.dumps(value, indent=1, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return len(text)


def read_json(path: Path) -> dict:
    """Reads a JSON object.

    Raises:
        CheckpointError: If the file is missing or is not a JSON object.
    """
    try:
        value = json.loads(Path(path).read_bytes())
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror})") from err
    except ValueError as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return value
