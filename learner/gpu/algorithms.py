"""GPU checks of the algorithm losses: ``python -m learner.gpu.algorithms`` on a CUDA machine.

Needs torch, tensordict and gymnasium (for the registrations' network builders) but no Ray, so
it runs on an accelerator image that lacks the rest of the stack. For each registration with a
``gpu_check`` (``learner.algorithms``) a :class:`learner.core.LearnerCore` on ``cuda:0`` and one
on the CPU start from the same weights and take the same steps on the same batches: their
losses must agree (to float32 tolerance on the first step), the GPU core's state must load with
``weights_only=True`` into a fresh core and continue identically, and the GPU training speed is
reported. Prints one JSON line; exits 1 when a check fails.
"""

from __future__ import annotations

import io
import json
import sys
import time
import traceback

import gymnasium as gym
import torch
from tensordict import TensorDict

from collector.networks.builders import NETWORKS, NetworkOptions
from learner.algorithms import ALGORITHMS
from learner.config import LearnerConfig
from learner.core import LearnerCore

OBS_DIM, ACTIONS, HIDDEN = 8, 4, (256, 256)


def cases() -> dict[str, tuple]:
    """Each registration with a ``gpu_check``: its network's spec and its learner options."""
    found = {}
    for name, algo in ALGORITHMS.items():
        check = algo.gpu_check
        if check is None:
            continue
        options = {"loss": algo.loss, **check.learner}
        obs_space = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,))
        action_space = (
            gym.spaces.Box(-1.0, 1.0, (2,)) if check.continuous else gym.spaces.Discrete(ACTIONS)
        )
        network = NetworkOptions(
            "gpu-check", hidden_sizes=HIDDEN, dueling=bool(options.get("dueling"))
        )
        found[name] = (NETWORKS[algo.network](network, obs_space, action_space), options)
    return found


def batch(name: str, spec, n: int, seed: int) -> TensorDict:
    """Random transitions shaped for ``name``'s loss, on the CPU."""
    algo = ALGORITHMS[name]
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, OBS_DIM, generator=g)
    data = {"observation": obs, "reward": torch.randn(n, generator=g)}
    continuous = algo.gpu_check is not None and algo.gpu_check.continuous
    action = (
        torch.rand(n, 2, generator=g) * 2 - 1
        if continuous
        else torch.randint(0, ACTIONS, (n,), generator=g)
    )
    data["action"] = action
    if algo.transform == "chunks":  # the asynchronous loop's trajectory chunks of 8 steps
        steps = 8
        data = {
            "observation": torch.randn(n, steps + 1, OBS_DIM, generator=g),
            "action": torch.randn(n, steps, 2, generator=g)
            if continuous
            else torch.randint(0, ACTIONS, (n, steps), generator=g),
            "log_prob": -torch.rand(n, steps, generator=g),
            "reward": torch.randn(n, steps, generator=g),
            "terminated": torch.rand(n, steps, generator=g) < 0.05,
            "truncated": torch.rand(n, steps, generator=g) < 0.05,
            "valid": torch.rand(n, steps, generator=g) > 0.05,
            "policy_version": torch.zeros(n, dtype=torch.int64),
        }
    elif not algo.on_policy:  # replayed transitions
        data["next_observation"] = torch.randn(n, OBS_DIM, generator=g)
        data["terminated"] = torch.rand(n, generator=g) < 0.1
        data["n_step_discount"] = torch.full((n,), 0.99)
    else:  # an on-policy batch with the collectors' targets
        if continuous:
            data["action"] = torch.randn(n, 2, generator=g)
        data["log_prob"] = -torch.rand(n, generator=g)
        data["value"] = torch.randn(n, generator=g)
        data["advantage"] = torch.randn(n, generator=g)
        data["value_target"] = torch.randn(n, generator=g)
    return TensorDict(data, batch_size=[n])


def check(name: str) -> dict:
    """Runs one loss's checks; returns its figures."""
    spec, options = cases()[name]
    gpu_check = ALGORITHMS[name].gpu_check
    assert gpu_check is not None, f"{name} registers no gpu_check"
    exact = gpu_check.exact
    config = LearnerConfig(hidden_sizes=HIDDEN, global_batch_size=256, **options)
    torch.manual_seed(0)
    cpu = LearnerCore(spec, config, "cpu")
    torch.manual_seed(0)
    gpu = LearnerCore(spec, config, "cuda:0")
    gpu.load_state_dict(cpu.state_dict())  # same weights; RNG draws differ by device
    batches = [batch(name, spec, 256, seed) for seed in range(4)]
    first_cpu = cpu.train(batches[:1])
    first_gpu = gpu.train([b.to("cuda:0") for b in batches[:1]])
    terms = [k for k in first_cpu if k.startswith("loss_")]
    if exact:  # a loss that samples on the device draws other numbers than on the CPU
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
    for name in cases():
        try:
            checks[name] = check(name)
        except Exception as err:  # report every check, then fail
            checks[name] = {"ok": False, "error": repr(err), "trace": traceback.format_exc()}
    ok = all(c["ok"] for c in checks.values())
    print(json.dumps({"ok": ok, "device": torch.cuda.get_device_name(0), "checks": checks}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
