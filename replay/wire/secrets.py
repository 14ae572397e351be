"""Secrets by reference: what a server is told is where its secrets live, never the secrets.

A credential is given as ``env:NAME`` (an environment variable) or ``file:PATH`` (a file's
first line) and read by the process that serves with it (:func:`resolve_secret`); TLS material
as the paths of its PEM files. The driver hands replay shards only these references as Ray
call arguments (which Ray keeps in its object store and task specs, readable by anyone who can
reach the cluster), and each shard reads them on its own node with :func:`served_options`: on a
cluster the variable or the files must exist on every node that holds a shard (a Kubernetes
secret mounted in every pod, files at the same path on every machine).

Examples:
    >>> options = served_options({"operator": "env:NO_SUCH_VARIABLE_SET", "tls_files": None})
    Traceback (most recent call last):
    ...
    ValueError: grpc.token: environment variable NO_SUCH_VARIABLE_SET is unset or empty
"""

from __future__ import annotations

import os
from pathlib import Path

# Option -> the config field it comes from (errors name the field).
CREDENTIALS = {"operator": "grpc.token", "actor": "grpc.actor_token"}


def is_reference(secret: str) -> bool:
    """Whether a secret names where it lives (``env:NAME``, ``file:PATH``) instead of being it."""
    return secret.startswith(("env:", "file:"))


def resolve_secret(field: str, secret: str | None) -> str | None:
    """The secret ``env:NAME`` or ``file:PATH`` names (a literal as is).

    Raises:
        ValueError: Naming ``field``: an unset variable, an unreadable or empty file.
    """
    if secret is None or not is_reference(secret):
        return secret
    kind, _, where = secret.partition(":")
    if kind == "env":
        value = os.environ.get(where, "")
        if not value:
            raise ValueError(f"{field}: environment variable {where} is unset or empty")
        return value
    try:
        lines = Path(where).expanduser().read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{field}: cannot read the secret file {where}: {err}") from None
    if not lines or not lines[0].strip():
        raise ValueError(f"{field}: the secret file {where} is empty")
    return lines[0].strip()


def served_options(options: dict) -> dict:
    """A shard's server options with its secrets read here, from their references.

    Args:
        options: ``operator``/``actor`` as references (or None) and ``tls_files`` as
            ``(cert_file, key_file, client_ca_file)`` paths (or None); the rest is kept.
            Options that already hold the material (``tls``, literal credentials: a server
            started in the process that read them) are kept as they are.

    Returns:
        The options with ``operator``, ``actor`` and ``tls``
        (:class:`replay.wire.transport.ServerTls`) holding the secrets.

    Raises:
        ValueError: Naming the field whose variable or file cannot be read on this node.
    """
    out = dict(options)
    for option, field in CREDENTIALS.items():
        out[option] = resolve_secret(field, out.get(option))
    files = out.pop("tls_files", None)
    if files is not None:
        from replay.wire.transport import ServerTls  # grpc: imported when a server starts

        cert, key, ca = files
        try:
            out["tls"] = ServerTls.from_files(cert, key, ca)
        except OSError as err:
            raise ValueError(
                f"grpc.tls: cannot read {err.filename} on this node: {err.strerror}"
            ) from None
    return out
