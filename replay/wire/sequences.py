"""Sequences on the wire: what an external actor of a recurrent run (``algorithm: r2d2``) sends.

A run with ``replay.sequence_length`` stores one replay item per *sequence*
(``collector.sequence_worker``), and its external actors send items of the same form: the
Insert message is unchanged (named tensors, :mod:`replay.wire.batches`), the run's
:class:`SequenceSpec` says which keys and per-item shapes it takes. For ``L`` steps and a
recurrent state of ``S`` floats (``learner.recurrent``, ``recurrent_hidden_size``)::

    observation      [L + 1, ...]  o_0 .. o_L (``observation.<key>`` per key of a Dict)
    action           [L, ...]      as the run stores actions (int64 for Discrete)
    reward           [L] float32
    terminated, truncated, valid   [L] bool
    recurrent_state  [S] float32   the state before step 0 (zeros at an episode's first step)
    burn_in          [] int64      the run's ``replay.burn_in``
    policy_version   [] int64      the model version that acted at step 0
    new_steps        [] int64      steps no earlier item of this writer holds (not stored)

Every field is checked before anything is stored (:func:`check_sequences`): ``valid`` is a
prefix of at least one step (the sequence's length ``<= L``); only the last valid step may end
an episode, and a sequence shorter than ``L`` must end one (a sequence never crosses an
episode boundary, as collectors cut them); padding is zeros; ``burn_in`` is the run's;
``new_steps`` is the sequence's length (the first sequence of an episode) or its length less
``replay.sequence_overlap`` (a sequence that overlaps its predecessor). A refusal is a
:class:`~replay.wire.errors.BatchError` naming the field (INVALID_ARGUMENT on the wire).

Frames are counted per new step (``sum(new_steps)``), as a collector counts its sequences'
steps once however many sequences hold them; ``new_steps`` is dropped before the item is
stored, so a stored external item is bit-identical to a collector's.

Examples:
    >>> import gymnasium as gym
    >>> from replay.wire.batches import transition_spec
    >>> steps = transition_spec(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    >>> spec = sequence_spec(steps, length=8, overlap=4, burn_in=2, state_size=16)
    >>> spec.tensors["observation"].shape, spec.tensors["recurrent_state"].shape
    ((9, 4), (16,))
    >>> batch = empty_sequences(spec, 1)
    >>> batch["valid"][0, :3] = True  # three steps, the last ends its episode
    >>> batch["terminated"][0, 2] = True
    >>> batch["new_steps"][0] = 3
    >>> batch["burn_in"][0] = 2
    >>> stored, frames = check_sequences(batch, spec)
    >>> frames, "new_steps" in stored
    (3, False)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from replay.wire.batches import TensorSpec, TransitionSpec
from replay.wire.errors import BatchError

NEW_STEPS = "new_steps"
STATE = "recurrent_state"

__all__ = [
    "NEW_STEPS",
    "STATE",
    "SequenceSpec",
    "check_sequences",
    "empty_sequences",
    "new_steps",
    "sequence_spec",
]


@dataclasses.dataclass(frozen=True)
class SequenceSpec(TransitionSpec):
    """A run's stored sequences (a :class:`TransitionSpec` whose items are sequences).

    Attributes:
        length: Steps per sequence ``L`` (``replay.sequence_length``).
        overlap: Steps consecutive sequences of an episode share (``replay.sequence_overlap``).
        burn_in: The run's ``replay.burn_in`` (stored with every item).
        state_size: Floats of the stored recurrent state (the learner's).
    """

    length: int = 0
    overlap: int = 0
    burn_in: int = 0
    state_size: int = 0

    @property
    def stored_keys(self) -> tuple[str, ...]:
        """The keys a replay item holds (all but :data:`NEW_STEPS`)."""
        return tuple(key for key in self.tensors if key != NEW_STEPS)

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """``observation`` or its ``observation.<key>`` fields."""
        return tuple(k for k in self.tensors if k == "observation" or k.startswith("observation."))


def sequence_spec(
    steps: TransitionSpec, *, length: int, overlap: int = 0, burn_in: int = 0, state_size: int
) -> SequenceSpec:
    """The sequences a run with these per-step fields stores (``collector.sequence_worker``).

    Args:
        steps: The run's transition spec (:func:`replay.wire.batches.transition_spec`): its
            observation and action fields give the per-step shapes and dtypes.

    Keyword Args:
        length: ``replay.sequence_length``.
        overlap: ``replay.sequence_overlap``.
        burn_in: ``replay.burn_in``.
        state_size: The learner's recurrent state size
            (``collector.networks.recurrent.state_size``).

    Raises:
        ValueError: For a layout collectors refuse too.
    """
    if length < 2 or not 0 <= overlap < length or not 0 <= burn_in < length or state_size < 1:
        raise ValueError(
            f"replay.sequence_length: must be >= 2 with 0 <= sequence_overlap, burn_in < it and "
            f"a recurrent state, got length={length}, overlap={overlap}, burn_in={burn_in}, "
            f"state_size={state_size}"
        )
    seq = (length,)
    tensors: dict[str, TensorSpec] = {}
    for key, spec in steps.tensors.items():
        if key == "observation" or key.startswith("observation."):
            tensors[key] = TensorSpec(spec.dtype, (length + 1, *spec.shape))
    action = steps.tensors["action"]
    tensors["action"] = TensorSpec(action.dtype, (*seq, *action.shape))
    tensors["reward"] = TensorSpec("float32", seq)
    tensors["terminated"] = TensorSpec("bool", seq)
    tensors["truncated"] = TensorSpec("bool", seq)
    tensors["valid"] = TensorSpec("bool", seq)
    tensors[STATE] = TensorSpec("float32", (state_size,))
    tensors["burn_in"] = TensorSpec("int64", ())
    tensors["policy_version"] = TensorSpec("int64", ())
    tensors[NEW_STEPS] = TensorSpec("int64", ())
    return SequenceSpec(
        tensors,
        steps.num_actions,
        steps.action_low,
        steps.action_high,
        length=length,
        overlap=overlap,
        burn_in=burn_in,
        state_size=state_size,
    )


def empty_sequences(spec: SequenceSpec, items: int) -> dict[str, np.ndarray]:
    """``items`` all-zero sequences of ``spec`` (every key, :data:`NEW_STEPS` too)."""
    return {
        key: np.zeros((items, *tensor.shape), np.dtype(tensor.dtype))
        for key, tensor in spec.tensors.items()
    }


def new_steps(valid: np.ndarray, first: np.ndarray, overlap: int) -> np.ndarray:
    """Each sequence's new steps: its length, less ``overlap`` unless it starts an episode.

    Args:
        valid: Bool ``[items, L]``.
        first: Bool ``[items]``: the sequence starts at an episode's first step.
        overlap: ``replay.sequence_overlap``.

    Examples:
        >>> valid = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
        >>> new_steps(valid, np.array([True, False]), overlap=2).tolist()
        [4, 1]
    """
    steps = valid.sum(axis=1).astype(np.int64)
    return np.where(first, steps, steps - overlap)


def _first_bad(mask: np.ndarray) -> int:
    """The first item where ``mask`` holds (reduced over all but the first axis)."""
    return int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0])


def check_sequences(
    arrays: dict[str, np.ndarray], spec: SequenceSpec
) -> tuple[dict[str, np.ndarray], int]:
    """Checks decoded sequences (after :func:`replay.wire.batches.check_insert`) against ``spec``.

    Args:
        arrays: A batch with every key of ``spec`` (views of the message).
        spec: The run's sequences.

    Returns:
        The arrays to store (without :data:`NEW_STEPS`) and the frames they add
        (``sum(new_steps)``).

    Raises:
        BatchError: Naming the field and the first item that breaks a rule (see the module
            docstring).
    """
    length, overlap = spec.length, spec.overlap
    valid = arrays["valid"]
    steps = valid.sum(axis=1)
    if (steps == 0).any():
        raise BatchError(f"key 'valid': item {_first_bad(steps == 0)} has no valid step")
    gaps = valid[:, 1:] & ~valid[:, :-1]
    if gaps.any():
        raise BatchError(
            f"key 'valid': item {_first_bad(gaps)} has a valid step after padding (the valid "
            f"steps are the first 1..{length})"
        )
    padding = ~valid
    for key in ("terminated", "truncated", "action", "reward"):
        value = arrays[key]
        bad = padding.reshape(*padding.shape, *([1] * (value.ndim - 2))) & (value != 0)
        if bad.any():
            raise BatchError(f"key {key!r}: item {_first_bad(bad)} is not zero on padding")
    # o_k for k <= steps is real (o_steps: the next observation of the last step); the rest pads.
    beyond = np.arange(length + 1)[None, :] > steps[:, None]
    for key in spec.observation_keys:
        value = arrays[key]
        bad = beyond.reshape(*beyond.shape, *([1] * (value.ndim - 2))) & (value != 0)
        if bad.any():
            raise BatchError(
                f"key {key!r}: item {_first_bad(bad)} is not zero after the next observation "
                "of its last valid step"
            )
    done = arrays["terminated"] | arrays["truncated"]
    last = steps - 1
    rows = np.arange(len(valid))
    ends = done[rows, last]
    inside = done.copy()
    inside[rows, last] = False
    if inside.any():
        item = _first_bad(inside)
        step = int(np.flatnonzero(inside[item])[0])
        key = "terminated" if arrays["terminated"][item, step] else "truncated"
        raise BatchError(
            f"key {key!r}: item {item} ends an episode at step {step} but goes on to step "
            f"{int(last[item])} (a sequence never crosses an episode boundary)"
        )
    short = (steps < length) & ~ends
    if short.any():
        item = _first_bad(short)
        raise BatchError(
            f"key 'valid': item {item} has {int(steps[item])} of {length} steps but does not end "
            "its episode (terminated or truncated at its last valid step)"
        )
    burn_in = arrays["burn_in"]
    if (burn_in != spec.burn_in).any():
        item = _first_bad(burn_in != spec.burn_in)
        raise BatchError(
            f"key 'burn_in': item {item} says {int(burn_in[item])}, the run burns in "
            f"{spec.burn_in} steps (replay.burn_in)"
        )
    new = arrays[NEW_STEPS]
    fresh = new == steps
    follows = (new == steps - overlap) & (steps > overlap) & (overlap > 0)
    if not (fresh | follows).all():
        item = _first_bad(~(fresh | follows))
        allowed = [int(steps[item])]
        if overlap and steps[item] > overlap:
            allowed.append(int(steps[item]) - overlap)
        raise BatchError(
            f"key {NEW_STEPS!r}: item {item} says {int(new[item])}; a sequence of "
            f"{int(steps[item])} steps adds {' or '.join(map(str, allowed))} (all of them, or "
            f"those after the replay.sequence_overlap={overlap} it shares with its predecessor)"
        )
    stored = {key: arrays[key] for key in spec.stored_keys}
    return stored, int(new.sum())
