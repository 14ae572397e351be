"""Playing a loaded policy on its run's evaluation env, optionally recording videos.

:func:`evaluate_policy` runs the episodes of ``python -m services.evaluate``: the run's
evaluation env (``services.evaluation.envs``), ``evaluation.num_envs`` of them reset with
``evaluation_seeds(seed, num_envs)``, counted by the evaluator's own loop
(:func:`~services.evaluation.schedule.run_episodes`), so with the run's seed it replays the
run's evaluation of the checkpoint's version episode for episode. Greedy actions come from
``Policy.act``; ``deterministic=False`` samples with the run's collector policy. A recurrent
policy's state is carried from step to step, one row per env, and zeroed at every episode's
first step (``run_episodes``).

With ``video_dir`` each gymnasium env is made with ``render_mode="rgb_array"`` and wrapped in
gymnasium's ``RecordVideo`` (``moviepy``, the ``video`` extra): every ``video_every``-th counted
episode of each env becomes ``<video_dir>/env<i>-episode-<k>.mp4``.

Examples:
    >>> policy = load_policy("~/relayrl_results/<run id>")  # doctest: +SKIP
    >>> evaluate_policy(policy, episodes=4, video_dir="videos")["video_files"]  # doctest: +SKIP
    ['.../videos/env0-episode-0.mp4', '.../videos/env0-episode-1.mp4', ...]
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.evaluation.envs import evaluation_env, make_evaluation_envs
from services.evaluation.schedule import (
    EVALUATION_STREAM,
    episode_quotas,
    evaluation_seeds,
    run_episodes,
)

VIDEO_EXTRA = 'pip install "relayrl[video]"'


class GreedyActions:
    """A policy's deterministic actions in the collector policies' form (``act(obs, explore)``).

    A recurrent policy's (``recurrent``) takes the state and returns the next one, as the
    collector's :class:`~collector.networks.stepping.RecurrentPolicy` does:
    ``act(obs, explore, state=) -> (actions, extras, next_state)``.

    Args:
        policy: A :class:`~services.policy.policy.Policy`.
    """

    def __init__(self, policy) -> None:
        self.policy = policy
        self.recurrent = bool(getattr(policy, "recurrent", False))

    def initial_state(self, n: int) -> np.ndarray:
        """Zeros ``[n, state_size]`` (recurrent policies)."""
        return self.policy.initial_state(n)

    def act(self, obs, explore=None, *, mask=None, state=None):
        """``policy.act(obs, mask=mask)`` for a batch, and no extras (and the next state)."""
        if not self.recurrent:
            return self.policy.act(obs, mask=mask), {}
        actions, next_state = self.policy.act(obs, mask=mask, state=state)
        return actions, {}, next_state


def video_recorder(video_dir: Path, every: int, quotas: list[int]):
    """``wrap(env, index)`` recording every ``every``-th counted episode of each env.

    Episodes an env plays past its quota (while the others finish theirs) are not recorded.
    """
    import gymnasium as gym

    def wrap(env, index: int):
        def trigger(episode: int) -> bool:
            return episode < quotas[index] and episode % every == 0

        return gym.wrappers.RecordVideo(
            env,
            str(video_dir),
            episode_trigger=trigger,
            name_prefix=f"env{index}",
            disable_logger=True,
        )

    return wrap


def evaluate_policy(
    policy,
    *,
    episodes: int | None = None,
    seed: int | None = None,
    num_envs: int | None = None,
    deterministic: bool = True,
    video_dir: str | Path | None = None,
    video_every: int = 1,
) -> dict[str, Any]:
    """Plays ``episodes`` episodes with ``policy`` on its run's evaluation env.

    Args:
        policy: A :class:`~services.policy.policy.Policy`.

    Keyword Args:
        episodes: Episodes to play (default ``evaluation.episodes`` of the run).
        seed: Seeds the envs' resets (default: the run's seed, the evaluator's episodes).
        num_envs: Envs side by side (default ``evaluation.num_envs``; another number plays
            other episodes).
        deterministic: Greedy actions; False samples.
        video_dir: Record videos there (gymnasium envs with ``rgb_array`` rendering).
        video_every: Record every N-th counted episode of each env.

    Returns:
        ``returns``, ``lengths`` (episode by episode, env by env in finishing order),
        ``return_mean``, ``return_std``, ``episodes``, ``video_files``, ``seed``, ``version``,
        ``checkpoint``, ``wall_s``.

    Raises:
        ValueError: For ``video_dir`` without ``moviepy`` (naming the extra) or with envs that
            are not gymnasium envs, or counts below 1.
    """
    config = policy.config
    episodes = config.evaluation.episodes if episodes is None else episodes
    num_envs = config.evaluation.num_envs if num_envs is None else num_envs
    seed = config.seed if seed is None else seed
    if episodes < 1 or num_envs < 1 or video_every < 1:
        raise ValueError(
            f"--episodes, --num-envs, --video-every: must be >= 1, got {episodes}, "
            f"{num_envs}, {video_every}"
        )
    env_id, env_kwargs = evaluation_env(config)
    wrap = None
    if video_dir is not None:
        if importlib.util.find_spec("moviepy") is None:
            raise ValueError(f"--video: recording needs moviepy: {VIDEO_EXTRA}")
        if hasattr(policy.spec, "make_vector_env"):
            raise ValueError(
                f"--video: {env_id} is a multi-agent (PettingZoo) env; gymnasium's RecordVideo "
                "records gymnasium envs only"
            )
        video_dir = Path(video_dir).expanduser().resolve()
        video_dir.mkdir(parents=True, exist_ok=True)
        env_kwargs["render_mode"] = "rgb_array"
        wrap = video_recorder(video_dir, video_every, episode_quotas(episodes, num_envs))
    started, wall_clock = time.perf_counter(), time.time()
    with warnings.catch_warnings():  # RecordVideo: "Overwriting existing videos" per env
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
        envs = make_evaluation_envs(
            policy.spec,
            env_id,
            num_envs,
            env_kwargs,
            wrap=wrap,
            action_mask_key=config.collector.action_mask_key or None,
        )
    try:
        if deterministic:
            actor, explore = GreedyActions(policy), None
        else:
            actor = policy.collector_policy(np.random.SeedSequence([seed, EVALUATION_STREAM]))
            explore = policy.exploration()
        with torch.inference_mode():
            returns, lengths = run_episodes(
                envs,
                actor,
                episodes,
                evaluation_seeds(seed, num_envs),
                explore,
                action_mask_key=config.collector.action_mask_key or None,
            )
    finally:
        envs.close()  # RecordVideo writes an episode's file when it ends or the env closes
    videos = []
    if video_dir is not None:  # this evaluation's files (an older one's may share the folder)
        found = video_dir.glob("env*-episode-*.mp4")
        videos = sorted(str(p) for p in found if p.stat().st_mtime >= wall_clock - 1)
    values = np.asarray(returns, np.float64)
    return {
        "returns": returns,
        "lengths": lengths,
        "return_mean": float(values.mean()),
        "return_std": float(values.std()),
        "episodes": len(returns),
        "video_files": videos,
        "seed": seed,
        "version": policy.version,
        "checkpoint": str(policy.checkpoint) if policy.checkpoint else None,
        "wall_s": round(time.perf_counter() - started, 3),
    }
