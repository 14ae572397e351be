"""``Policy.act`` on structured observations (``Dict``/``Tuple`` spaces, ``collector.envs.spaces``).

A policy trained on a ``Dict`` observation takes what the env returns: one observation (the
env's nested mapping, or the flat mapping of its leaves keyed by path, ``pos.0``) or a batch
(each leaf with a leading batch dimension, as a gymnasium vector env returns them); keys the run
dropped (``collector.observation_keys``) are ignored. Each leaf is checked against its shape and
handed to the network as a tensor of its stored dtype, as collectors hand it. An image key the
run preprocessed (``collector.image_keys``) is taken raw, as the env returns it (preprocessed
and stacked with the frames before it until :meth:`StructuredInput.reset`,
:class:`collector.envs.images.ImageInputs`), or already preprocessed.

Examples:
    >>> import gymnasium as gym
    >>> from collector.envs.spaces import describe
    >>> space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(0, 1, (2,))})
    >>> inputs = StructuredInput(describe(space))
    >>> batch, single = inputs({"a": 2, "b": [0.5, 0.5]})
    >>> {k: tuple(v.shape) for k, v in batch.items()}, single
    ({'a': (1,), 'b': (1, 2)}, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from collector.envs.images import ImageInputs
from collector.envs.spaces import SEPARATOR, ObservationLayout


class StructuredInput:
    """Turns one structured observation or a batch into the network's mapping of tensors.

    Args:
        layout: The run's observation layout (its network spec's ``layout``).
    """

    def __init__(self, layout: ObservationLayout) -> None:
        self.layout = layout
        self.images = ImageInputs(layout.images) if layout.images else None

    def reset(self) -> None:
        """A new episode: preprocessed image keys' frame stacks start again."""
        if self.images is not None:
            self.images.reset()

    def leaf(self, observation: Any, key: str) -> Any:
        """The value of leaf ``key`` in a flat or nested observation.

        Raises:
            ValueError: Naming the key if the observation lacks it.
        """
        if isinstance(observation, Mapping) and key in observation:
            return observation[key]
        value = observation
        try:
            for part in key.split(SEPARATOR):
                value = value[int(part)] if isinstance(value, tuple | list) else value[part]
        except (KeyError, IndexError, TypeError, ValueError):
            raise ValueError(
                f"observation: no key {key!r} (the run's keys: {list(self.layout.keys)})"
            ) from None
        return value

    def __call__(
        self, observation: Any, device: torch.device | str = "cpu"
    ) -> tuple[dict[str, torch.Tensor], bool]:
        """``(batch, single)``: the leaves as ``[B, *shape]`` tensors, and whether ``B`` was added.

        Raises:
            ValueError: Naming the key and the shape expected, for a leaf of another shape or
                batch sizes that differ.
        """
        if not isinstance(observation, Mapping | tuple | list):
            raise ValueError(
                f"observation: expected a mapping of the keys {list(self.layout.keys)}, "
                f"got a {type(observation).__name__}"
            )
        tensors, single, sizes = {}, None, set()
        for leaf in self.layout.leaves:
            value = self.leaf(observation, leaf.key)
            if self.images is not None:
                value = self.images(leaf.key, value)
            if isinstance(value, torch.Tensor):
                tensor = value.to(device)
            else:
                tensor = torch.as_tensor(np.asarray(value, dtype=leaf.dtype), device=device)
            one = tuple(tensor.shape) == leaf.shape
            if not one and tuple(tensor.shape[1:]) != leaf.shape:
                raise ValueError(
                    f"observation key {leaf.key!r}: expected {list(leaf.shape)} or "
                    f"[B, {', '.join(map(str, leaf.shape))}], got {list(tensor.shape)}"
                )
            if single is not None and single != one:
                raise ValueError(
                    f"observation key {leaf.key!r}: batched and unbatched keys are mixed"
                )
            single = one
            tensors[leaf.key] = tensor[None] if one else tensor
            sizes.add(len(tensors[leaf.key]))
        if len(sizes) > 1:
            raise ValueError(f"observation: batch sizes differ across keys: {sorted(sizes)}")
        return tensors, bool(single)
