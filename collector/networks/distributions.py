"""Masked logits and the factorised action distributions of the policy-gradient family.

* :func:`masked_logits`: forbidden choices get the dtype's most negative logit, so their
  probability is exactly 0: they are never sampled, their log-probability never enters a loss
  (the stored actions are allowed ones) and the entropy sums over the allowed choices only
  (``torch.distributions.Categorical`` multiplies each clamped logit by its zero probability).
  Applied by the collector policy before sampling and by the losses before
  ``network.distribution(out)`` (``learner.losses.common``, ``learner.losses.chunks``), so a
  user's network needs nothing for masks.
* :class:`MultiCategorical`: ``MultiDiscrete(nvec)`` actions, one categorical per dimension over
  its slice of the concatenated logits ``[..., sum(nvec)]``; the joint log-probability and the
  entropy are the sums over dimensions (the dimensions are independent given the state).
* :class:`MultiBernoulli`: ``MultiBinary(n)`` actions, one Bernoulli per bit from ``n`` logits;
  log-probability and entropy summed over the bits.

Both sample with an explicit ``torch.Generator`` (the collector's, so runs are reproducible).

Examples:
    >>> logits = torch.zeros(1, 3)
    >>> dist = torch.distributions.Categorical(
    ...     logits=masked_logits(logits, torch.tensor([[True, False, True]])))
    >>> round(float(dist.entropy()), 4), round(float(dist.log_prob(torch.tensor([0]))), 4)
    (0.6931, -0.6931)
    >>> multi = MultiCategorical(torch.zeros(2, 5), (2, 3))  # uniform: 1/2 and 1/3
    >>> log_prob = multi.log_prob(torch.tensor([[0, 2], [1, 0]]))
    >>> torch.allclose(log_prob, torch.log(torch.tensor(1 / 6)))
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with the choices ``mask`` forbids at the dtype's minimum (None: unchanged).

    Args:
        logits: ``[..., width]``.
        mask: Broadcastable bool (or 0/1) ``[..., width]``; True: allowed.
    """
    if mask is None:
        return logits
    allowed = mask.to(device=logits.device, dtype=torch.bool)
    return logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)


class MultiCategorical:
    """Independent categoricals over ``MultiDiscrete(nvec)`` (see the module docstring).

    Args:
        logits: ``[..., sum(nvec)]`` (masked choices already at the minimum).
        nvec: Choices per dimension.
    """

    def __init__(self, logits: torch.Tensor, nvec: Sequence[int]) -> None:
        self.nvec = tuple(int(n) for n in nvec)
        self.logits = logits
        self.parts = [
            torch.distributions.Categorical(logits=part)
            for part in torch.split(logits, self.nvec, dim=-1)
        ]

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """The joint log-probability ``[...]`` of int actions ``[..., len(nvec)]``."""
        action = action.long()
        return sum(d.log_prob(action[..., i]) for i, d in enumerate(self.parts))

    def entropy(self) -> torch.Tensor:
        """The joint entropy: the sum of the dimensions' entropies."""
        return sum(d.entropy() for d in self.parts)

    def mode(self) -> torch.Tensor:
        """The most probable action per dimension, int64 ``[..., len(nvec)]``."""
        return torch.stack([d.logits.argmax(-1) for d in self.parts], dim=-1)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One action per row (``logits`` of rank 2), drawn with ``generator``."""
        picks = [torch.multinomial(d.probs, 1, generator=generator).squeeze(-1) for d in self.parts]
        return torch.stack(picks, dim=-1)


class MultiBernoulli:
    """Independent Bernoullis over ``MultiBinary(n)`` (see the module docstring).

    Args:
        logits: ``[..., n]``.
    """

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        self.base = torch.distributions.Bernoulli(logits=logits)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """The joint log-probability ``[...]`` of 0/1 actions ``[..., n]``."""
        return self.base.log_prob(action.to(self.logits.dtype)).sum(-1)

    def entropy(self) -> torch.Tensor:
        """The joint entropy: the sum of the bits' entropies."""
        return self.base.entropy().sum(-1)

    def mode(self) -> torch.Tensor:
        """The more probable value of each bit, int64 ``[..., n]``."""
        return (self.logits > 0).long()

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One int64 action per row, drawn with ``generator``."""
        uniform = torch.rand(self.logits.shape, generator=generator)
        return (uniform < torch.sigmoid(self.logits)).long()
