"""The pure learner core: policy, loss, stepper, target updates, version and state (no Ray)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from collector.envs.spaces import regroup
from learner.compilation import compile_policy
from learner.config import LearnerConfig
from learner.loss import LossDispatch
from learner.losses import LossFactory, loss_factory_for
from learner.plugins import STEPPERS, resolve_factory
from learner.stepper import Stepper
from replay.sequence_frames import FRAMES_COLUMN, rebuild_stacks

FLOAT_KEYS = ("observation", "next_observation", "reward")
STATE_FORMAT = 1

StepperFactory = Callable[[nn.Module, LearnerConfig], Stepper]


def stepper_factory_for(config: LearnerConfig) -> StepperFactory:
    """The factory named by ``config.stepper`` (``auto`` resolved; paths imported).

    Raises:
        ValueError: If a factory path cannot be resolved.
    """
    name = config.resolved_stepper
    if name in STEPPERS:
        return resolve_factory(STEPPERS[name].factory, "stepper")
    return resolve_factory(name, "stepper")


class LearnerCore:
    """One rank's training state.

    ``train_module`` is what the stepper calls (a :class:`LossDispatch` over ``loss_module``);
    a rank replaces it with a DDP wrapper so gradients are averaged over ranks. With
    ``config.compile``, ``policy_network`` is compiled in place (``compiled`` is True; the
    ``state_dict`` is unchanged, see :mod:`learner.compilation`). ``version``
    counts optimizer steps in this lineage (a step skipped by the non-finite guard counts too:
    versions follow the steps the driver asked for).

    Args:
        model_spec: Builds the policy network published to collectors (``build() -> nn.Module``).
        config: The learner configuration.
        device: Torch device of the model.

    Keyword Args:
        loss_factory: ``factory(policy_network, config) -> loss module``; default from
            ``config.loss``.
        stepper_factory: ``factory(loss_module, config) -> Stepper``; default from
            ``config.stepper``.

    Examples:
        >>> core = LearnerCore(ModelSpec(4, 2), LearnerConfig())  # doctest: +SKIP
        >>> metrics = core.train([core.to_batch(arrays)])  # doctest: +SKIP
        >>> torch.save(core.state_dict(), path)  # loads with weights_only=True  # doctest: +SKIP
    """

    def __init__(
        self,
        model_spec,
        config: LearnerConfig,
        device: str | torch.device = "cpu",
        *,
        loss_factory: LossFactory | None = None,
        stepper_factory: StepperFactory | None = None,
    ) -> None:
        self.config = config
        self.device = torch.device(device)
        self.policy_network: nn.Module = model_spec.build().to(self.device)
        make_loss = loss_factory or loss_factory_for(config)
        self.loss_module: nn.Module = make_loss(self.policy_network, config).to(self.device)
        self.train_module: nn.Module = LossDispatch(self.loss_module)
        make_stepper = stepper_factory or stepper_factory_for(config)
        self.stepper: Stepper = make_stepper(self.loss_module, config)
        # After the loss is built, so its target copies stay plain modules.
        self.compiled = compile_policy(self.policy_network, config)
        self.version = 0
        self._priorities: list[tuple[torch.Tensor, ...]] = []

    def to_batch(self, arrays: Mapping[str, np.ndarray]) -> TensorDict:
        """Converts sampled arrays to a TensorDict on the model's device.

        Sequences that store each pixel frame once (``observation_frames``,
        ``replay.sequence_frames``) get their ``observation`` stacks rebuilt on the device,
        so the copy to it carries the compact frames.
        """
        tensors = {}
        for key, value in arrays.items():
            value = np.asarray(value)
            if not value.flags.writeable:  # arrays straight from the object store are read-only
                value = value.copy()
            tensor = torch.as_tensor(value)
            # uint8 pixels stay bytes until the network scales them on its device (4x less
            # to copy to a GPU); other observations become float here.
            if key in FLOAT_KEYS and tensor.dtype != torch.uint8:
                tensor = tensor.float()
            tensors[key] = tensor
        n = len(next(iter(tensors.values())))
        # A structured observation's columns (observation.<key>) nest under observation: the
        # network takes a mapping of tensors, each in its stored dtype (collector.envs.spaces).
        batch = TensorDict(regroup(tensors), batch_size=[n]).to(self.device)
        if FRAMES_COLUMN in tensors:
            batch["observation"] = rebuild_stacks(batch.pop(FRAMES_COLUMN), batch["valid"])
        return batch

    def train(self, batches: Sequence[TensorDict]) -> dict[str, torch.Tensor]:
        """Runs one optimizer step per batch; returns 0-d metrics averaged over the steps.

        A metric that only some steps report (a delayed actor loss) is averaged over those.
        With ``config.update_priorities``, the per-item ``priority_key`` output of each step is
        kept with the batch's ``shard``, ``index`` and ``insertion_id`` for
        :meth:`take_priorities`.
        """
        config = self.config
        sums: dict[str, list[torch.Tensor]] = {}
        for batch in batches:
            metrics = self.stepper.step(self.train_module, batch)
            self.version += 1
            if self.version % config.target_update_interval == 0:
                update_target = getattr(self.loss_module, "update_target", None)
                if update_target is not None:
                    update_target(config.target_update_tau)
            for key, value in metrics.items():
                if value.ndim == 0:
                    sums.setdefault(key, []).append(value)
            if config.update_priorities:
                self._keep_priorities(batch, metrics.get(config.priority_key))
        return {k: torch.stack(v).float().mean() for k, v in sums.items()}

    def _keep_priorities(self, batch: TensorDict, values: torch.Tensor | None) -> None:
        keys = batch.keys()  # TensorDict refuses `key in td`
        if values is None or "insertion_id" not in keys or values.shape != (len(batch),):
            return
        shard = batch["shard"] if "shard" in keys else torch.zeros_like(batch["index"])
        self._priorities.append(
            (shard, batch["index"], batch["insertion_id"], values.abs().float())
        )

    def take_priorities(self) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
        """Keys and priorities of the items trained on since the last call, or None.

        Returns:
            ``({"shard", "index", "insertion_id"}, priority)``: the arguments of
            ``ReplayClient.update_priorities``. An item drawn twice keeps its latest priority
            last.
        """
        if not self._priorities:
            return None
        kept, self._priorities = self._priorities, []
        shard, index, insertion_id, priority = (
            torch.cat(parts).cpu().numpy() for parts in zip(*kept, strict=True)
        )
        return {"shard": shard, "index": index, "insertion_id": insertion_id}, priority

    def weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights: CPU, detached copies."""
        return {k: v.detach().cpu().clone() for k, v in self.policy_network.state_dict().items()}

    def state_dict(self) -> dict:
        """Model (loss module: policy, other networks, target), stepper, version and RNG.

        Tensors and plain values only: ``torch.save`` it and ``torch.load(weights_only=True)``.
        """
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {
            "format": STATE_FORMAT,
            "version": self.version,
            "loss": {k: v.detach().cpu().clone() for k, v in self.loss_module.state_dict().items()},
            "stepper": self.stepper.state_dict(),
            "rng": rng,
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restores :meth:`state_dict` (parameters are copied in place, so DDP keeps working).

        Raises:
            ValueError: If the state has another format.
        """
        if state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"learner state format {state.get('format')!r} is not {STATE_FORMAT}; "
                "it was written by another relayrl version"
            )
        self.loss_module.load_state_dict(state["loss"])
        self.stepper.load_state_dict(state["stepper"])
        self.version = int(state["version"])
        torch.set_rng_state(state["rng"]["torch"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        self._priorities = []
