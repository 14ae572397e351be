"""``relayrl``: the command on the PATH, one subcommand per ``python -m services.<name>`` module.

Examples:
    relayrl train --config deploy/configs/cartpole_dqn.yaml --set seed=1
    relayrl evaluate ~/relayrl_results/<run id> --episodes 3 --video videos/
    relayrl export ~/relayrl_results/<run id> --format onnx --out policy.onnx
    relayrl --version

``relayrl <command> ARGS`` runs ``python -m services.<command> ARGS`` in this process (the
``python -m`` forms keep working, e.g. in ``ray job submit`` entrypoints); ``relayrl <command>
--help`` shows the command's options and examples. Installed by ``pip install relayrl`` as a
``[project.scripts]`` entry point.
"""

from __future__ import annotations

import importlib
import sys

from learner.algorithms import featured_config

# name -> (module, one line of help)
COMMANDS = {
    "train": ("services.train", "run a training job"),
    "sweep": ("services.sweep", "several runs at once: seeds and a grid over config values"),
    "tune": ("services.tune", "adaptive search on Ray Tune: PBT, PB2, ASHA over relayrl runs"),
    "evaluate": ("services.evaluate", "play a trained policy, print its returns, record videos"),
    "export": ("services.export", "write a policy's forward as pt2 or ONNX"),
    "plot": ("services.plot", "learning curves of a run directory"),
    "scale": ("services.scale", "resize a running job: collectors, replay shards, learner ranks"),
    "bench": ("services.bench.__main__", "driver-side benchmarks (relayrl bench <name>)"),
}


def version() -> str:
    """The installed distribution's version (``unknown`` when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("relayrl")
    except PackageNotFoundError:
        return "unknown"


def usage() -> str:
    """The top-level help: the commands and examples."""
    width = max(map(len, COMMANDS))
    lines = ["usage: relayrl [--version] <command> [args]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += [
        "",
        "examples:",
        f"  relayrl train --config deploy/configs/{featured_config('help')} --set seed=1",
        "  relayrl evaluate ~/relayrl_results/<run id> --episodes 3 --video videos/",
        "  relayrl export ~/relayrl_results/<run id> --format pt2 --out policy.pt2",
        "",
        "relayrl <command> --help shows a command's options and examples.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs ``relayrl``; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"relayrl {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"relayrl: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return module.main(rest, prog=f"relayrl {name}")


if __name__ == "__main__":
    sys.exit(main())
