"""Per-family loss options, nested in :class:`learner.config.LearnerConfig`.

``learner.onpolicy`` holds what PPO, A2C and REINFORCE read (epochs and minibatches of the
lockstep loop, clipping, coefficients); ``learner.sac`` holds SAC's temperature and critics;
``learner.marl`` holds the multi-agent mixer (IQL, VDN, QMIX).
"""

from __future__ import annotations

import dataclasses


def _check(ok: bool, field: str, rule: str, value) -> None:
    if not ok:
        raise ValueError(f"{field}: {rule}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class OnPolicyOptions:
    """Options of the on-policy losses and of their learner rounds.

    Attributes:
        num_epochs: Passes over each collected batch (PPO; A2C and REINFORCE use 1).
        num_minibatches: Minibatches per pass; must divide the batch (and each minibatch must
            divide by ``world_size``: every rank trains on its part of every minibatch).
        clip_epsilon: PPO's ratio clip.
        clip_value_loss: PPO: clip the value update around the sampling-time value.
        value_clip_epsilon: PPO: range of the clipped value update.
        vf_coef: Weight of the value loss.
        ent_coef: Weight of the entropy bonus.
        normalize_advantage: Normalize advantages per minibatch.
        baseline: REINFORCE: train a value baseline and subtract it from the returns.
    """

    # Rounds
    num_epochs: int = 4
    num_minibatches: int = 4
    # Losses
    clip_epsilon: float = 0.2
    clip_value_loss: bool = False
    value_clip_epsilon: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    normalize_advantage: bool = True
    baseline: bool = True

    def __post_init__(self) -> None:
        _check(self.num_epochs >= 1, "num_epochs", "must be >= 1", self.num_epochs)
        _check(self.num_minibatches >= 1, "num_minibatches", "must be >= 1", self.num_minibatches)
        _check(self.clip_epsilon > 0, "clip_epsilon", "must be > 0", self.clip_epsilon)
        _check(
            self.value_clip_epsilon > 0,
            "value_clip_epsilon",
            "must be > 0",
            self.value_clip_epsilon,
        )
        _check(self.vf_coef >= 0, "vf_coef", "must be >= 0", self.vf_coef)
        _check(self.ent_coef >= 0, "ent_coef", "must be >= 0", self.ent_coef)


@dataclasses.dataclass(frozen=True)
class SACOptions:
    """SAC's temperature and critics.

    Attributes:
        init_alpha: Initial temperature.
        learn_alpha: Learn the temperature toward ``target_entropy``.
        target_entropy: Entropy target; None is ``-action_dim``.
        critic_hidden_sizes: Hidden widths of each Q-network (empty: ``learner.hidden_sizes``).
    """

    init_alpha: float = 1.0
    learn_alpha: bool = True
    target_entropy: float | None = None
    critic_hidden_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check(self.init_alpha > 0, "init_alpha", "must be > 0", self.init_alpha)
        _check(
            all(w >= 1 for w in self.critic_hidden_sizes),
            "critic_hidden_sizes",
            "must be positive widths",
            self.critic_hidden_sizes,
        )


MIXERS = ("none", "vdn", "qmix")


@dataclasses.dataclass(frozen=True)
class MultiAgentOptions:
    """The multi-agent Q-learning mixer and agent inputs (``loss: marl``).

    Attributes:
        mixer: ``none`` (independent Q-learners, IQL), ``vdn`` (sum of agent values) or
            ``qmix`` (monotonic hypernetwork mixer on the global state); set by the
            ``algorithm`` (iql, vdn, qmix).
        mixing_embed_dim: QMIX mixing layer width.
        hypernet_hidden: Hidden width of QMIX's weight hypernetworks (0: one linear layer).
        prev_action: Agents also see the one-hot of their previous action.
    """

    mixer: str = "qmix"
    mixing_embed_dim: int = 32
    hypernet_hidden: int = 64
    prev_action: bool = False

    def __post_init__(self) -> None:
        _check(self.mixer in MIXERS, "mixer", f"must be one of {MIXERS}", self.mixer)
        _check(
            self.mixing_embed_dim >= 1, "mixing_embed_dim", "must be >= 1", self.mixing_embed_dim
        )
        _check(self.hypernet_hidden >= 0, "hypernet_hidden", "must be >= 0", self.hypernet_hidden)
