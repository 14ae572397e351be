"""The evaluator actor and its driver-side runner (schedule: ``services.evaluation.schedule``).

:class:`Evaluator` is a thin Ray actor (``<run id>.evaluator``, ``evaluation.num_cpus``) that
owns its own vector env and policy and runs greedy episodes with the weights it is handed.
:class:`EvaluationRunner` lives in the driver: attached to a controller's hooks, it starts an
evaluation when one is due (with the newest published weights' object-store reference, never
the weights themselves), collects results without waiting at rollout and round boundaries,
logs them (a progress snapshot carries the last result under ``evaluation``: ``metrics.jsonl``,
Prometheus, TensorBoard), feeds early stopping and ``evaluation.stop_return``, and runs the
final evaluation at the end of training.

Examples:
    >>> runner = EvaluationRunner(config, controller)  # doctest: +SKIP
    >>> runner.attach()  # hooks: setup, rollout, round, train_end, shutdown  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np
import ray
import torch

from services.evaluation.envs import evaluation_env, make_evaluation_envs
from services.evaluation.schedule import (
    EVALUATION_STREAM,
    EvalResult,
    EvalSchedule,
    evaluation_seeds,
    run_episodes,
)

if TYPE_CHECKING:
    from services.driver.views import EvaluationHost

logger = logging.getLogger(__name__)


class Evaluator:
    """Runs greedy episodes on its own envs with the weights it is handed.

    Args:
        env_id: Gymnasium id or ``module:function`` factory.
        num_envs: Environments stepped side by side.
        model_spec: The run's network spec (``build()``, ``make_policy()``).
        seed: The run's seed; every evaluation resets its envs with
            ``evaluation_seeds(seed, num_envs)``, a stream of its own, apart from every
            collector's, so each version plays the same episodes.
        env_kwargs: Keyword arguments of ``env_id``.
        action_mask_key: Where the env reports action masks (``collector.action_mask_key``).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        model_spec,
        seed: int,
        env_kwargs=None,
        action_mask_key: str | None = None,
    ) -> None:
        torch.set_num_threads(1)
        self.seed = seed
        self.network = model_spec.build().eval()
        sequence = np.random.SeedSequence([seed, EVALUATION_STREAM])
        self.policy = model_spec.make_policy(self.network, sequence)
        self.envs = make_evaluation_envs(
            model_spec, env_id, num_envs, env_kwargs, action_mask_key=action_mask_key
        )
        self.action_mask_key = action_mask_key
        self.evaluations = 0

    def evaluate(self, weights, frames: int, episodes: int) -> EvalResult:
        """Loads ``weights`` (``PublishedWeights``) and runs ``episodes`` greedy episodes."""
        started = time.perf_counter()
        self.network.load_state_dict(ray.get(weights.ref))
        seeds = evaluation_seeds(self.seed, self.envs.num_envs)
        self.evaluations += 1
        with torch.inference_mode():
            returns, lengths = run_episodes(
                self.envs, self.policy, episodes, seeds, action_mask_key=self.action_mask_key
            )
        return EvalResult(
            weights.version, frames, tuple(returns), tuple(lengths), time.perf_counter() - started
        )

    def ping(self) -> bool:
        """Answers once the actor (and its envs) are built."""
        return True


class EvaluationRunner:
    """The driver's side of evaluation: schedule, calls, logging, the end-of-run evaluation.

    Args:
        config: The run's ``RunConfig`` (its ``evaluation`` section is enabled).
        controller: What the runner reads of the run and asks of it (the controller);
            :meth:`attach` registers the hooks and sets ``controller.evaluation``.
    """

    def __init__(self, config, controller: EvaluationHost) -> None:
        self.config = config
        self.cfg = config.evaluation
        self.controller = controller
        self.schedule = EvalSchedule(self.cfg.interval_frames)
        self.actor = None
        self.inflight: ray.ObjectRef | None = None
        self.failures = 0

    def attach(self) -> None:
        """Registers on the controller's hooks."""
        c = self.controller
        c.evaluation = self
        c.register("setup", lambda _: self.start())
        c.register("rollout", lambda *_: self.poll())
        c.register("external", lambda *_: self.poll())
        c.register("round", lambda *_: self.poll())
        c.register("train_end", lambda _: self.finish())
        c.register("shutdown", lambda _: self.close())

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Starts the evaluator actor (after setup and any restore); ``run_at_start``."""
        cfg, run = self.cfg, self.config
        env_id, env_kwargs = evaluation_env(run)
        self.actor = (
            ray.remote(Evaluator)
            .options(
                name=f"{self.controller.run_id}.evaluator",
                namespace="relayrl",
                num_cpus=cfg.num_cpus,
                max_restarts=1,
            )
            .remote(
                env_id,
                cfg.num_envs,
                self.controller.model_spec,
                run.seed,
                env_kwargs,
                run.collector.action_mask_key or None,
            )
        )
        if cfg.run_at_start:
            self._launch()

    def poll(self) -> None:
        """At a loop boundary: collects a finished evaluation, starts a due one (no waiting)."""
        if self.actor is None:
            return
        if self.inflight is not None:
            ready, _ = ray.wait([self.inflight], timeout=0)
            if ready:
                self._collect()
        if self.schedule.due(self.controller.counters.collected_frames):
            self._launch()

    def finish(self) -> None:
        """End of training: the final evaluation (``run_at_end``), waited for with a timeout."""
        if self.actor is None:
            return
        version = self.controller.counters.published_version
        if self.cfg.run_at_end and self.schedule.needs_final(version):
            if self.inflight is None:
                self._launch()
            else:
                self.schedule.pending = True  # after the one running, with the final weights
        if not self.cfg.wait_at_end:
            return
        deadline = time.monotonic() + self.cfg.timeout_s
        while self.inflight is not None:
            ready, _ = ray.wait([self.inflight], timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                logger.warning(
                    "evaluation: running after %.0fs, not waited for", self.cfg.timeout_s
                )
                return
            self._collect()

    def close(self) -> None:
        """Ends the evaluator actor (the controller's shutdown)."""
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)
            self.actor = None
            self.inflight = None

    # -- calls -------------------------------------------------------------------------------
    def _launch(self) -> None:
        weights = self.controller.weights
        if weights is None:
            return
        frames = self.controller.counters.collected_frames
        self.schedule.started(weights.version, frames)
        self.inflight = self.actor.evaluate.remote(weights, frames, self.cfg.episodes)

    def _collect(self) -> None:
        ref, self.inflight = self.inflight, None
        try:
            result: EvalResult | None = ray.get(ref)
        except ray.exceptions.RayError as err:  # the evaluator died: training goes on
            self.failures += 1
            logger.warning("evaluation failed (%s); training goes on", err)
            result = None
        again = self.schedule.finished(result)
        if result is not None:
            self._report(result)
        if again and self.actor is not None:
            self._launch()  # the coalesced evaluation, with the newest weights

    def _report(self, result: EvalResult) -> None:
        record = self.schedule.last
        logger.info(
            "evaluation at %d frames, version %d: return %.1f +- %.1f over %d episodes (%.1fs)",
            result.frames,
            result.version,
            record["episode_return_mean"],
            record["episode_return_std"],
            record["episodes"],
            result.wall_s,
        )
        controller = self.controller
        controller.progress(force=True)  # a metrics.jsonl line (and scrape) with this result
        controller.check_early_stop({"evaluation": record})
        target = self.cfg.stop_return
        if target is not None and record["episode_return_mean"] >= target:
            controller.request_stop(
                f"evaluation return {record['episode_return_mean']:.1f} reached "
                "evaluation.stop_return"
            )

    # -- reporting and checkpoints -------------------------------------------------------------
    def snapshot(self) -> dict:
        """The ``evaluation`` block of progress snapshots (empty before the first result)."""
        if self.schedule.last is None:
            return {}
        return {"evaluation": {**self.schedule.last, "completed": self.schedule.completed}}

    def summary(self) -> dict:
        """``eval_return_mean`` and ``eval_version`` of the last completed evaluation."""
        last = self.schedule.last
        return {
            "eval_return_mean": None if last is None else round(last["episode_return_mean"], 3),
            "eval_version": None if last is None else last["version"],
            "evaluations": self.schedule.completed,
        }

    def state_dict(self) -> dict:
        """The checkpoint's part: the next due frame and the last completed result."""
        return self.schedule.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        """Restores :meth:`state_dict` (an evaluation in flight at the cut is dropped)."""
        self.schedule.load_state_dict(state)
