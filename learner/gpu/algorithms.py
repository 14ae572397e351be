"""GPU checks of the algorithm losses: ``python -m learner.gpu.algorithms`` on a CUDA machine.

Needs torch and tensordict only (no Ray, no gymnasium), so it runs on an accelerator image that
lacks the rest of the stack. For each loss (dueling double DQN, PPO, A2C, REINFORCE, SAC) a
:class:`learner.core.LearnerCore` on ``cuda:0`` and one on the CPU start from the same weights
and take the same steps on the same batches: their losses must agree (to float32 tolerance on
the first step), the GPU core's state must load with ``weights_only=True`` into a fresh core
and continue identically, and the GPU training speed is reported. Prints one JSON line; exits 1
when a check fails.
"""

from __future__ import annotations

import io
import json
import sys
import time
import traceback

import torch
from tensordict import TensorDict

from collector.networks.actor_critic import ActorCriticSpec
from collector.networks.q_mlp import ModelSpec
from collector.networks.squashed import SquashedGaussianSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore

CASES = {
    "dqn": (ModelSpec(8, 4, (256, 256), dueling=True), {"loss": "dqn", "dueling": True}),
    "ppo": (ActorCriticSpec(8, 4, hidden_sizes=(256, 256)), {"loss": "ppo"}),
    "a2c": (ActorCriticSpec(8, 2, "gaussian", (256, 256)), {"loss": "a2c"}),
    "reinforce": (ActorCriticSpec(8, 4, hidden_sizes=(256, 256)), {"loss": "reinforce"}),
    "sac": (SquashedGaussianSpec(8, 2, (-1.0, -1.0), (1.0, 1.0), (256, 256)), {"loss": "sac"}),
}


def batch(name: str, spec, n: int, seed: int) -> TensorDict:
    """Random transitions shaped for ``name``'s loss, on the CPU."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 8, generator=g)
    data = {"observation": obs, "reward": torch.randn(n, generator=g)}
    if name in ("dqn", "sac"):
        data["next_observation"] = torch.randn(n, 8, generator=g)
        data["terminated"] = torch.rand(n, generator=g) < 0.1
        data["n_step_discount"] = torch.full((n,), 0.99)
    if name == "dqn":
        data["action"] = torch.randint(0, 4, (n,), generator=g)
    elif name == "sac":
        data["action"] = torch.rand(n, 2, generator=g) * 2 - 1
    else:
        gaussian = getattr(spec, "distribution", "") == "gaussian"
        shape = (n, spec.action_dim)
        data["action"] = (
            torch.randn(shape, generator=g) if gaussian else torch.randint(0, 4, (n,), generator=g)
        )
        data["log_prob"] = -torch.rand(n, generator=g)
        data["value"] = torch.randn(n, generator=g)
        data["advantage"] = torch.randn(n, generator=g)
        data["value_target"] = torch.randn(n, generator=g)
    return TensorDict(data, batch_size=[n])


def check(name: str) -> dict:
    """Runs one loss's checks; returns its figures."""
    spec, options = CASES[name]
    config = LearnerConfig(hidden_sizes=(256, 256), global_batch_size=256, **options)
    torch.manual_seed(0)
    cpu = LearnerCore(spec, config, "cpu")
    torch.manual_seed(0)
    gpu = LearnerCore(spec, config, "cuda:0")
    gpu.load_state_dict(cpu.state_dict())  # same weights; RNG draws differ by device
    batches = [batch(name, spec, 256, seed) for seed in range(4)]
    first_cpu = cpu.train(batches[:1])
    first_gpu = gpu.train([b.to("cuda:0") for b in batches[:1]])
    terms = [k for k in first_cpu if k.startswith("loss_")]
    if name != "sac":  # SAC samples actions inside its loss: device RNGs differ
        for key in terms:
            a, b = float(first_cpu[key]), float(first_gpu[key])
            if abs(a - b) > 1e-3 * max(1.0, abs(a)):
                raise AssertionError(f"{name} {key}: cpu {a} vs cuda {b}")
    buffer = io.BytesIO()
    torch.save(gpu.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True, map_location="cpu")
    torch.manual_seed(1)
    resumed = LearnerCore(spec, config, "cuda:0")
    resumed.load_state_dict(state)
    rng = torch.cuda.get_rng_state()
    after = gpu.train([b.to("cuda:0") for b in batches[1:]])
    torch.cuda.set_rng_state(rng)
    again = resumed.train([b.to("cuda:0") for b in batches[1:]])
    for key in terms:
        a, b = float(after[key]), float(again[key])
        if abs(a - b) > 1e-5 * max(1.0, abs(a)):
            raise AssertionError(f"{name} {key}: resumed core diverged ({a} vs {b})")
    on_gpu = [b.to("cuda:0") for b in batches] * 25
    gpu.train(on_gpu[:4])
    torch.cuda.synchronize()
    start = time.perf_counter()
    gpu.train(on_gpu)
    torch.cuda.synchronize()
    return {
        "ok": True,
        "terms": terms,
        "updates_per_s": round(len(on_gpu) / (time.perf_counter() - start), 1),
        "version": gpu.version,
    }


def main() -> int:
    """Runs every check; prints one JSON line."""
    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "no CUDA device"}))
        return 1
    checks = {}
    for name in CASES:
        try:
            checks[name] = check(name)
        except Exception as err:  # report every check, then fail
            checks[name] = {"ok": False, "error": repr(err), "trace": traceback.format_exc()}
    ok = all(c["ok"] for c in checks.values())
    print(json.dumps({"ok": ok, "device": torch.cuda.get_device_name(0), "checks": checks}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
