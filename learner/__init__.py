"""The DDP learner group.

Layout:
    * ``config``: :class:`LearnerConfig` (scaling, placement, learning rule), validated on
      construction.
    * ``loss``: :class:`DQNLoss`, a TorchRL-style loss module (TensorDict in, ``loss_*`` out):
      double DQN, Huber, target network updated hard or soft by the ranks.
    * ``stepper``: :class:`DefaultStepper`: summed losses, backward, clip by norm, step.
    * ``core``: :class:`LearnerCore`, the pure training state of one rank; ``version`` counts
      optimizer steps in the lineage.
    * ``rank``: the ``LearnerRank`` actor: joins the process group (rank 0 opens a TCPStore on
      an OS-chosen port; loopback when every rank is on one node), wraps the loss in DDP, samples
      ``global_batch_size / world_size`` per step (one replay request per round), averages
      metrics over ranks, and on rank 0 publishes weights (``ray.put`` once per publication).
    * ``group``: :class:`LearnerGroup`: one placement group of ``world_size`` bundles, a
      generation per construction, sequential rounds verified by :func:`verify_receipts`.
    * ``receipts``: :class:`StepReceipt` and :class:`PublishedWeights`.

Equivalence: DDP averages gradients, so ``world_size`` ranks on ``B / world_size`` items each
take the same step as one rank on ``B`` items (the losses are means).
"""

from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.group import LearnerGroup, PendingRound
from learner.loss import DQNLoss
from learner.rank import LearnerRank
from learner.receipts import ProtocolError, PublishedWeights, StepReceipt, verify_receipts
from learner.stepper import DefaultStepper, total_loss

__all__ = [
    "DQNLoss",
    "DefaultStepper",
    "LearnerConfig",
    "LearnerCore",
    "LearnerGroup",
    "LearnerRank",
    "PendingRound",
    "ProtocolError",
    "PublishedWeights",
    "StepReceipt",
    "total_loss",
    "verify_receipts",
]
