"""Dispatches ``python -m services.bench <name> [args]`` to its module's ``main``.

The modules live in sub-packages by concern (:data:`MODULES`): ``learning``, ``pixels``, ``wire``
and ``runtime``.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = (
    "grpc",
    "solve",
    "learn",
    "atari",
    "marl",
    "soak",
    "checkpoint",
    "hostile",
    "scale",
    "determinism",
    "elastic",
    "startup",
    "async",
    "tune",
    "spaces",
    "recurrent",
)
# The module of each subcommand, under services.bench (``async`` is a Python keyword).
MODULES = {
    "grpc": "wire.grpc",
    "solve": "learning.solve",
    "learn": "learning.learn",
    "atari": "pixels.atari",
    "marl": "learning.marl",
    "soak": "runtime.soak",
    "checkpoint": "runtime.checkpoint",
    "hostile": "wire.hostile",
    "scale": "runtime.scale",
    "determinism": "runtime.determinism",
    "elastic": "runtime.elastic",
    "startup": "runtime.startup",
    "async": "runtime.async_bench",
    "tune": "learning.tune",
    "spaces": "runtime.spaces",
    "recurrent": "runtime.recurrent",
}


def main(argv: list[str], prog: str = "python -m services.bench") -> int:
    """Runs a subcommand; returns its exit code (``prog``: how the user called it)."""
    names = ",".join(SUBCOMMANDS)
    text = (
        f"usage: {prog} {{{names}}} [args]\n\nexamples:\n  {prog} solve --help\n  {prog} checkpoint"
    )
    if argv and argv[0] in ("-h", "--help"):
        print(text)
        return 0
    if not argv or argv[0] not in SUBCOMMANDS:
        print(text, file=sys.stderr)
        return 2
    module = MODULES[argv[0]]
    return importlib.import_module(f"services.bench.{module}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
