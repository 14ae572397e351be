"""A user-style stepper: TD3's delayed policy updates with two optimizers.

This is both a usable stepper (``LearnerConfig.stepper = "delayed_policy"``) and the example of
how to write one: it calls named loss methods through ``train_module`` (so DDP averages every
gradient), owns one optimizer per parameter set, and saves all its state as tensors and plain
values.

The loss module must provide ``critic_parameters()`` and ``actor_parameters()`` and the two
named loss methods (``loss_critic(batch)`` and ``loss_actor(batch)`` by default), each returning
a TensorDict with ``loss_*`` entries. Under DDP with several ranks the critic step does not use
the actor's parameters, so the rank builds DDP with ``find_unused_parameters=True``.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from learner.stepper import GradClipper, detached, make_optimizer, total_loss


class DelayedPolicyStepper:
    """Critic update every step; actor update every ``policy_delay`` steps (TD3).

    Args:
        critic_optimizer: Optimizer over the critic's parameters.
        actor_optimizer: Optimizer over the actor's parameters.

    Keyword Args:
        policy_delay: Critic steps per actor step.
        critic_method: Name of the loss method minimized by the critic optimizer.
        actor_method: Name of the loss method minimized by the actor optimizer.
        max_grad_norm: Global norm limit applied to each parameter set (0 only measures).

    Examples:
        >>> config = LearnerConfig(loss="mypkg.td3:make_loss", stepper="delayed_policy",
        ...                        stepper_options={"policy_delay": 2})  # doctest: +SKIP
    """

    def __init__(
        self,
        critic_optimizer: torch.optim.Optimizer,
        actor_optimizer: torch.optim.Optimizer,
        *,
        policy_delay: int = 2,
        critic_method: str = "loss_critic",
        actor_method: str = "loss_actor",
        max_grad_norm: float = 0.0,
    ) -> None:
        if policy_delay < 1:
            raise ValueError(f"policy_delay: must be >= 1, got {policy_delay!r}")
        self.critic_optimizer = critic_optimizer
        self.actor_optimizer = actor_optimizer
        self.policy_delay = policy_delay
        self.critic_method = critic_method
        self.actor_method = actor_method
        self.clip_critic = GradClipper(_params(critic_optimizer), "norm", max_grad_norm, 1.0)
        self.clip_actor = GradClipper(_params(actor_optimizer), "norm", max_grad_norm, 1.0)
        self.updates = 0

    @classmethod
    def from_config(cls, loss_module: nn.Module, config) -> DelayedPolicyStepper:
        """Builds both optimizers from ``config``; options come from ``config.stepper_options``."""
        options = dict(config.stepper_options)
        loss: Any = loss_module  # a loss with critic_parameters() and actor_parameters()
        return cls(
            make_optimizer(loss.critic_parameters(), config),
            make_optimizer(loss.actor_parameters(), config),
            policy_delay=int(options.pop("policy_delay", 2)),
            critic_method=str(options.pop("critic_method", "loss_critic")),
            actor_method=str(options.pop("actor_method", "loss_actor")),
            max_grad_norm=config.max_grad_norm,
        )

    def step(self, train_module: nn.Module, batch: TensorDict) -> dict[str, torch.Tensor]:
        """One critic step, and one actor step when due; ``actor_updated`` says which."""
        critic_losses = train_module(batch, method=self.critic_method)
        self.critic_optimizer.zero_grad(set_to_none=True)
        total_loss(critic_losses).backward()
        metrics = detached(critic_losses)
        metrics["critic_grad_norm"] = self.clip_critic().detach()
        self.critic_optimizer.step()
        actor_due = self.updates % self.policy_delay == 0
        if actor_due:
            actor_losses = train_module(batch, method=self.actor_method)
            self.actor_optimizer.zero_grad(set_to_none=True)
            total_loss(actor_losses).backward()
            metrics.update(detached(actor_losses))
            metrics["actor_grad_norm"] = self.clip_actor().detach()
            self.actor_optimizer.step()
        metrics["actor_updated"] = torch.tensor(1.0 if actor_due else 0.0)
        self.updates += 1
        return metrics

    def state_dict(self) -> dict:
        """Both optimizers' state and the update counter."""
        return {
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.updates = int(state["updates"])


def _params(optimizer: torch.optim.Optimizer) -> list[nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]
