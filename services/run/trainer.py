"""The Python API: :class:`Trainer` (``from services import Trainer``).

A :class:`Trainer` trains the run a config describes, as ``python -m services.train`` does, from
Python: a notebook, a script, a test. It validates everything before anything starts (a
:class:`~services.config.ConfigError` names the field), uses the Ray the caller already connected
to (``ray.init(address=...)``) or else starts an embedded local Ray for the run and shuts it down
after, hands registered callbacks a typed payload per event (``services.run.events``), and
returns the run's summary. ``policy()`` loads the trained policy from the run's newest
checkpoint. ``train()`` may be called again: each call is a new run (a new run id and directory)
of the same config.

Examples:
    >>> from services import Trainer
    >>> trainer = Trainer({"algorithm": "ppo"}, {"seed": 1})  # doctest: +SKIP
    >>> trainer.register("progress", lambda p: print(p.frames))  # doctest: +SKIP
    >>> summary = trainer.train()  # doctest: +SKIP
    >>> trainer.policy().act(observation)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.config import ConfigError, RunConfig, config_from_dict, load_config
from services.run.events import EVENTS, payload_hook

if TYPE_CHECKING:
    from services.driver.views import StopView


def resolve_config(
    config: str | Path | Mapping | RunConfig | None, overrides: Mapping[str, Any] | None = None
) -> RunConfig:
    """A validated RunConfig from a YAML path, a nested dict or a RunConfig, plus overrides.

    Args:
        config: A config file path, a dict nested like the YAML, a ``RunConfig``, or None
            (the defaults: DQN on CartPole).
        overrides: Dotted keys to values, e.g. ``{"learner.lr": 5e-4, "seed": 1}``.

    Raises:
        ConfigError: Naming the first bad field.

    Examples:
        >>> resolve_config({"algorithm": "sac"}, {"seed": 3}).seed
        3
    """
    overrides = dict(overrides or {})
    if isinstance(config, RunConfig):
        return config_from_dict(config.to_dict(), overrides) if overrides else config
    if isinstance(config, Mapping):
        return config_from_dict(config, overrides)
    if config is None or isinstance(config, str | Path):
        base = load_config(config)
        return config_from_dict(base.to_dict(), overrides) if overrides else base
    raise ConfigError(
        f"config: must be a file path, a dict or a RunConfig, got {type(config).__name__}"
    )


class Trainer:
    """Trains one config, from Python (see the module docstring).

    Args:
        config: A YAML file path, a dict nested like the YAML, or a ``RunConfig`` (None: the
            defaults).
        overrides: Dotted keys to values applied on top, e.g. ``{"controller.total_frames":
            20_000}``.

    Keyword Args:
        resume: A checkpoint, rotation or run directory the first ``train()`` resumes from.

    Attributes:
        config: The validated ``RunConfig``.
        run_dir: The last run's directory (None before ``train()``).
        summary: The last run's summary (None before ``train()``).

    Raises:
        ConfigError: If the config is invalid (naming the field).
    """

    def __init__(
        self,
        config: str | Path | Mapping | RunConfig | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        resume: str | Path | None = None,
    ) -> None:
        self.config = resolve_config(config, overrides)
        self.resume = resume
        self.run_dir: Path | None = None
        self.summary: dict | None = None
        self._callbacks: list[tuple[str, Callable[[Any], None]]] = []

    def register(self, event: str, callback: Callable[[Any], None]) -> None:
        """Calls ``callback(payload)`` at every ``event`` of the runs this trainer starts.

        Args:
            event: ``setup``, ``rollout``, ``round``, ``progress``, ``checkpoint`` or
                ``train_end``; the payloads are in ``services.run.events``.
            callback: Runs on the driver's thread; keep it short (it delays the loop).

        Raises:
            ValueError: Naming the events, for an unknown ``event``.
        """
        payload_hook(event, callback)  # refuses an unknown event now, not at train()
        self._callbacks.append((event, callback))

    def train(self) -> dict:
        """Runs the config to its end; returns the summary (``python -m services.train``'s).

        Raises:
            ConfigError: If the env, the network or the resume checkpoint does not fit the
                config (before any actor starts).
            CheckpointError: If ``resume`` holds no valid checkpoint.
        """
        import ray

        from services.checkpoints.resume import resolve_resume
        from services.checkpoints.trust import signing_key
        from services.config.spec import check_local_gpus, env_spaces, model_spec_for
        from services.config.trackers import check_tracker_extras
        from services.run.embedded import init_ray
        from services.run.launch import prepare_run
        from services.run.storage import check_run_paths

        config = self.config
        check_tracker_extras(config.metrics)
        check_run_paths(config)
        spaces = env_spaces(config)
        check_local_gpus(config)
        model_spec = model_spec_for(config, spaces)
        resume = None
        if self.resume:
            resume = resolve_resume(self.resume, config, key=signing_key())[0]
        started_ray = not ray.is_initialized()
        if started_ray:
            init_ray(config)
        try:
            run = prepare_run(config, model_spec=model_spec, resume=resume)
            for event, callback in self._callbacks:
                run.controller.register(event, payload_hook(event, callback))
            self.run_dir = run.run_dir
            with _stop_on_signals(run.controller):
                self.summary = run.execute()
        finally:
            if started_ray:
                ray.shutdown()
        self.resume = None  # a second train() is a fresh run of the config
        return self.summary

    def policy(self, *, device: str = "cpu"):
        """The last run's trained policy (its newest checkpoint), without Ray.

        Raises:
            RuntimeError: Before ``train()``.
        """
        if self.run_dir is None:
            raise RuntimeError("policy(): call train() first")
        from services.checkpoints.trust import named_modules
        from services.policy import load_policy

        # The run's code is this trainer's config's: the modules it names are trusted.
        own = named_modules(self.config.to_dict())
        return load_policy(self.run_dir, device=device, allow_modules=own)


@contextlib.contextmanager
def _stop_on_signals(controller: StopView) -> Iterator[None]:
    """SIGINT/SIGTERM stop the run at the next boundary (main thread only), then restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        if controller.stop_requested:
            raise KeyboardInterrupt
        controller.request_stop(f"signal {signum}")

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["EVENTS", "Trainer", "resolve_config"]
