"""GPU checks of the learner: ``python -m learner.gpu.check`` on a machine with CUDA.

The CPU test suite cannot reach the GPU paths (``cuda:0`` per rank, nccl, autocast on CUDA, the
fp16 GradScaler on CUDA), so this script exercises them and prints one JSON line::

    {"ok": true, "cuda_devices": 1, "checks": {"core_fp32": {"ok": true, ...}, ...}}

Checks: a core on ``cuda:0`` trains (fp32, bf16, fp16) and its non-finite guard skips a poisoned
step; a state saved on the GPU loads with ``weights_only=True`` and resumes identically; a Ray
LearnerGroup with ``{"CPU": 1, "GPU": 1}`` per rank picks nccl and ``cuda:0``, samples from a
shard, and publishes CPU weights; with two or more GPUs, ``world_size=2`` on half batches
matches ``world_size=1`` on the full batch. The exit status is 1 when any check fails.
"""

from __future__ import annotations

import io
import json
import sys
import time
import traceback

import numpy as np
import ray
import torch
from tensordict import TensorDict

from collector.networks.q_mlp import ModelSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.ranks.group import LearnerGroup
from replay.local_ray import init_local_ray
from replay.shard import remote_shard

SPEC = ModelSpec(4, 2, (64, 64))
GPU_RANK = {"CPU": 1, "GPU": 1}


def arrays(size: int, seed: int) -> dict[str, np.ndarray]:
    """Random CartPole-shaped transitions."""
    rng = np.random.default_rng(seed)
    return {
        "observation": rng.normal(size=(size, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=size),
        "reward": rng.normal(size=size).astype(np.float32),
        "next_observation": rng.normal(size=(size, 4)).astype(np.float32),
        "terminated": rng.random(size) < 0.1,
        "truncated": np.zeros(size, bool),
    }


def batch_on(core: LearnerCore, size: int, seed: int) -> TensorDict:
    """Random transitions on the core's device."""
    return core.to_batch(arrays(size, seed))


def check_core(precision: str) -> dict:
    """A core on cuda:0 trains; with autocast, a poisoned step is skipped."""
    torch.manual_seed(0)
    core = LearnerCore(SPEC, LearnerConfig(precision=precision, lr=1e-2), "cuda:0")
    before = core.weights()
    start = time.perf_counter()
    metrics = core.train([batch_on(core, 64, s) for s in range(50)])
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    after = core.weights()
    moved = any(not torch.equal(after[k], before[k]) for k in before)
    result = {
        "ok": moved and bool(torch.isfinite(metrics["loss_q"])),
        "device": str(next(core.loss_module.parameters()).device),
        "loss_q": float(metrics["loss_q"]),
        "updates_per_s": round(50 / elapsed, 1),
    }
    if precision != "fp32":
        poisoned = batch_on(core, 64, 99)
        poisoned["reward"][3] = float("inf")
        skipped = core.train([poisoned])["nonfinite_skipped"].item()
        unchanged = all(torch.equal(core.weights()[k], after[k]) for k in after)
        result.update(skipped=skipped, unchanged_after_poison=unchanged)
        result["ok"] = result["ok"] and skipped == 1 and unchanged
    return result


def check_state_round_trip() -> dict:
    """A GPU state saved and loaded (weights_only) resumes identically."""
    config = LearnerConfig(precision="fp16", lr_scheduler="cosine", lr_decay_steps=100)
    torch.manual_seed(1)
    original = LearnerCore(SPEC, config, "cuda:0")
    original.train([batch_on(original, 64, s) for s in range(5)])
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(2)
    restored = LearnerCore(SPEC, config, "cuda:0")
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    for core in (original, restored):
        core.train([batch_on(core, 64, s) for s in range(5, 8)])
    a, b = original.weights(), restored.weights()
    return {"ok": all(torch.equal(a[k], b[k]) for k in a)}


def step_on_group(world_size: int, shard, batches) -> dict[str, torch.Tensor]:
    """Parameters of a GPU group after stepping on ``batches`` split over ranks."""
    config = LearnerConfig(
        world_size=world_size, resources_per_rank=GPU_RANK, global_batch_size=64, lr=1e-2
    )
    group = LearnerGroup(f"gpu-eq{world_size}", config, SPEC, [shard], seed=3)
    try:
        size = 64 // world_size
        per_rank = [
            [{k: v[r * size : (r + 1) * size] for k, v in b.items()} for b in batches]
            for r in range(world_size)
        ]
        group.step_on(per_rank)
        return group.parameters(world_size - 1)
    finally:
        group.shutdown()


def check_group(shard) -> dict:
    """A one-GPU rank uses nccl and cuda:0, samples, trains and publishes CPU weights."""
    config = LearnerConfig(resources_per_rank=GPU_RANK, global_batch_size=64)
    group = LearnerGroup("gpu-ws1", config, SPEC, [shard], seed=0)
    try:
        described = group.describe()[0]
        receipt = group.step(16)
        assert receipt.published is not None, "rank 0 publishes on every step"
        weights = ray.get(receipt.published.ref)
        on_cpu = all(t.device.type == "cpu" for t in weights.values())
        start = time.perf_counter()
        steps = sum(group.step(64).optim_steps for _ in range(5))
        rate = steps / (time.perf_counter() - start)
    finally:
        group.shutdown()
    ok = (
        described["backend"] == "nccl"
        and described["device"] == "cuda:0"
        and receipt.model_version == 16
        and on_cpu
    )
    return {"ok": ok, "rank0": described, "ws1_updates_per_s": round(rate, 1)}


def check_equivalence(shard) -> dict:
    """Two GPU ranks on half batches equal one on the full batch (needs 2 GPUs)."""
    if torch.cuda.device_count() < 2:
        return {"ok": True, "skipped": "needs 2 GPUs"}
    batches = [arrays(64, 10 + s) for s in range(4)]
    one, two = step_on_group(1, shard, batches), step_on_group(2, shard, batches)
    error = max((one[k] - two[k]).abs().max().item() for k in one)
    return {"ok": error < 1e-4, "max_abs_diff": error}


def run(name: str, check, *args) -> dict:
    """Runs one check, turning an exception into a failed result."""
    try:
        return check(*args)
    except Exception as err:  # report every check, then fail the run
        return {
            "ok": False,
            "error": f"{type(err).__name__}: {err}",
            "where": name,
            "traceback": traceback.format_exc(limit=3),
        }


def main() -> int:
    """Runs every check and prints the JSON report; returns the exit status."""
    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "CUDA is not available"}))
        return 1
    checks = {
        f"core_{precision}": run(precision, check_core, precision)
        for precision in ("fp32", "bf16", "fp16")
    }
    checks["state_round_trip"] = run("state", check_state_round_trip)
    init_local_ray(num_cpus=None, num_gpus=torch.cuda.device_count())
    try:
        shard = remote_shard("gpu-check", 0, 10_000)
        ray.get(shard.write.remote(arrays(5_000, 0), "gpu-check", 0))
        checks["group_ws1_nccl"] = run("group", check_group, shard)
        checks["ws2_equals_ws1_nccl"] = run("equivalence", check_equivalence, shard)
    finally:
        ray.shutdown()
    ok = all(c["ok"] for c in checks.values())
    report = {"ok": ok, "cuda_devices": torch.cuda.device_count(), "checks": checks}
    print(json.dumps(report, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
