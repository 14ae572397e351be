"""The collector's copy of the policy weights and the ``(generation, version)`` they carry.

Publication is ordered by ``(generation, version)`` and a collector never goes back to older
weights: :meth:`PolicyWeights.apply` loads a state dict only if its label is newer than the one
in use. Pure torch, no Ray: the collector fetches the state dict (``ray.get``) and holds its step
lock around :meth:`~PolicyWeights.apply`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch


class Labelled(Protocol):
    """What a weights message needs for ordering (``learner.PublishedWeights`` has it)."""

    generation: int
    version: int


class PolicyWeights:
    """The network a collector acts with and the label of the weights loaded into it.

    Args:
        network: The collector's policy network (its initial, unpublished weights count as
            ``(-1, -1)``).

    Examples:
        >>> import types
        >>> weights = PolicyWeights(torch.nn.Linear(2, 1))
        >>> published = types.SimpleNamespace(generation=0, version=3)
        >>> weights.apply(published, torch.nn.Linear(2, 1).state_dict())
        True
        >>> weights.label, weights.is_newer(published)
        ((0, 3), False)
    """

    def __init__(self, network: torch.nn.Module) -> None:
        self.network = network
        self.generation = -1
        self.version = -1

    @property
    def label(self) -> tuple[int, int]:
        """``(generation, version)`` of the weights in use; ``(-1, -1)`` before any."""
        return self.generation, self.version

    def is_newer(self, weights: Labelled) -> bool:
        """Whether ``weights`` are newer than the ones in use by ``(generation, version)``."""
        return (weights.generation, weights.version) > (self.generation, self.version)

    def apply(self, weights: Labelled, state_dict: Mapping[str, Any]) -> bool:
        """Loads ``state_dict`` (the tensors of ``weights``) if still newer; returns whether it did.

        The caller holds the collector's step lock, so no rollout steps with half-loaded weights.
        """
        if not self.is_newer(weights):
            return False
        self.network.load_state_dict(state_dict)
        self.generation, self.version = weights.generation, weights.version
        return True
