"""TorchRL losses without glue: ``learner.loss: torchrl:DQNLoss`` (and ``torchrl:ClipPPOLoss``).

``torchrl:<Class>`` names a class of ``torchrl.objectives`` (the optional ``torchrl`` extra,
``pip install "relayrl[torchrl]"``). :class:`TorchRLLoss` builds it around the run's policy
network and makes it a relayrl loss:

* the network is wrapped in TorchRL's ``QValueActor`` (``in_keys=["observation"]``, integer
  actions: ``action_space="categorical"``) and the class is built as
  ``Class(value_network=actor, action_space="categorical", **learner.loss_options)``; its value
  estimator gets ``learner.gamma`` (``make_value_estimator(gamma=...)``);
* each sampled batch is mapped to TorchRL's nested layout::

      observation, action                 -> observation, action
      next_observation                    -> ("next", "observation")
      reward, terminated, truncated [B]   -> ("next", "reward"|"terminated"|"truncated") [B, 1]
      terminated | truncated              -> ("next", "done") [B, 1]
      weight (prioritized replay)         -> priority_weight

* the loss's output keeps its ``loss_*`` terms (a bare ``loss``, as DQNLoss returns, becomes
  ``loss_q``), and TorchRL's per-item priority (the squared TD error it writes to the batch's
  ``td_error``) comes back as ``td_error = sqrt(...)`` = ``|target - Q|`` for prioritized
  replay, as relayrl's own DQN loss reports it;
* target networks are TorchRL's: :meth:`TorchRLLoss.update_target` steps a ``SoftUpdate``
  (``learner.target_update_tau`` < 1) or ``HardUpdate`` (``tau`` = 1), every
  ``learner.target_update_interval`` optimizer steps, as for the built-in losses.

TorchRL's one-step estimators discount with a single ``gamma``, so runs with a TorchRL loss
collect one-step transitions (``collector.n_step: 1``, checked with the config). Classes that
take a Q-network (``value_network``: ``DQNLoss``) train ``algorithm: dqn``; ``ClipPPOLoss``
trains ``algorithm: ppo`` around relayrl's actor-critic (``learner.losses.torchrl_ppo``);
:func:`torchrl_algorithm` says which, and a run whose ``algorithm`` differs is refused naming
``learner.loss`` (``services.config.checks.check``). Other actor-critic classes (``SACLoss``,
``KLPENPPOLoss``) need modules or stored data relayrl does not provide and are refused, naming
``learner.loss``.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from collector.networks.q_mlp import ModelSpec
    >>> from learner.config import LearnerConfig
    >>> config = LearnerConfig(loss="torchrl:DQNLoss", loss_options={"double_dqn": True})
    >>> loss = torchrl_loss(ModelSpec(obs_dim=4, num_actions=2).build(), config)
    >>> batch = TensorDict(
    ...     {
    ...         "observation": torch.randn(8, 4),
    ...         "action": torch.randint(0, 2, (8,)),
    ...         "reward": torch.ones(8),
    ...         "next_observation": torch.randn(8, 4),
    ...         "terminated": torch.zeros(8, dtype=torch.bool),
    ...         "truncated": torch.zeros(8, dtype=torch.bool),
    ...         "n_step_discount": torch.full((8,), 0.99),
    ...     },
    ...     batch_size=[8],
    ... )
    >>> sorted(loss(batch).keys())
    ['loss_q', 'td_error']
"""

from __future__ import annotations

import inspect

import torch
from tensordict import TensorDict
from torch import nn

from learner.algorithms import named_torchrl_classes, torchrl_factory
from learner.plugins import resolve_factory

PREFIX = "torchrl:"
INSTALL = 'pip install "relayrl[torchrl]"'


def is_torchrl_loss(name: str) -> bool:
    """Whether ``learner.loss`` names a TorchRL class (``torchrl:DQNLoss``)."""
    return name.startswith(PREFIX)


def torchrl_algorithm(name: str) -> str | None:
    """The algorithm a ``torchrl:<Class>`` loss trains (None: none).

    From the registrations' ``torchrl_losses``: a class one names, else the one taking any
    class with a ``value_network``.
    """
    found = torchrl_factory(name[len(PREFIX) :])
    return None if found is None else found[0]


def check_torchrl_loss(name: str) -> None:
    """Refuses a ``torchrl:<Class>`` that cannot be built, before any actor starts.

    Raises:
        ValueError: ``"loss: ..."`` naming the missing extra, an unknown class, or a class
            that neither takes a Q-network nor is ``ClipPPOLoss``.
    """
    try:
        import torchrl  # noqa: F401
    except ImportError:
        raise ValueError(f"loss: {name} needs TorchRL, which is not installed: {INSTALL}") from None
    loss_class(name)


def loss_class(name: str) -> type:
    """The ``torchrl.objectives`` class named by ``torchrl:<Class>``.

    Raises:
        ValueError: If it is not ``ClipPPOLoss`` or a ``LossModule`` class taking
            ``value_network``.
    """
    from torchrl import objectives

    class_name = name[len(PREFIX) :]
    cls = getattr(objectives, class_name, None)
    if not (inspect.isclass(cls) and issubclass(cls, objectives.LossModule)):
        raise ValueError(f"loss: {name}: torchrl.objectives has no loss class {class_name!r}")
    named = named_torchrl_classes()
    if class_name in named:
        return cls
    parameters = inspect.signature(cls).parameters
    required = {
        n
        for n, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    if "value_network" not in parameters or not required <= {"value_network"}:
        raise ValueError(
            f"loss: {name}: relayrl builds TorchRL losses around its Q-network "
            "(classes taking value_network, e.g. torchrl:DQNLoss) or its actor-critic "
            f"({', '.join(PREFIX + c for c in named)}); use relayrl's own loss "
            "for other algorithms"
        )
    return cls


# Built by relayrl around its networks; not options.
_MODULE_ARGUMENTS = {"value_network", "actor_network", "critic_network", "actor", "critic"}


def check_torchrl_options(name: str, options: dict) -> None:
    """Refuses ``learner.loss_options`` the class does not take, before any actor starts.

    TorchRL's PPO losses take ``**kwargs`` and would ignore a misspelled option silently, so the
    names are checked against the keyword arguments of the class and its bases' constructors.

    Raises:
        ValueError: ``"learner.loss_options: ..."`` naming the unknown options.
    """
    accepted: set[str] = set()
    for klass in loss_class(name).__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameters = inspect.signature(init).parameters.values()
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        accepted |= {p.name for p in parameters if p.kind in kinds and p.name != "self"}
        if all(p.kind != inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    accepted -= _MODULE_ARGUMENTS
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(
            f"learner.loss_options: {name} takes no option {', '.join(map(repr, unknown))} "
            f"(relayrl builds its networks; it takes {', '.join(sorted(accepted))}), "
            f"got {options}"
        )


class TorchRLLoss(nn.Module):
    """A ``torchrl.objectives`` value loss driven by relayrl's learner (see the module doc).

    Args:
        policy_network: The Q-network published to collectors (``[B, obs] -> [B, actions]``).
        name: ``torchrl:<Class>``.
        gamma: Discount of TorchRL's value estimator.
        options: Keyword arguments of the class (``learner.loss_options``).
    """

    def __init__(
        self,
        policy_network: nn.Module,
        name: str,
        *,
        gamma: float,
        options: dict,
        tau: float = 1.0,
    ):
        super().__init__()
        from torchrl.modules import QValueActor

        cls = loss_class(name)
        actor = QValueActor(policy_network, in_keys=["observation"], action_space="categorical")
        kwargs = dict(options)
        if "action_space" in inspect.signature(cls).parameters:
            kwargs.setdefault("action_space", "categorical")
        self.loss = cls(value_network=actor, **kwargs)
        self.loss.make_value_estimator(gamma=gamma)
        self.name = name
        self.tau = tau
        # TorchRL binds the updater to the loss before the first forward; building one also
        # copies the online weights into the target, so there is one, built here.
        self._updater = self._make_updater(tau)

    def _make_updater(self, tau: float):
        from torchrl.objectives import HardUpdate, SoftUpdate

        if tau >= 1.0:
            # relayrl calls it every learner.target_update_interval steps; HardUpdate copies
            # when its counter equals the interval, so interval 0 copies on every call.
            return HardUpdate(self.loss, value_network_update_interval=0)
        return SoftUpdate(self.loss, tau=tau)

    @staticmethod
    def to_torchrl(batch: TensorDict) -> TensorDict:
        """Maps a relayrl batch to TorchRL's nested layout (see the module docstring)."""
        terminated = batch["terminated"].bool().unsqueeze(-1)
        truncated = batch.get("truncated", torch.zeros_like(batch["terminated"])).bool()
        truncated = truncated.unsqueeze(-1)
        data = {
            "observation": batch["observation"],
            "action": batch["action"].long(),
            "next": {
                "observation": batch["next_observation"],
                "reward": batch["reward"].float().unsqueeze(-1),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            },
        }
        weight = batch.get("weight", None)
        if weight is not None:
            data["priority_weight"] = weight.float()
        return TensorDict(data, batch_size=batch.batch_size, device=batch.device)

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns the class's ``loss_*`` terms (``loss`` as ``loss_q``) and ``td_error``."""
        td = self.to_torchrl(batch)
        out = self.loss(td)
        result = {("loss_q" if key == "loss" else key): value for key, value in out.items()}
        priority = td.get("td_error", None)
        if priority is not None:
            result["td_error"] = priority.detach().reshape(batch.batch_size).clamp_min(0).sqrt()
        return TensorDict(result, batch_size=[])

    @torch.no_grad()
    def update_target(self, tau: float = 1.0) -> None:
        """Steps TorchRL's target updater: ``SoftUpdate(tau)``, or ``HardUpdate`` at ``tau=1``.

        Raises:
            ValueError: If ``tau`` is not the one the loss was built with.
        """
        if tau != self.tau:
            raise ValueError(f"target_update_tau: the loss was built with {self.tau}, got {tau}")
        self._updater.step()


def torchrl_loss(policy_network: nn.Module, config) -> nn.Module:
    """The ``learner.loss: torchrl:<Class>`` factory.

    Returns:
        A :class:`TorchRLLoss` around the Q-network, or what the factory a registration names
        for the class builds (e.g. ``ClipPPOLoss``'s: ``learner.algorithms``).
    """
    found = torchrl_factory(config.loss[len(PREFIX) :])
    if found is not None and found[1] != f"{__name__}:torchrl_loss":
        return resolve_factory(found[1], "loss")(policy_network, config)
    return TorchRLLoss(
        policy_network,
        config.loss,
        gamma=config.gamma,
        options=dict(config.loss_options),
        tau=config.target_update_tau,
    )
