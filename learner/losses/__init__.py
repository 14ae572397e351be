"""One loss module per algorithm, each following TorchRL's ``LossModule`` convention.

A loss maps a TensorDict batch to a TensorDict whose ``loss_*`` entries the stepper minimizes
(their sum, or one named method per optimizer); other entries are detached diagnostics, and a
per-item ``td_error`` can feed prioritized replay. Each module's docstring states the math.

    * ``dqn``: :class:`DQNLoss` (double DQN, Huber, n-step discounts, importance weights);
      with ``learner.recurrent``, recurrent DQN over stored sequences (``sequence_q``).
    * ``sequence_q``: :class:`SequenceQLoss`, Q-learning over stored sequences (burn-in from
      the stored state, n-step double-Q targets within each sequence, masks, mixed sequence
      priorities), shared by recurrent DQN and ``r2d2``: :class:`R2D2Loss` (the core with a
      squared penalty and value rescaling).
    * ``ppo``: :class:`PPOLoss` (clipped surrogate, optionally clipped value loss, entropy).
    * ``a2c``: :class:`A2CLoss` (advantage actor-critic, one step per batch).
    * ``reinforce``: :class:`ReinforceLoss` (Monte-Carlo policy gradient, optional baseline).
    * ``impala``: :class:`IMPALALoss` (V-trace actor-critic over trajectory chunks) and
      ``appo``: :class:`APPOLoss` (PPO's clipped surrogate on V-trace advantages with an old
      policy); what they share (the actor-critic over chunks, masks) is in ``chunks``, V-trace
      itself in ``learner.vtrace``.
    * ``sac``: :class:`SACLoss` (twin Q, Polyak targets, tanh-Gaussian actor, learned
      temperature), optimized by ``learner.multi.MultiOptimizerStepper``.
    * ``torchrl_loss``: ``learner.loss: torchrl:DQNLoss``, a ``torchrl.objectives`` class built
      around the policy network, fed TorchRL's nested batch layout (the ``torchrl`` extra).
    * ``marl``: :class:`MultiAgentQLoss` (IQL, VDN or QMIX over a parameter-shared agent
      network; mixers in ``learner.losses.mixers``).
    * ``torchrl_ppo``: ``learner.loss: torchrl:ClipPPOLoss`` (``algorithm: ppo``), TorchRL's
      ``ClipPPOLoss`` around the actor-critic, fed the collectors' GAE advantages; defaults
      from ``learner.onpolicy``, so it equals ``PPOLoss`` term by term.

A factory is called as ``factory(policy_network, learner_config)``; the policy network is the
one published to collectors, and a loss builds whatever else it needs (critics, targets).

:data:`LOSSES` holds the built-in losses, derived from the algorithm registrations
(``learner.algorithms``: each names its loss key, factory and stepper): ``LearnerConfig``
validates ``learner.loss`` against it and resolves ``stepper: auto`` from it, and
:func:`loss_factory_for` builds from it. It holds ``module:factory`` paths, imported on use, so
validating a config imports no torch.

Examples:
    >>> LOSSES["sac"]
    BuiltinLoss(factory='learner.losses.sac:sac_loss', stepper='multi_optimizer')
    >>> from learner.config import LearnerConfig
    >>> loss_factory_for(LearnerConfig(loss="dqn")).__name__
    'dqn_loss'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from learner.algorithms import ALGORITHMS, torchrl_factory
from learner.plugins import resolve_factory

# ``factory(policy_network: nn.Module, learner_config) -> nn.Module`` (torch imported on use).
LossFactory = Callable[[Any, Any], Any]


@dataclasses.dataclass(frozen=True)
class BuiltinLoss:
    """A built-in loss: where its factory lives and the stepper it needs.

    Attributes:
        factory: ``module:factory`` path of its factory, imported when a learner builds it.
        stepper: The stepper ``learner.stepper: auto`` picks for it (e.g. ``multi_optimizer``
            for one optimizer per named loss method); None: ``default``, or
            ``mixed_precision`` for another precision or gradient accumulation.
    """

    factory: str
    stepper: str | None = None


def _builtin_losses() -> dict[str, BuiltinLoss]:
    losses: dict[str, BuiltinLoss] = {}
    for algo in ALGORITHMS.values():
        loss = BuiltinLoss(algo.loss_factory, algo.stepper)
        if losses.setdefault(algo.loss, loss) != loss:
            raise RuntimeError(f"loss {algo.loss!r}: registrations disagree on its factory")
    return losses


LOSSES: dict[str, BuiltinLoss] = _builtin_losses()


def loss_factory_for(config) -> LossFactory:
    """The factory named by ``config.loss`` (imported for ``module:factory`` paths).

    Raises:
        ValueError: If a factory path cannot be resolved.
    """
    if config.loss in LOSSES:
        return resolve_factory(LOSSES[config.loss].factory, "loss")
    if config.loss.startswith("torchrl:"):  # a torchrl.objectives class (the torchrl extra)
        found = torchrl_factory(config.loss.removeprefix("torchrl:"))
        if found is None:
            raise ValueError(f"loss: no registered algorithm trains {config.loss}")
        return resolve_factory(found[1], "loss")
    return resolve_factory(config.loss, "loss")


__all__ = ["LOSSES", "BuiltinLoss", "LossFactory", "loss_factory_for"]
