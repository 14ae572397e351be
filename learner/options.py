"""Options the on-policy losses share, nested in :class:`learner.config.LearnerConfig`.

``learner.onpolicy`` holds what the lockstep on-policy registrations read (epochs and
minibatches of the lockstep loop, clipping, coefficients); ``learner.vtrace`` what the V-trace
registrations of the asynchronous loop read. Options of one algorithm live in its registration
(``learner.algorithms``), which names the ``learner.<section>`` it adds.
"""

from __future__ import annotations

import dataclasses


def check_field(ok: bool, field: str, rule: str, value) -> None:
    """Raises ``ValueError("<field>: <rule>, got <value>")`` unless ``ok`` (options' refusals)."""
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
        bptt_length: With ``learner.recurrent``: steps per stored sequence, the horizon of
            truncated backpropagation through time (``collector.sequences``); must divide the
            rollout's steps per env; 0: the rollout's whole length per env. Minibatches are
            then whole sequences (``num_minibatches`` must divide their number).
    """

    # Rounds
    num_epochs: int = 4
    num_minibatches: int = 4
    bptt_length: int = 0
    # Losses
    clip_epsilon: float = 0.2
    clip_value_loss: bool = False
    value_clip_epsilon: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    normalize_advantage: bool = True
    baseline: bool = True

    def __post_init__(self) -> None:
        check_field(self.num_epochs >= 1, "num_epochs", "must be >= 1", self.num_epochs)
        check_field(
            self.num_minibatches >= 1, "num_minibatches", "must be >= 1", self.num_minibatches
        )
        check_field(self.bptt_length >= 0, "bptt_length", "must be >= 0", self.bptt_length)
        check_field(self.clip_epsilon > 0, "clip_epsilon", "must be > 0", self.clip_epsilon)
        check_field(
            self.value_clip_epsilon > 0,
            "value_clip_epsilon",
            "must be > 0",
            self.value_clip_epsilon,
        )
        check_field(self.vf_coef >= 0, "vf_coef", "must be >= 0", self.vf_coef)
        check_field(self.ent_coef >= 0, "ent_coef", "must be >= 0", self.ent_coef)


MINIBATCH_UNITS = ("chunks", "steps")


@dataclasses.dataclass(frozen=True)
class VTraceOptions:
    """Options of the V-trace losses (IMPALA, APPO) and of their asynchronous rounds.

    Attributes:
        num_epochs: Passes over each batch taken from the learner queue (APPO's replay of a
            batch ``K`` times; 1: each batch is trained on once).
        num_minibatches: Minibatches per pass.
        vf_coef: Weight of the value loss.
        ent_coef: Weight of the entropy bonus.
        rho_bar: V-trace's truncation of the importance weights (rho bar).
        c_bar: V-trace's truncation of the trace coefficients (c bar).
        rho_bar_pg: Truncation of the policy-gradient importance weight.
        vtrace_lambda: V-trace's lambda (1: the paper's estimator).
        clip_epsilon: APPO's ratio clip.
        is_clip: APPO: upper clip of IMPACT's importance weight ``mu / pi_old``.
        queue_batches: Global batches the learner queue holds (written chunks not yet taken,
            plus those in flight); collection waits while it is full.
        max_round_batches: Global batches one round may take when the queue holds several (as
            IMPALA's learner takes what is queued): a round of ``k`` batches trains ``k x
            num_minibatches`` minibatches of the usual size per pass and publishes once, so a
            learner that fell behind catches up without a driver round trip per batch (1: one
            batch per round). At most ``queue_batches``.
        normalize_advantage: Standardize the policy-gradient advantages over each minibatch's
            valid steps (as PPO's ``learner.onpolicy.normalize_advantage``); with
            ``minibatch_unit: steps``, over the rank's whole batch once per pass.
        minibatch_unit: ``chunks``: each minibatch is whole chunks, V-trace recomputed on it
            at every optimizer step (IMPALA's and RLlib's). ``steps`` (APPO, feed-forward
            policies): V-trace over the whole batch with the critic and old policy of the
            pass's start (again only after the old policy's refresh), then minibatches of steps
            drawn across every chunk, as PPO draws its minibatches (``learner.losses.appo``).
    """

    num_epochs: int = 1
    num_minibatches: int = 1
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    rho_bar: float = 1.0
    c_bar: float = 1.0
    rho_bar_pg: float = 1.0
    vtrace_lambda: float = 1.0
    clip_epsilon: float = 0.2
    is_clip: float = 2.0
    queue_batches: int = 4
    max_round_batches: int = 1
    normalize_advantage: bool = False
    minibatch_unit: str = "chunks"

    def __post_init__(self) -> None:
        check_field(self.num_epochs >= 1, "num_epochs", "must be >= 1", self.num_epochs)
        unit = self.minibatch_unit
        rule = f"must be one of {MINIBATCH_UNITS}"
        check_field(unit in MINIBATCH_UNITS, "minibatch_unit", rule, unit)
        check_field(
            self.num_minibatches >= 1, "num_minibatches", "must be >= 1", self.num_minibatches
        )
        for name in ("vf_coef", "ent_coef"):
            check_field(getattr(self, name) >= 0, name, "must be >= 0", getattr(self, name))
        for name in ("rho_bar", "c_bar", "rho_bar_pg", "clip_epsilon", "is_clip"):
            check_field(getattr(self, name) > 0, name, "must be > 0", getattr(self, name))
        check_field(self.queue_batches >= 1, "queue_batches", "must be >= 1", self.queue_batches)
        rounds = self.max_round_batches
        check_field(
            1 <= rounds <= self.queue_batches,
            "max_round_batches",
            f"must be in [1, queue_batches={self.queue_batches}]",
            rounds,
        )
        lam = self.vtrace_lambda
        check_field(0 <= lam <= 1, "vtrace_lambda", "must be in [0, 1]", lam)
