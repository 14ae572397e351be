"""Which checkpoint a resumed run starts from, and whether its config may resume it (no torch)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.checkpoints.store import latest_valid, read_json
from services.checkpoints.trust import check_code, named_modules, verified
from services.config import ConfigError, RunConfig

# Fields a resumed run must share with its checkpoint (they shape the saved state). The sizes
# (collector.num_collectors, collector.envs_per_collector, replay.num_shards, learner.world_size)
# are free: a checkpoint resumes at any size (services.checkpoints.cut).
PINNED_FIELDS = (
    "algorithm",
    "learner.loss",
    "learner.dueling",
    "collector.env_id",
    "collector.n_step",
    "replay.sampler",
    "learner.hidden_sizes",
    "learner.network",
    "learner.recurrent",
    "learner.recurrent_hidden_size",
    "replay.sequence_length",
    "replay.burn_in",
    "replay.frame_stack",  # the stored items' observation columns
)


_MISSING = object()


def _field(config: dict, dotted: str, default=None):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def check_compatible(checkpoint_config: dict, config: RunConfig) -> None:
    """Refuses a config whose pinned fields differ from the checkpoint's.

    Raises:
        ConfigError: Naming the first differing field.
    """
    current = config.to_dict()
    defaults = RunConfig().to_dict()  # what a checkpoint from before a field existed ran with
    for dotted in PINNED_FIELDS:
        saved = _field(checkpoint_config, dotted, _MISSING)
        if saved is _MISSING:
            saved = _field(defaults, dotted)
        now = _field(current, dotted)
        if saved != now:
            raise ConfigError(
                f"{dotted}: the checkpoint was written with {saved!r}, this config has {now!r}; "
                "resume with the checkpoint's value"
            )
    saved_shards = _field(checkpoint_config, "replay.num_shards", config.replay.num_shards)
    if config.replay.frame_ring and saved_shards != config.replay.num_shards:
        raise ConfigError(
            f"replay.num_shards: the checkpoint was written with {saved_shards!r}, this config has "
            f"{config.replay.num_shards!r}, and a frame-deduplicated replay (replay.frame_stack) "
            "cannot be re-sharded; resume with the checkpoint's value"
        )


def find_checkpoint(path: str | Path) -> tuple[Path, dict]:
    """The verified checkpoint ``path`` names, and its manifest.

    ``path`` is a checkpoint, a rotation directory (its newest valid checkpoint) or a run
    directory (its ``checkpoints/`` rotation).

    Raises:
        CheckpointError: If no valid checkpoint is found.
    """
    path = Path(path)
    if (path / "checkpoints").is_dir():  # a run directory: its rotation
        path = path / "checkpoints"
    return latest_valid(path)


def resolve_resume(
    path: str | Path,
    config: RunConfig,
    *,
    allow_modules: Sequence[str] = (),
    key: bytes | None = None,
) -> tuple[Path, dict]:
    """Finds the checkpoint to resume (:func:`open_checkpoint`) and checks it.

    The modules the run's own config names are allowed besides ``allow_modules`` (that config
    is the caller's).

    Raises:
        CheckpointError: If no valid checkpoint is found, or it is not trusted
            (:class:`services.checkpoints.trust.UntrustedCheckpoint`).
        ConfigError: If the config conflicts with the checkpoint.
    """
    own = named_modules(config.to_dict())
    checkpoint, manifest, saved = open_checkpoint(
        path, allow_modules=(*allow_modules, *own), key=key
    )
    check_compatible(saved, config)
    return checkpoint, manifest


def open_checkpoint(
    path: str | Path, *, allow_modules: Sequence[str] = (), key: bytes | None = None
) -> tuple[Path, dict, dict]:
    """The verified checkpoint ``path`` names, its manifest and its config dict, if trusted.

    Args:
        path: A checkpoint, a rotation directory or a run directory (:func:`find_checkpoint`).

    Keyword Args:
        allow_modules: Modules whose ``module:function`` paths the config may name
            (``services.checkpoints.trust``).
        key: The HMAC key checkpoints are signed with (None: signatures are not checked, and
            only ``allow_modules`` lets code through).

    Raises:
        CheckpointError: If no valid checkpoint is found; ``UntrustedCheckpoint`` if its
            signature does not match ``key`` or its config names code nobody allowed.
    """
    checkpoint, manifest = find_checkpoint(path)
    signed = verified(checkpoint, key)
    config = read_json(checkpoint / "config.json")
    check_code(config, allow_modules=allow_modules, signed=signed, where=checkpoint / "config.json")
    return checkpoint, manifest, config
