"""Recurrent networks acting one step at a time: the collector policy with a state per env.

:class:`StepView` shows a recurrent network (``collector.networks.recurrent``) to the
feed-forward policies (``EpsilonGreedy``, ``StochasticActor``) as a function of one step's
observations, so sampling, epsilon-greedy and masks stay theirs; :class:`RecurrentPolicy` adds the
state: ``act(obs, explore, state=) -> (actions, extras, next_state)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from collector.networks.common import Explore


def fast_step(network: nn.Module):
    """The network's ``forward_step`` when it is the one-step form of its ``forward``, else None.

    The built-in recurrent networks (``collector.networks.recurrent``) define both in one
    class; ``forward_step(obs [n, ...], state) -> (*heads [n, ...], state)`` computes what
    ``forward`` computes on a one-step sequence without ``reset``/``valid``. A network that
    overrides ``forward`` below the class that defines ``forward_step`` (a subclass), and any
    network without one (a user's, following the state protocol), steps through ``forward``.
    """
    step = getattr(network, "forward_step", None)
    if step is None:
        return None
    for cls in type(network).__mro__:
        if "forward_step" in vars(cls):
            return step if "forward" in vars(cls) else None
        if "forward" in vars(cls):
            return None
    return None


class StepView:
    """A recurrent network seen as a feed-forward one for one step (what the policies call).

    Set :attr:`state` ``[n, state_size]`` before a call; the call runs the network on
    ``[n, 1, ...]`` and leaves the state after the step in :attr:`next_state`. ``critic(obs)``
    (bootstrapping) reads the value without keeping the state.
    """

    def __init__(self, network: nn.Module) -> None:
        self.network = network
        self.spec = getattr(network, "spec", None)
        self.state: torch.Tensor | None = None
        self.next_state: torch.Tensor | None = None
        self.fast_step = fast_step(network)

    def _run(self, observation: Any) -> tuple[Any, ...]:
        if self.fast_step is not None:  # the network's own one-step path: no [n, 1] sequence
            *heads, state = self.fast_step(observation, self.state)
            return tuple(heads), state
        if isinstance(observation, Mapping):
            steps = {key: value.unsqueeze(1) for key, value in observation.items()}
        else:
            steps = observation.unsqueeze(1)
        *heads, state = self.network(steps, self.state)
        return tuple(head[:, 0] for head in heads), state

    def __call__(self, observation: Any):
        """The heads' outputs of one step (``[n, ...]``); the new state in :attr:`next_state`."""
        if self.fast_step is not None:
            *heads, self.next_state = self.fast_step(observation, self.state)
            return heads[0] if len(heads) == 1 else tuple(heads)
        heads, self.next_state = self._run(observation)
        return heads[0] if len(heads) == 1 else heads

    def critic(self, observation: Any) -> torch.Tensor:
        """The value ``[n, 1]`` under :attr:`state` (the state is not advanced)."""
        heads, _ = self._run(observation)
        return heads[1].unsqueeze(-1)

    def distribution(self, out: torch.Tensor) -> torch.distributions.Distribution:
        """The network's action distribution."""
        return self.network.distribution(out)

    @property
    def log_std(self) -> torch.Tensor:
        """The network's Gaussian ``log_std``."""
        return self.network.log_std


class RecurrentPolicy:
    """A collector policy with memory: the feed-forward policy's acting, plus a state per row.

    Args:
        inner: The feed-forward policy (``EpsilonGreedy`` or ``StochasticActor``) over ``view``.
        view: The :class:`StepView` of the recurrent network.
    """

    recurrent = True

    def __init__(self, inner: Any, view: StepView) -> None:
        self.inner = inner
        self.view = view
        self.state_size = int(view.network.initial_state(1).shape[-1])

    def initial_state(self, n: int) -> np.ndarray:
        """Zeros ``[n, state_size]`` float32."""
        return np.zeros((n, self.state_size), np.float32)

    def act(
        self,
        obs: Any,
        explore: Explore = None,
        *,
        state: np.ndarray,
        mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict, np.ndarray]:
        """Acts on one step of every row; returns ``(actions, extras, next_state)``.

        The state advances even when the action is random (epsilon-greedy's ``epsilon >= 1``
        skips the network; the step is then run for the state alone).
        """
        if not torch.is_inference_mode_enabled():  # (the collectors' loops run in one)
            with torch.inference_mode():
                return self.act(obs, explore, state=state, mask=mask)
        view = self.view
        view.state = _state_tensor(state)
        view.next_state = None
        actions, extras = self.inner.act(obs, explore, mask=mask)
        if view.next_state is None:
            view(_tensor(obs))
        return actions, extras, view.next_state.numpy()

    def value(self, obs: Any, state: np.ndarray) -> np.ndarray:
        """The critic's values ``[n]`` of ``obs`` under ``state`` (bootstrapping)."""
        self.view.state = _state_tensor(state)
        return self.inner.value(obs)

    def state_dict(self) -> dict:
        """The sampling RNG's state (the feed-forward policy's)."""
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restores the sampling RNG."""
        self.inner.load_state_dict(state)


def _tensor(obs: Any) -> Any:
    if isinstance(obs, Mapping):
        return {key: torch.as_tensor(np.asarray(value)) for key, value in obs.items()}
    return torch.as_tensor(np.asarray(obs), dtype=torch.float32)


def _state_tensor(state: Any) -> torch.Tensor:
    """The state ``[n, state_size]`` as a float32 tensor, sharing a float32 array's memory."""
    if (
        isinstance(state, np.ndarray)
        and state.dtype == np.float32
        and state.flags.c_contiguous
        and state.flags.writeable
    ):
        return torch.from_numpy(state)
    return torch.as_tensor(np.asarray(state, np.float32))
