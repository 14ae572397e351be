"""The mixed-precision stepper: autocast, fp16 loss scaling, gradient accumulation, skip guard."""

from __future__ import annotations

import contextlib
import logging

import torch
from tensordict import TensorDict
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from learner.stepper import (
    DefaultStepper,
    detached,
    make_optimizer,
    make_scheduler,
    total_loss,
    trainable,
)

logger = logging.getLogger(__name__)

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class MixedPrecisionStepper(DefaultStepper):
    """One optimizer step over ``grad_accumulation`` micro-batches under autocast.

    * The forward runs under ``torch.autocast`` in bf16 or fp16 (fp32: no autocast); losses are
      summed in fp32.
    * fp16 scales the loss with a ``GradScaler`` (bf16 has fp32's range and needs none).
    * The batch is split into ``grad_accumulation`` equal micro-batches; each micro-loss is
      divided by their number, so the step equals one step on the whole batch. Under DDP the
      gradients are all-reduced once, on the last micro-batch (``no_sync`` before).
    * A non-finite loss poisons the gradients (its scale becomes NaN), and non-finite gradients
      skip the optimizer and scheduler steps; ``nonfinite_skipped`` reports it per step and
      :attr:`skipped_steps` counts it. Gradients are all-reduced before the check, so all ranks
      skip together.

    Args:
        optimizer: The optimizer over the trainable parameters.

    Keyword Args:
        precision: ``fp32``, ``bf16`` or ``fp16``.
        grad_accumulation: Micro-batches per optimizer step.
        device_type: ``cpu`` or ``cuda`` (autocast and scaler device).
        **kwargs: Clipping and scheduler options of :class:`DefaultStepper`.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        precision: str = "bf16",
        grad_accumulation: int = 1,
        device_type: str = "cpu",
        **kwargs,
    ) -> None:
        super().__init__(optimizer, **kwargs)
        if precision not in DTYPES:
            raise ValueError(f"precision: must be one of {tuple(DTYPES)}, got {precision!r}")
        self.precision = precision
        self.dtype = DTYPES[precision]
        self.grad_accumulation = grad_accumulation
        self.device_type = device_type
        self.scaler = torch.amp.GradScaler(device_type) if precision == "fp16" else None
        self.skipped_steps = 0

    @classmethod
    def from_config(cls, loss_module: nn.Module, config) -> MixedPrecisionStepper:
        """Builds the stepper from ``config`` on the loss module's device."""
        params = trainable(loss_module)
        optimizer = make_optimizer(params, config)
        return cls(
            optimizer,
            precision=config.precision,
            grad_accumulation=config.grad_accumulation,
            device_type=params[0].device.type,
            grad_clip=config.grad_clip,
            max_grad_norm=config.max_grad_norm,
            max_grad_value=config.max_grad_value,
            scheduler=make_scheduler(optimizer, config),
        )

    def _autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    @staticmethod
    def _sync(train_module: nn.Module, last: bool):
        if last or not isinstance(train_module, DistributedDataParallel):
            return contextlib.nullcontext()
        return train_module.no_sync()

    def step(self, train_module: nn.Module, batch: TensorDict) -> dict[str, torch.Tensor]:
        """Runs one (possibly skipped) optimizer step over the micro-batches of ``batch``."""
        k = self.grad_accumulation
        if len(batch) % k:
            raise ValueError(f"batch of {len(batch)} items cannot be split into {k} micro-batches")
        micro_batches = batch.split(len(batch) // k) if k > 1 else (batch,)
        self.optimizer.zero_grad(set_to_none=True)
        outputs = []
        for i, micro_batch in enumerate(micro_batches):
            with self._sync(train_module, last=i == k - 1):
                with self._autocast():
                    losses = train_module(micro_batch)
                loss = total_loss(losses).float()
                # NaN scale on a non-finite loss: its gradients become NaN on every rank.
                loss = loss * torch.where(torch.isfinite(loss), 1.0 / k, float("nan"))
                (loss if self.scaler is None else self.scaler.scale(loss)).backward()
            outputs.append(detached(losses))
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = self.clip()
        finite = bool(torch.isfinite(grad_norm))
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skips by itself on non-finite gradients
            self.scaler.update()
        elif finite:
            self.optimizer.step()
        if not finite:
            self.skipped_steps += 1
            logger.warning("non-finite loss or gradient: optimizer step skipped")
        metrics = merge_micro_batches(outputs)
        metrics["nonfinite_skipped"] = torch.tensor(0.0 if finite else 1.0)
        if self.scaler is not None:
            metrics["loss_scale"] = torch.tensor(float(self.scaler.get_scale()))
        return self._metrics(metrics, grad_norm, stepped=finite)

    def state_dict(self) -> dict:
        """Optimizer, scheduler, scaler state and the skip counter."""
        state = super().state_dict()
        state["scaler"] = None if self.scaler is None else self.scaler.state_dict()
        state["skipped_steps"] = self.skipped_steps
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        super().load_state_dict(state)
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state.get("skipped_steps", 0))


def merge_micro_batches(outputs: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Averages 0-d entries and concatenates per-item entries over micro-batches."""
    if len(outputs) == 1:
        return outputs[0]
    merged = {}
    for key, first in outputs[0].items():
        values = [out[key] for out in outputs]
        if first.ndim == 0:
            merged[key] = torch.stack(values).float().mean()
        else:
            merged[key] = torch.cat(values)
    return merged
