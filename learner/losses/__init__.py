"""One loss module per algorithm, each following TorchRL's ``LossModule`` convention.

A loss maps a TensorDict batch to a TensorDict whose ``loss_*`` entries the stepper minimizes
(their sum, or one named method per optimizer); other entries are detached diagnostics, and a
per-item ``td_error`` can feed prioritized replay. Each module's docstring states the math.

    * ``dqn``: :class:`DQNLoss` (double DQN, Huber, n-step discounts, importance weights).
    * ``ppo``: :class:`PPOLoss` (clipped surrogate, optionally clipped value loss, entropy).
    * ``a2c``: :class:`A2CLoss` (advantage actor-critic, one step per batch).
    * ``reinforce``: :class:`ReinforceLoss` (Monte-Carlo policy gradient, optional baseline).
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
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from learner.losses.a2c import A2CLoss, a2c_loss
from learner.losses.dqn import DQNLoss, dqn_loss
from learner.losses.marl import MultiAgentQLoss, marl_loss
from learner.losses.ppo import PPOLoss, ppo_loss
from learner.losses.reinforce import ReinforceLoss, reinforce_loss
from learner.losses.sac import SACLoss, sac_loss
from learner.plugins import resolve_factory

LossFactory = Callable[[nn.Module, object], nn.Module]

LOSSES: dict[str, LossFactory] = {
    "dqn": dqn_loss,
    "ppo": ppo_loss,
    "a2c": a2c_loss,
    "reinforce": reinforce_loss,
    "sac": sac_loss,
    "marl": marl_loss,
}


def loss_factory_for(config) -> LossFactory:
    """The factory named by ``config.loss`` (imported for ``module:factory`` paths).

    Raises:
        ValueError: If a factory path cannot be resolved.
    """
    if config.loss in LOSSES:
        return LOSSES[config.loss]
    if config.loss.startswith("torchrl:"):  # a torchrl.objectives class (the torchrl extra)
        from learner.losses.torchrl_loss import torchrl_loss

        return torchrl_loss
    return resolve_factory(config.loss, "loss")


__all__ = [
    "LOSSES",
    "A2CLoss",
    "DQNLoss",
    "LossFactory",
    "MultiAgentQLoss",
    "PPOLoss",
    "ReinforceLoss",
    "SACLoss",
    "loss_factory_for",
]
