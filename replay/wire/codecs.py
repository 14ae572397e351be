"""Tensor codecs of the experience wire: arrays to named tensors and weights to one blob.

A client encodes transition batches as named tensors (key, numpy dtype name, shape, raw
little-endian C-order bytes: :func:`encode_arrays`); the server streams weights back as the
same tensor descriptions plus one blob of their bytes (:func:`encode_state_dict`,
:func:`decode_state_dict`). Pure (numpy; torch only to decode weights).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from replay.wire.batches import DTYPES, BatchError


def encode_arrays(arrays: Mapping[str, np.ndarray]) -> list[tuple[str, str, list[int], bytes]]:
    """``(key, dtype, shape, bytes)`` per array, little-endian C order (a client's half)."""
    out = []
    for key, value in arrays.items():
        array = np.asarray(value)
        if array.dtype.name not in DTYPES:
            raise BatchError(f"key {key!r}: dtype {array.dtype} cannot be sent; accepted: {DTYPES}")
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        out.append((key, array.dtype.name, list(array.shape), array.tobytes()))
    return out


def encode_state_dict(state_dict: Mapping) -> tuple[list[tuple[str, str, list[int]]], bytes]:
    """Weights as ``([(key, dtype, shape), ...], blob)``: the tensors' bytes concatenated."""
    metas, parts = [], []
    for key, tensor in state_dict.items():
        array = np.ascontiguousarray(tensor.detach().cpu().numpy())
        metas.append((key, array.dtype.name, list(array.shape)))
        parts.append(array.tobytes())
    return metas, b"".join(parts)


def decode_state_dict(metas: Iterable, blob: bytearray) -> dict:
    """Torch tensors from :func:`encode_state_dict`'s parts (``metas`` have key/dtype/shape).

    Raises:
        BatchError: If the blob's size does not match the tensors.
    """
    import torch

    state, offset = {}, 0
    for meta in metas:
        dtype = np.dtype(meta.dtype).newbyteorder("<")
        count = math.prod(meta.shape)
        end = offset + count * dtype.itemsize
        if end > len(blob):
            raise BatchError(f"key {meta.key!r}: the weights blob is truncated")
        array = np.frombuffer(blob, dtype=dtype, count=count, offset=offset)
        state[meta.key] = torch.from_numpy(array.reshape(tuple(meta.shape)))
        offset = end
    if offset != len(blob):
        raise BatchError(f"weights blob has {len(blob) - offset} bytes beyond its tensors")
    return state
