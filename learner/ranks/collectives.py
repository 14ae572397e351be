"""The collectives a rank's round ends with: metrics averaged, maxima and sums over the ranks."""

from __future__ import annotations

import torch
import torch.distributed as dist


def allreduce_mean(metrics: dict[str, torch.Tensor], world_size: int) -> dict[str, float]:
    """Each scalar metric averaged over the ``world_size`` ranks (every rank gets the same)."""
    if not metrics:
        return {}
    keys = sorted(metrics)
    stacked = torch.stack([metrics[k].float() for k in keys])
    if world_size > 1:
        dist.all_reduce(stacked)
        stacked /= world_size
    return dict(zip(keys, stacked.cpu().tolist(), strict=True))


def allreduce(
    values: dict[str, float], op: str, world_size: int, device: torch.device | str
) -> dict[str, float]:
    """``{key_max: ...}`` (``op="max"``) or ``{key: sum}`` (``op="sum"``) over the ranks."""
    keys = sorted(values)
    stacked = torch.tensor([float(values[k]) for k in keys], device=device)
    if world_size > 1:
        dist.all_reduce(stacked, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    suffix = "_max" if op == "max" else ""
    return {f"{k}{suffix}": v for k, v in zip(keys, stacked.tolist(), strict=True)}


def allreduce_counts(counts, world_size: int, device: torch.device | str) -> tuple[int, ...]:
    """Integer counts (e.g. chunks per policy lag) summed over the ranks."""
    total = torch.as_tensor(counts, dtype=torch.float64, device=device)
    if world_size > 1:
        dist.all_reduce(total)
    return tuple(int(n) for n in total.round().long().cpu().tolist())
