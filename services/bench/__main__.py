"""Dispatches ``python -m services.bench <name> [args]`` to ``services.bench.<name>.main``."""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = ("grpc", "solve", "learn", "atari", "marl", "soak", "checkpoint")


def main(argv: list[str]) -> int:
    """Runs a subcommand; returns its exit code."""
    if not argv or argv[0] not in SUBCOMMANDS:
        names = ",".join(SUBCOMMANDS)
        print(f"usage: python -m services.bench {{{names}}} [args]", file=sys.stderr)
        return 2
    return importlib.import_module(f"services.bench.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
