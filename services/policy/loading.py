"""Loading a trained network from a checkpoint, without Ray: :func:`load_policy`.

A checkpoint holds the run's config (``config.json``) and each learner rank's state
(``learner-<rank>.pt``: the loss module's tensors, the policy network's among them). Loading
verifies the manifest's checksums, rebuilds the run's network spec from the config and the env's
spaces (a ``learner.network`` factory must be importable here), builds the run's loss around a
fresh network and loads rank 0's state into it with ``torch.load(weights_only=True)``: whatever
prefix the loss keeps its policy network under, the network ends up with the trained weights.
No pickle is read, and no Ray is started.

Loading trusts no code a checkpoint names (``services.checkpoints.trust``): a config naming a
``module:function`` (env factory, ``learner.network``, loss, stepper) is refused unless the
caller allows the module (``allow_modules``) or the checkpoint is signed with the caller's key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from replay.persist.npyio import CheckpointError
from services.checkpoints.cut import load_learner_states
from services.checkpoints.resume import open_checkpoint
from services.checkpoints.store import read_json
from services.checkpoints.trust import signing_key
from services.config import ConfigError, RunConfig, config_from_dict
from services.config.spec import env_spaces, model_spec_for
from services.policy.policy import Policy


def read_config(checkpoint: Path, saved: dict | None = None) -> RunConfig:
    """The run config a checkpoint was written with (``saved``: its dict, already read).

    Raises:
        CheckpointError: If ``config.json`` is unreadable or no longer a valid config.
    """
    try:
        return config_from_dict(
            saved if saved is not None else read_json(checkpoint / "config.json")
        )
    except ConfigError as err:
        raise CheckpointError(f"{checkpoint / 'config.json'}: {err}") from None


def trained_network(checkpoint: Path, config: RunConfig, spec) -> tuple[torch.nn.Module, int]:
    """The policy network with rank 0's weights, and their model version.

    Raises:
        CheckpointError: Naming the learner file if it is unreadable or does not fit.
    """
    from learner.losses import loss_factory_for

    state = load_learner_states(checkpoint, 1)[0]
    with torch.random.fork_rng(devices=[]):  # building modules leaves the caller's RNG alone
        network = spec.build()
        loss = loss_factory_for(config.learner)(network, config.learner)
    try:
        loss.load_state_dict(state["loss"])
    except (KeyError, RuntimeError) as err:
        raise CheckpointError(
            f"{checkpoint / 'learner-0.pt'}: does not fit the run's network ({err})"
        ) from None
    return network, int(state.get("version", 0))


def load_policy(
    path: str | Path,
    *,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    overrides: dict | None = None,
    allow_modules: Sequence[str] = (),
    key: bytes | None = None,
) -> Policy:
    """Loads the trained policy of a checkpoint, a rotation directory or a run directory.

    Args:
        path: A checkpoint directory, a rotation directory (its newest valid checkpoint) or a
            run directory (its ``checkpoints/``).

    Keyword Args:
        device: Where the network runs (``"cpu"``, ``"cuda:0"``).
        seed: Seeds sampled actions (default: the run's seed).
        overrides: Dotted config keys replacing the run's, e.g. ``{"evaluation.num_envs": 4}``
            (what an evaluation runs on; fields that shape the network must stay).
        allow_modules: Modules whose ``module:function`` factories the checkpoint's config may
            name (``["mypkg"]``: ``mypkg`` and its submodules); any other is refused.
        key: The HMAC key checkpoints are signed with (default: the ``RELAYRL_CHECKPOINT_KEY``
            environment variable, if set); a checkpoint signed with it may name any code, one
            whose signature does not match is refused.

    Returns:
        The :class:`~services.policy.policy.Policy`.

    Raises:
        CheckpointError: If no valid checkpoint is found or its files do not fit;
            ``UntrustedCheckpoint`` if it names code nobody allowed or its signature is wrong.
        ConfigError: If the run's env or network cannot be built here (e.g. a missing extra).

    Examples:
        >>> policy = load_policy("~/relayrl_results/<run id>")  # doctest: +SKIP
        >>> policy.act(observation)  # doctest: +SKIP
        1
    """
    checkpoint, _, saved = open_checkpoint(
        Path(path).expanduser(),
        allow_modules=allow_modules,
        key=key if key is not None else signing_key(),
    )
    config = read_config(checkpoint, saved)
    if overrides:
        config = config_from_dict(config.to_dict(), overrides)
    spaces = env_spaces(config)
    spec = model_spec_for(config, spaces)
    network, version = trained_network(checkpoint, config, spec)
    return Policy(
        network,
        spec,
        config,
        *spaces,
        checkpoint=checkpoint.resolve(),
        version=version,
        device=device,
        seed=seed,
    )
