"""The DDP learner group.

Layout:
    * ``config``: :class:`LearnerConfig` (scaling, placement, sampling, loss, stepper, target
      network), validated on construction.
    * ``loss``: :class:`DQNLoss`, a TorchRL-style loss module (TensorDict in, ``loss_*`` out):
      double DQN, Huber, per-item ``td_error``; ``LearnerConfig.loss`` names it or a user
      ``"module:factory"``; :class:`LossDispatch` routes named loss methods through DDP.
    * ``stepper``: the :class:`Stepper` protocol and :class:`DefaultStepper` (clip by norm or
      value, ``grad_norm``, optional LR scheduler); ``precision``: :class:`MixedPrecisionStepper`
      (bf16/fp16 autocast, fp16 GradScaler, gradient accumulation, non-finite guard);
      ``delayed``: :class:`DelayedPolicyStepper` (TD3-style delayed actor updates, the example
      of a user stepper).
    * ``core``: :class:`LearnerCore`, the pure training state of one rank; ``version`` counts
      optimizer steps in the lineage; ``state_dict`` is tensors and plain values.
    * ``sampling``: :class:`RankSampler`, per-rank sampling with one round of prefetch.
    * ``rendezvous``: rank 0's store on a free port, retried on collision.
    * ``placement``: one placement group of ``world_size`` bundles (``resources_per_rank``,
      ``placement_strategy``) and the named rank actors.
    * ``plugins``: resolution of ``"module:factory"`` paths (user losses and steppers).
    * ``weights``: tensor schema of published weights, checked against the collectors' policy.
    * ``rank``: the ``LearnerRank`` actor: joins the process group (gloo, or nccl with a GPU
      per rank), wraps the loss in DDP when ``world_size > 1``, samples
      ``global_batch_size / world_size`` per step, averages metrics over ranks, and on rank 0
      publishes weights (``ray.put`` once per publication).
    * ``group``: :class:`LearnerGroup`: one placement group of ``world_size`` bundles, a
      generation per construction, sequential rounds verified by :func:`verify_receipts`,
      ``state_dicts``/``load_state_dicts``.
    * ``receipts``: :class:`StepReceipt`, :class:`PublishedWeights` and the protocol errors.
    * ``bench``: ``python -m learner.bench``; ``gpu_check``: ``python -m learner.gpu_check``
      (GPU paths, run on a GPU machine).

Equivalence: DDP averages gradients, so ``world_size`` ranks on ``B / world_size`` items each
take the same step as one rank on ``B`` items (the losses are means).

Versions: a step skipped by the non-finite guard still counts as a step (the version follows
the steps the driver asked for); ``nonfinite_skipped`` in the metrics says it was skipped.

Driver usage (generations and checkpoints)::

    group = LearnerGroup(run, config, spec, shards, seed, generation=g)
    published = group.publish()                     # version 0, schema checked
    pending = group.start_round(k)                  # one round in flight at most
    receipt = group.finish_round(pending)           # ProtocolError: generation g failed
    states = group.state_dicts()                    # no round in flight; one dict per rank
    torch.save(states[r], path_r)                   # tensors + plain values
    states = [torch.load(p, weights_only=True) for p in paths]
    group.shutdown()
    group = LearnerGroup(run, config, spec, shards, seed, generation=g + 1)
    version = group.load_state_dicts(states)        # ValueError on another world size
    published = group.publish()                     # newer key (g + 1, version): force it out

Prioritized replay: with ``update_priorities``, each rank hands ``(shard, index, |td_error|)``
of a round's items to ``ReplayClient.update_priorities(shard, index, priority)`` (numpy arrays,
fire and forget) when the client has it.
"""

from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.delayed import DelayedPolicyStepper
from learner.group import LearnerGroup, PendingRound
from learner.loss import DQNLoss, LossDispatch
from learner.precision import MixedPrecisionStepper
from learner.rank import LearnerRank
from learner.receipts import (
    ProtocolError,
    PublishedWeights,
    StaleGenerationError,
    StepReceipt,
    verify_receipts,
)
from learner.sampling import RankSampler
from learner.stepper import DefaultStepper, Stepper, total_loss
from learner.weights import WeightSchemaError, check_schema, tensor_schema

__all__ = [
    "DQNLoss",
    "DefaultStepper",
    "DelayedPolicyStepper",
    "LearnerConfig",
    "LearnerCore",
    "LearnerGroup",
    "LearnerRank",
    "LossDispatch",
    "MixedPrecisionStepper",
    "PendingRound",
    "ProtocolError",
    "PublishedWeights",
    "RankSampler",
    "StaleGenerationError",
    "StepReceipt",
    "Stepper",
    "WeightSchemaError",
    "check_schema",
    "tensor_schema",
    "total_loss",
    "verify_receipts",
]
