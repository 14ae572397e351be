"""TorchRL's PPO without glue: ``learner.loss: torchrl:ClipPPOLoss`` with ``algorithm: ppo``.

:class:`TorchRLPPOLoss` builds ``torchrl.objectives.ClipPPOLoss`` around the run's actor-critic
(``collector.networks.actor_critic.ActorCritic``, or the pixel one of ``collector.networks.cnn``),
the module published to collectors, so TorchRL's loss trains exactly the parameters collectors
sample with:

* the actor is a ``ProbabilisticActor`` over the network's actor output (``observation`` ->
  ``actor_output``) whose distribution is the network's own ``distribution(out)`` (categorical
  logits, or a diagonal Gaussian with the learned ``log_std``), so TorchRL's log-probabilities
  and entropies are those of the policy the collectors ran; the critic is a ``ValueOperator``
  over the network's critic (``observation`` -> ``state_value`` ``[B, 1]``);
* advantages come precomputed (GAE, collector-side, ``collector.advantages``), so TorchRL's
  value estimator never runs; each on-policy minibatch is mapped to TorchRL's keys::

      observation, action                -> observation, action
      log_prob (sampling policy)          -> the loss's sample_log_prob key (TorchRL 0.14:
                                            "action_log_prob", read from loss.tensor_keys)
      advantage, value_target [B]         -> advantage, value_target [B, 1]
      value (sampling-time critic) [B]    -> state_value [B, 1] (read by value clipping)

* ``learner.onpolicy``'s loss options give TorchRL's defaults, so switching ``learner.loss``
  from ``ppo`` to ``torchrl:ClipPPOLoss`` keeps the math of relayrl's ``PPOLoss``;
  ``learner.loss_options`` (TorchRL's own names) override them::

      clip_epsilon        = onpolicy.clip_epsilon
      entropy_coeff       = onpolicy.ent_coef
      critic_coeff        = onpolicy.vf_coef / 2, loss_critic_type = "l2"
                            (TorchRL's l2 distance is (V - R)^2; relayrl's is 0.5 (V - R)^2)
      normalize_advantage = onpolicy.normalize_advantage
      clip_value          = onpolicy.value_clip_epsilon if onpolicy.clip_value_loss else None

  With these, TorchRL's ``loss_objective + loss_critic + loss_entropy`` equals relayrl's PPO
  loss and its gradients (``tests/test_torchrl_ppo.py``); the one numerical difference is the
  advantage normalization's guard, ``std.clamp_min(1.2e-7)`` in TorchRL against
  ``std + 1e-8`` in relayrl;
* the output keeps TorchRL's ``loss_*`` terms (which the stepper sums) and its 0-d diagnostics:
  ``clip_fraction`` (share of items whose ratio left ``[1 - eps, 1 + eps]``, as relayrl's),
  ``entropy``, ``kl_approx`` (``mean(log pi_old - log pi)``, TorchRL's estimator; relayrl's
  own loss reports Schulman's ``approx_kl`` instead), ``ESS``, ``explained_variance``,
  ``max_ratio``, ``mean_ratio`` and, with value clipping, ``value_clip_fraction``.

``ClipPPOLoss`` has no target network, so there is no ``update_target``.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from collector.networks.actor_critic import ActorCriticSpec
    >>> from learner.config import LearnerConfig
    >>> config = LearnerConfig(loss="torchrl:ClipPPOLoss", loss_options={"entropy_coeff": 0.01})
    >>> loss = torchrl_ppo_loss(ActorCriticSpec(4, 2, "categorical").build(), config)
    >>> batch = TensorDict(
    ...     {
    ...         "observation": torch.randn(8, 4),
    ...         "action": torch.randint(0, 2, (8,)),
    ...         "log_prob": torch.full((8,), -0.69),
    ...         "value": torch.zeros(8),
    ...         "advantage": torch.randn(8),
    ...         "value_target": torch.randn(8),
    ...     },
    ...     batch_size=[8],
    ... )
    >>> out = loss(batch)
    >>> sorted(k for k in out.keys() if k.startswith("loss_"))
    ['loss_critic', 'loss_entropy', 'loss_objective']
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn


class ActorOutput(nn.Module):
    """Maps ``observation`` to the actor-critic's actor output (logits or Gaussian mean).

    Args:
        network: An actor-critic with ``forward(obs) -> (out, value)``; its ``actor`` module
            is used alone when it has one (the MLP actor-critic), sparing the critic's pass.
    """

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Returns the actor output ``[B, ...]``."""
        actor = getattr(self.network, "actor", None)
        if isinstance(actor, nn.Module):
            return actor(observation)
        return self.network(observation)[0]


class CriticValue(nn.Module):
    """Maps ``observation`` to the actor-critic's value ``[B, 1]`` (its ``critic``)."""

    def __init__(self, network: Any) -> None:  # an actor-critic (it has ``critic``)
        super().__init__()
        self.network = network

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Returns the value ``[B, 1]``."""
        return self.network.critic(observation)


def distribution_of(network: Any):
    """``distribution(out=...)``: the network's own action distribution of its actor output.

    TorchRL calls the distribution class with keywords named by the actor's ``in_keys``; the
    actor-critics name their argument differently (``out``, ``logits``), so it is passed on.
    """

    def distribution(out: torch.Tensor) -> torch.distributions.Distribution:
        return network.distribution(out)

    return distribution


def onpolicy_defaults(options) -> dict:
    """TorchRL ``ClipPPOLoss`` keyword arguments equivalent to ``learner.onpolicy``'s loss.

    Args:
        options: A ``learner.options.OnPolicyOptions``.
    """
    return {
        "clip_epsilon": options.clip_epsilon,
        "entropy_coeff": options.ent_coef,
        "critic_coeff": options.vf_coef / 2,
        "loss_critic_type": "l2",
        "normalize_advantage": options.normalize_advantage,
        "clip_value": options.value_clip_epsilon if options.clip_value_loss else None,
    }


class TorchRLPPOLoss(nn.Module):
    """TorchRL's ``ClipPPOLoss`` driven by relayrl's on-policy learner (see the module doc).

    Args:
        actor_critic: The actor-critic published to collectors.
        options: ``ClipPPOLoss`` keyword arguments (:func:`onpolicy_defaults` updated with
            ``learner.loss_options``).
    """

    def __init__(self, actor_critic: nn.Module, options: dict) -> None:
        super().__init__()
        from tensordict.nn import TensorDictModule
        from torchrl.modules import ProbabilisticActor, ValueOperator
        from torchrl.objectives import ClipPPOLoss

        actor = ProbabilisticActor(
            TensorDictModule(ActorOutput(actor_critic), ["observation"], ["actor_output"]),
            in_keys={"out": "actor_output"},  # distribution_class(out=...)
            distribution_class=distribution_of(actor_critic),
            return_log_prob=True,
        )
        critic = ValueOperator(CriticValue(actor_critic), in_keys=["observation"])
        self.loss = ClipPPOLoss(actor, critic, **options)
        spec = getattr(actor_critic, "spec", None)
        self.categorical = getattr(spec, "distribution", None) == "categorical"

    def to_torchrl(self, batch: TensorDict) -> TensorDict:
        """Maps an on-policy minibatch to the loss's keys (see the module docstring)."""
        keys = self.loss.tensor_keys
        action = batch["action"]
        data = {
            "observation": batch["observation"],
            keys.action: action.long() if self.categorical else action.float(),
            keys.sample_log_prob: batch["log_prob"].float(),
            keys.advantage: batch["advantage"].float().unsqueeze(-1),
            keys.value_target: batch["value_target"].float().unsqueeze(-1),
        }
        value = batch.get("value", None)  # the sampling-time critic (value clipping)
        if value is not None:
            data[keys.value] = value.float().unsqueeze(-1)
        return TensorDict(data, batch_size=batch.batch_size, device=batch.device)

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns TorchRL's ``loss_*`` terms and its scalar diagnostics (all 0-d)."""
        out = self.loss(self.to_torchrl(batch))
        result = {
            key: value.reshape(())
            for key, value in out.items()
            if isinstance(value, torch.Tensor) and value.numel() == 1
        }
        return TensorDict(result, batch_size=[])


def torchrl_ppo_loss(policy_network: nn.Module, config) -> TorchRLPPOLoss:
    """The ``learner.loss: torchrl:ClipPPOLoss`` factory.

    Args:
        policy_network: The actor-critic published to collectors.
        config: The ``LearnerConfig``; ``onpolicy`` gives the defaults, ``loss_options``
            overrides them.
    """
    options = onpolicy_defaults(config.onpolicy)
    options.update(config.loss_options)
    return TorchRLPPOLoss(policy_network, options)
