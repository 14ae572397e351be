"""Environment construction for collectors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def make_vector_env(env_id: str, num_envs: int, *, mode: str = "sync") -> gym.vector.VectorEnv:
    """Builds a gymnasium vector env with next-step autoreset.

    Args:
        env_id: A registered gymnasium id.
        num_envs: Number of sub-environments.
        mode: ``"sync"`` (one process) or ``"async"`` (one subprocess per env).
    """
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode=mode,
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP},
    )


def env_seeds(run_seed: int, collector_id: int, num_envs: int) -> list[int]:
    """Distinct, reproducible per-env seeds derived from the run seed and collector index."""
    state = np.random.SeedSequence([run_seed, collector_id]).generate_state(num_envs)
    return [int(s) for s in state]
