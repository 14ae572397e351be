"""Literal secrets handed to the run's shards as private files, never as Ray arguments.

A literal ``grpc.token`` or ``grpc.actor_token`` (accepted only on loopback, see
``services.config.grpc``) would reach every replay shard that serves direct writes as a Ray
call argument, which Ray keeps where anyone who reaches the cluster may read it.
:class:`SpilledSecrets` writes each one to a file only its user can read (mode 0600 in a
0700 directory, in ``/dev/shm`` where there is one, so it never reaches a disk) and the shards
get its ``file:`` reference instead; the files go when the server stops. Shards on another
node cannot read them: beyond one machine give ``env:NAME`` or ``file:PATH`` references.

Examples:
    >>> from services.config.grpc import GrpcConfig
    >>> spilled = SpilledSecrets(GrpcConfig(token="s3cret", actor_token="env:ACTOR"))
    >>> sorted(spilled.refs), spilled.refs["token"].startswith("file:")
    (['token'], True)
    >>> open(spilled.refs["token"][5:]).read().strip()
    's3cret'
    >>> spilled.close()
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from services.config.grpc import SECRET_FIELDS, GrpcConfig, is_reference

SHARED_MEMORY = "/dev/shm"


class SpilledSecrets:
    """The ``file:`` references of ``config``'s literal secrets, written on construction.

    Args:
        config: The ``grpc`` section.

    Attributes:
        refs: ``{field: "file:PATH"}`` for each literal secret (empty without one).
    """

    def __init__(self, config: GrpcConfig) -> None:
        self.refs: dict[str, str] = {}
        self.directory: str | None = None
        literals = {
            field: secret
            for field in SECRET_FIELDS
            if (secret := getattr(config, field)) is not None and not is_reference(secret)
        }
        if not literals:
            return
        where = SHARED_MEMORY if os.path.isdir(SHARED_MEMORY) else None
        self.directory = tempfile.mkdtemp(prefix="relayrl-secrets-", dir=where)  # mode 0700
        for field, secret in literals.items():
            path = Path(self.directory) / field
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secret + "\n")
            self.refs[field] = f"file:{path}"

    def close(self) -> None:
        """Removes the files."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
