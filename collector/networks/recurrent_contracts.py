"""What a user's recurrent network must do (``learner.network`` with ``learner.recurrent``).

With ``learner.recurrent: lstm | gru`` a run's family is ``recurrent_q`` (DQN, R2D2) or
``recurrent_actor_critic`` (PPO, A2C, REINFORCE, IMPALA, APPO), and a user's module takes the
place of :class:`~collector.networks.recurrent.RecurrentQ` or
:class:`~collector.networks.recurrent.RecurrentActorCritic`. It follows **the state protocol**
(the built-in networks' too, ``collector.networks.recurrent``):

* the state is one float32 tensor ``[B, state_size]`` per batch of sequences (pack an LSTM's
  ``h`` and ``c`` side by side); ``initial_state(batch)`` returns zeros, the state at every
  episode's first step (relayrl zeroes the state there itself, so the two must agree);
* ``forward(observation, state, reset=None, valid=None)`` runs whole sequences: ``observation``
  ``[B, T, *obs_shape]`` (or a mapping of such), ``state`` the state before step 0, ``reset``
  bool ``[B, T]`` True where step ``t`` is an episode's first (the state is zeroed *before* the
  step), ``valid`` bool ``[B, T]`` False on padding (the state passes padded steps unchanged, so
  the returned state is the one after each row's last real step);
* it returns the heads with ``[B, T]`` leading and the state after the sequence:
  ``(q [B, T, n_actions], state)`` for ``recurrent_q``; ``(out [B, T, width], value [B, T],
  state)`` for ``recurrent_actor_critic``, with ``distribution(out)`` as the feed-forward
  actor-critic's (:class:`~collector.networks.contracts.ActorCriticNetwork`);
* collectors, evaluation and ``load_policy`` act one step at a time: ``T = 1`` and the state
  each step returned; with ``reset`` and ``valid`` None the module may run its core in one call
  (what ``relayrl export`` traces).

:func:`check_recurrent` (called by :func:`~collector.networks.contracts.probe`) runs the module
on a dummy batch of sequences and refuses, naming ``learner.network``: a missing
``initial_state``, a state that is not zeros ``[B, state_size]``, heads or a state of the wrong
shape, a ``reset`` that does not restart from zeros, a padded step that moves the state.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import torch
from torch import nn

RECURRENT_FAMILIES = ("recurrent_q", "recurrent_actor_critic")
TOLERANCE = 1e-5
STEPS = 3  # the probe's sequence length


@runtime_checkable
class RecurrentQValues(Protocol):
    """A recurrent Q-network: ``forward(obs, state, reset, valid) -> (q [B, T, A], state)``."""

    def initial_state(self, batch: int) -> torch.Tensor:
        """Zeros ``[batch, state_size]``."""
        ...

    def __call__(
        self,
        observation: Any,
        state: torch.Tensor,
        reset: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Q-values ``[B, T, n_actions]`` and the state after the sequence ``[B, state_size]``."""
        ...


@runtime_checkable
class RecurrentActorCriticNetwork(Protocol):
    """A recurrent actor-critic: ``forward(...) -> (out [B, T, width], value [B, T], state)``."""

    def initial_state(self, batch: int) -> torch.Tensor:
        """Zeros ``[batch, state_size]``."""
        ...

    def __call__(
        self,
        observation: Any,
        state: torch.Tensor,
        reset: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits or mean, the value, and the state after the sequence."""
        ...

    def distribution(self, out: torch.Tensor) -> torch.distributions.Distribution:
        """The action distribution of one step's ``out`` ``[B, width]``."""
        ...


def sequences(observation: Any, steps: int) -> Any:
    """A dummy batch ``[B * T, ...]`` as ``[B, T, ...]``, float keys drawn from N(0, 1) (seeded)."""
    generator = torch.Generator().manual_seed(0)

    def fill(x: torch.Tensor) -> torch.Tensor:
        x = x.unflatten(0, (x.shape[0] // steps, steps))
        if x.is_floating_point():
            return torch.randn(x.shape, generator=generator)
        return x

    if isinstance(observation, dict):
        return {key: fill(value) for key, value in observation.items()}
    return fill(observation)


def check_recurrent(
    family: str, network: nn.Module, seq: Any, action_space: gym.Space, where: str, need: str
) -> None:
    """Checks the state protocol on sequences ``seq`` ``[B, T, ...]`` (module docstring).

    Raises:
        ValueError: Naming ``where`` (``learner.network: <factory>``) and what is wrong.
    """
    from collector.networks.contracts import _check_actor_critic, _check_q, _shape

    initial = getattr(network, "initial_state", None)
    if not callable(initial):
        raise ValueError(
            f"{where}: a recurrent network ({need}, learner.recurrent) needs "
            "initial_state(batch) returning its state [batch, state_size] (the state protocol: "
            "docs/networks.md)"
        )
    first = next(iter(seq.values())) if isinstance(seq, dict) else seq
    batch, steps = first.shape[0], first.shape[1]
    zeros = initial(batch)
    if not (isinstance(zeros, torch.Tensor) and zeros.ndim == 2 and zeros.shape[0] == batch):
        raise ValueError(
            f"{where}: initial_state({batch}) gives {_shape(zeros)}; needs [{batch}, state_size]"
        )
    if zeros.dtype != torch.float32 or zeros.any():
        raise ValueError(f"{where}: initial_state({batch}) must be float32 zeros")
    size = zeros.shape[1]
    q_family = family == "recurrent_q"
    arity = 2 if q_family else 3
    what = "(q, state)" if q_family else "(out, value, state)"

    def run(*args, **kwargs) -> tuple[torch.Tensor, ...]:
        result = network(*args, **kwargs)
        if not (
            isinstance(result, tuple | list)
            and len(result) == arity
            and all(isinstance(x, torch.Tensor) for x in result)
        ):
            raise ValueError(
                f"{where} maps sequences {_shape(seq)} and a state [{batch}, {size}] to "
                f"{type(result).__name__}; needs a tuple of tensors {what}"
            )
        if tuple(result[-1].shape) != (batch, size):
            raise ValueError(
                f"{where} returns a state {_shape(result[-1])} after sequences {_shape(seq)}; "
                f"needs [{batch}, {size}] (as initial_state)"
            )
        return tuple(result)

    state = torch.randn((batch, size), generator=torch.Generator().manual_seed(1))
    *heads, _ = run(seq, state)
    for index, head in enumerate(heads):
        if tuple(head.shape[:2]) != (batch, steps):
            name = ("q", "out", "value")[index + (0 if q_family else 1)]
            raise ValueError(
                f"{where} gives {name} {_shape(head)} for sequences {_shape(seq)}; needs "
                f"[{batch}, {steps}, ...] ([B, T] leading)"
            )
    step = {k: v[:, 0] for k, v in seq.items()} if isinstance(seq, dict) else seq[:, 0]
    if q_family:
        _check_q(heads[0][:, 0], step, action_space, where, need)
    else:
        pair = _StepPair(heads[0][:, 0], heads[1][:, 0], network)
        _check_actor_critic(pair, step, action_space, where)
    _check_reset_and_padding(run, seq, state, batch, steps, where)


class _StepPair:
    """One step's ``(out, value)`` and the network's ``distribution`` (the feed-forward check)."""

    def __init__(self, out: torch.Tensor, value: torch.Tensor, network: nn.Module) -> None:
        self.result = (out, value)
        self.distribution = network.distribution

    def __call__(self, observation: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.result


def _check_reset_and_padding(run, seq, state, batch: int, steps: int, where: str) -> None:
    reset = torch.zeros(batch, steps, dtype=torch.bool)
    reset[:, 0] = True
    fresh = run(seq, torch.zeros_like(state))[-1]
    restarted = run(seq, state, reset=reset)[-1]
    if not torch.allclose(restarted, fresh, rtol=TOLERANCE, atol=TOLERANCE):
        raise ValueError(
            f"{where}: with reset[:, 0] True the state after the sequence differs from the one "
            "from initial_state; reset must zero the state before the step"
        )
    valid = torch.ones(batch, steps, dtype=torch.bool)
    valid[:, -1] = False
    shorter = {k: v[:, :-1] for k, v in seq.items()} if isinstance(seq, dict) else seq[:, :-1]
    padded = run(seq, state, valid=valid)[-1]
    if not torch.allclose(padded, run(shorter, state)[-1], rtol=TOLERANCE, atol=TOLERANCE):
        raise ValueError(
            f"{where}: a padded step (valid False) moves the state; the state after the "
            "sequence must be the one after each row's last valid step"
        )
