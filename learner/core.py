"""The pure learner core: model, loss, optimizer, stepper, target updates and version (no Ray)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from learner.config import LearnerConfig
from learner.loss import DQNLoss
from learner.stepper import DefaultStepper

FLOAT_KEYS = ("observation", "next_observation", "reward")


class LearnerCore:
    """One rank's training state.

    ``train_module`` is what the stepper calls; a rank replaces it with a DDP wrapper of
    ``loss_module`` so gradients are averaged over ranks. ``version`` counts optimizer steps in
    this lineage.

    Args:
        model_spec: Builds the Q-network (anything with a ``build() -> nn.Module`` method).
        config: The learner configuration.
        device: Torch device of the model.

    Examples:
        >>> core = LearnerCore(ModelSpec(4, 2), LearnerConfig())  # doctest: +SKIP
        >>> metrics = core.train([core.to_batch(arrays)])  # doctest: +SKIP
    """

    def __init__(self, model_spec, config: LearnerConfig, device: str | torch.device = "cpu"):
        self.config = config
        self.device = torch.device(device)
        self.value_network: nn.Module = model_spec.build().to(self.device)
        self.loss_module = DQNLoss(
            self.value_network, gamma=config.gamma, double_dqn=config.double_dqn
        ).to(self.device)
        self.train_module: nn.Module = self.loss_module
        params = [p for p in self.loss_module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(params, lr=config.lr)
        self.stepper = DefaultStepper(self.optimizer, params, config.max_grad_norm)
        self.version = 0

    def to_batch(self, arrays: Mapping[str, np.ndarray]) -> TensorDict:
        """Converts sampled arrays to a TensorDict on the model's device."""
        tensors = {}
        for key, value in arrays.items():
            tensor = torch.as_tensor(np.asarray(value))
            if key in FLOAT_KEYS:
                tensor = tensor.float()
            tensors[key] = tensor
        n = len(next(iter(tensors.values())))
        return TensorDict(tensors, batch_size=[n]).to(self.device)

    def train(self, batches: Sequence[TensorDict]) -> dict[str, torch.Tensor]:
        """Runs one optimizer step per batch; returns metrics averaged over the steps."""
        totals: dict[str, torch.Tensor] = {}
        for batch in batches:
            metrics = self.stepper.step(self.train_module, batch)
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            self.version += 1
            if self.version % self.config.target_update_interval == 0:
                self.loss_module.update_target(self.config.target_update_tau)
        return {k: v / max(len(batches), 1) for k, v in totals.items()}

    def weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights: CPU, detached copies."""
        return {k: v.detach().cpu().clone() for k, v in self.value_network.state_dict().items()}
