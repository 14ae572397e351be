"""Credentials for the commands that call a run (``external_actor``, ``scale``), off argv.

A secret given as ``--token s3cret`` is readable by every local user (``ps``, ``/proc``), so
each command takes it from a file (``--token-file PATH``: its first line), from a reference
(``--token env:NAME`` or ``--token file:PATH``, as ``grpc.token`` takes it), or from the
``RELAYRL_TOKEN`` environment variable. A literal ``--token`` still works, for loopback tests.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_token_arguments(parser, "the run's grpc.token")
    >>> token_from_args(parser.parse_args(["--token", "env:NO_SUCH_VARIABLE_SET"]))
    Traceback (most recent call last):
    ...
    ValueError: --token: environment variable NO_SUCH_VARIABLE_SET is unset or empty
"""

from __future__ import annotations

import argparse
import os

from services.config.grpc import resolve_secret

TOKEN_ENV = "RELAYRL_TOKEN"


def add_token_arguments(parser: argparse.ArgumentParser, which: str) -> None:
    """Adds ``--token`` and ``--token-file`` (``which``: the credential, for the help)."""
    parser.add_argument(
        "--token",
        default=None,
        help=f"{which}: env:NAME or file:PATH (a literal secret is visible to local users; "
        f"default: ${TOKEN_ENV})",
    )
    parser.add_argument("--token-file", metavar="PATH", help=f"a file whose first line is {which}")


def token_from_args(args: argparse.Namespace) -> str | None:
    """The secret the arguments of :func:`add_token_arguments` name (None: none given).

    Raises:
        ValueError: Naming the option whose file or variable cannot be read.
    """
    if args.token_file:
        return resolve_secret("--token-file", f"file:{args.token_file}")
    if args.token:
        return resolve_secret("--token", args.token)
    return os.environ.get(TOKEN_ENV) or None
