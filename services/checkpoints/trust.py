"""What loading a checkpoint trusts: signatures, and the code a checkpoint's config names.

A checkpoint's ``config.json`` may name code: a ``module:function`` env factory
(``collector.env_id``, ``evaluation.env_id``), a ``learner.network``, a ``learner.loss`` or a
``learner.stepper`` factory. Loading calls them, so a checkpoint from someone else could run
anything as the loading user (``"os:system"``). Loading is therefore safe by default:

- **Code paths are refused** unless the caller allows their modules
  (``allow_modules=("mypkg",)``, ``--allow-module mypkg``: ``mypkg`` and its submodules) or the
  checkpoint carries a valid signature made with the caller's key. Registered gymnasium ids,
  relayrl's own names (``dqn``, ``torchrl:DQNLoss``) and the factories of the shipped configs
  (:data:`SHIPPED_PATHS`) are not foreign code and always load.
- **Signatures**: with a key (``checkpoint.signing_key`` when writing; ``--checkpoint-key`` or
  the ``RELAYRL_CHECKPOINT_KEY`` environment variable when loading; ``env:NAME`` or
  ``file:PATH``), each checkpoint gets ``manifest.sig``, an HMAC-SHA256 of its manifest, which
  holds every file's SHA-256. A signed checkpoint whose signature does not match the caller's
  key is refused; unsigned checkpoints (and signed ones loaded without a key) still load, under
  the code-path rule above.

The manifest's SHA-256s alone prove nothing about who wrote a checkpoint (anyone can recompute
them); only the signature does.

Examples:
    >>> code_paths({"collector": {"env_id": "os:system"}, "learner": {"loss": "dqn"}})
    [('collector.env_id', 'os:system')]
    >>> allowed("mypkg.envs:make", ("mypkg",)), allowed("os:system", ("mypkg",))
    (True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from replay.persist.npyio import CheckpointError
from services.checkpoints.store import MANIFEST, SIGNATURE
from services.config.grpc import resolve_secret

KEY_ENV = "RELAYRL_CHECKPOINT_KEY"
# A ``module:attribute`` path as the factories' resolvers import it.
CODE_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# Fields whose ``env:NAME`` / ``file:PATH`` values are secret references, not code.
SECRET_KEYS = frozenset({"token", "actor_token", "signing_key"})
# Names that look like paths but are relayrl's own: ``learner.loss: torchrl:<Class>`` resolves
# only the TorchRL losses a registration names.
NAMES = ("torchrl:",)
# The factories relayrl's shipped configs name (deploy/configs/): trusted like gymnasium ids.
SHIPPED_PATHS = frozenset(
    {
        "collector.atari:make_atari",
        "mpe2.simple_spread_v3:parallel_env",
        "collector.envs.connect4:connect_four",
    }
)


class UntrustedCheckpoint(CheckpointError):
    """A checkpoint whose signature is wrong, or whose config names code nobody allowed."""


def signing_key(reference: str | None = None) -> bytes | None:
    """The HMAC key ``reference`` names (``env:NAME``, ``file:PATH``).

    Without a reference: the ``RELAYRL_CHECKPOINT_KEY`` environment variable, if set.

    Raises:
        CheckpointError: Naming the reference that cannot be read, or a literal key.
    """
    if reference is None:
        value = os.environ.get(KEY_ENV)
        return value.encode() if value else None
    if not reference.startswith(("env:", "file:")):
        raise CheckpointError("checkpoint key: give env:NAME or file:PATH, never the key itself")
    try:
        secret = resolve_secret("checkpoint key", reference)
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    return secret.encode() if secret else None


def signature(manifest: bytes, key: bytes) -> str:
    """The hex HMAC-SHA256 of a manifest's bytes."""
    return hmac.new(key, manifest, hashlib.sha256).hexdigest()


def sign(checkpoint: Path, key: bytes) -> None:
    """Writes ``manifest.sig`` beside the checkpoint's ``manifest.json``."""
    manifest = (checkpoint / MANIFEST).read_bytes()
    (checkpoint / SIGNATURE).write_text(signature(manifest, key) + "\n")


def verified(checkpoint: Path, key: bytes | None) -> bool:
    """Whether the checkpoint carries a valid signature made with ``key``.

    Returns:
        True when signed and the signature matches; False when unsigned or no key is given.

    Raises:
        UntrustedCheckpoint: The checkpoint is signed and the signature does not match ``key``.
    """
    path = checkpoint / SIGNATURE
    if key is None or not path.exists():
        return False
    given = path.read_text().strip()
    expected = signature((checkpoint / MANIFEST).read_bytes(), key)
    if not hmac.compare_digest(given, expected):
        raise UntrustedCheckpoint(
            f"{path}: the signature does not match your checkpoint key; the checkpoint was "
            "changed or signed with another key, and is not loaded"
        )
    return True


def code_paths(config: dict, prefix: str = "") -> list[tuple[str, str]]:
    """Every ``(field, "module:function")`` a config dict names (secret references aside)."""
    found = []
    for key, value in config.items():
        field = f"{prefix}{key}"
        if isinstance(value, dict):
            found += code_paths(value, f"{field}.")
        elif isinstance(value, str) and key not in SECRET_KEYS and is_foreign_code(value):
            found.append((field, value))
    return found


def is_foreign_code(value: str) -> bool:
    """Whether a config value is a ``module:function`` path relayrl does not ship."""
    return (
        bool(CODE_PATH.match(value)) and not value.startswith(NAMES) and value not in SHIPPED_PATHS
    )


def named_modules(config: dict) -> tuple[str, ...]:
    """The modules of the code paths a config dict names (a caller's own config: trusted)."""
    return tuple(path.partition(":")[0] for _, path in code_paths(config))


def allowed(path: str, modules: Iterable[str]) -> bool:
    """Whether ``path``'s module is one of ``modules`` or inside one of them."""
    module = path.partition(":")[0]
    return any(module == name or module.startswith(f"{name}.") for name in modules)


def check_code(
    config: dict, *, allow_modules: Sequence[str] = (), signed: bool = False, where: Path
) -> None:
    """Refuses a checkpoint config naming code outside ``allow_modules`` (unless ``signed``).

    Raises:
        UntrustedCheckpoint: Naming the field, the code and how to allow it.
    """
    if signed:
        return
    for field, path in code_paths(config):
        if not allowed(path, allow_modules):
            module = path.partition(":")[0]
            raise UntrustedCheckpoint(
                f"{where}: {field} names the code {path!r}, which loading would run; load only "
                f"checkpoints you trust: pass --allow-module {module.split('.')[0]} "
                f"(allow_modules=[{module.split('.')[0]!r}]), or sign your checkpoints "
                "(checkpoint.signing_key) and load with the key"
            )


def add_trust_arguments(parser) -> None:
    """Adds ``--allow-module`` and ``--checkpoint-key`` to a command that loads checkpoints."""
    parser.add_argument(
        "--allow-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="let the checkpoint's config name module:function code from MODULE (and its "
        "submodules); without it such a checkpoint is refused (repeatable)",
    )
    parser.add_argument(
        "--checkpoint-key",
        metavar="env:NAME|file:PATH",
        help="the HMAC key checkpoints are signed with (default: $RELAYRL_CHECKPOINT_KEY); a "
        "checkpoint it signed is trusted, one whose signature does not match is refused",
    )


def trust_options(args) -> dict:
    """``allow_modules`` and ``key`` from the arguments of :func:`add_trust_arguments`.

    Raises:
        CheckpointError: If the key cannot be read.
    """
    return {"allow_modules": tuple(args.allow_module), "key": signing_key(args.checkpoint_key)}
