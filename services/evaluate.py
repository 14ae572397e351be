"""``python -m services.evaluate``: play a trained policy, print its returns, record videos.

Examples:
    python -m services.evaluate ~/relayrl_results/<run id> --episodes 10
    python -m services.evaluate ~/relayrl_results/<run id> --episodes 3 --video videos/
    python -m services.evaluate <run dir>/checkpoints/ckpt-000000030000-0 --stochastic --seed 7

PATH is a run directory, a rotation directory or a checkpoint (the newest valid one is used).
The policy plays on the run's evaluation env with the evaluator's seeds (``--seed``, default
the run's seed), so the defaults replay the run's own evaluation of that version exactly. One
line per episode, then a JSON object as the last line: ``return_mean``, ``return_std``,
``episodes``, ``video_files``, ``returns``, ``lengths``, ``seed``, ``version``, ``checkpoint``.
Videos (``--video DIR``, gymnasium's ``RecordVideo``) need ``pip install "relayrl[video]"``.
Exit codes: 0 done, 2 invalid input (no checkpoint, a missing extra), 1 failure.
"""

from __future__ import annotations

import argparse
import json
import sys

PROG = "python -m services.evaluate"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command's argument parser (``prog``: how the user called it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0].split(": ", 1)[1],
        epilog="examples:\n"
        f"  {prog} ~/relayrl_results/<run id> --episodes 10\n"
        f"  {prog} ~/relayrl_results/<run id> --episodes 3 --video videos/\n"
        f"  {prog} <run dir> --stochastic --seed 7 --set evaluation.num_envs=4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "path", metavar="PATH", help="run directory, rotation directory or checkpoint"
    )
    parser.add_argument(
        "--episodes", type=int, help="episodes to play (default: the run's evaluation.episodes)"
    )
    parser.add_argument(
        "--seed", type=int, help="seed of the envs' resets (default: the run's seed)"
    )
    parser.add_argument("--video", metavar="DIR", help="record videos of the episodes into DIR")
    parser.add_argument(
        "--video-every",
        type=int,
        default=1,
        metavar="N",
        help="record every N-th episode of each env (default 1)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        dest="deterministic",
        action="store_true",
        default=True,
        help="greedy, mode or mean actions (default)",
    )
    mode.add_argument(
        "--stochastic",
        dest="deterministic",
        action="store_false",
        help="sample actions as the run's collectors did",
    )
    parser.add_argument("--device", default="cpu", help="where the network runs (default cpu)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override the run's config, e.g. evaluation.num_envs=4 (repeatable)",
    )
    from services.checkpoints.trust import add_trust_arguments

    add_trust_arguments(parser)
    return parser


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Runs the command; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    from replay.persist.npyio import CheckpointError
    from services.checkpoints.trust import trust_options
    from services.config import ConfigError, parse_override
    from services.evaluation.playback import evaluate_policy
    from services.policy import load_policy

    try:
        overrides = {".".join(keys): value for keys, value in map(parse_override, args.set)}
        policy = load_policy(
            args.path, device=args.device, overrides=overrides, **trust_options(args)
        )
        result = evaluate_policy(
            policy,
            episodes=args.episodes,
            seed=args.seed,
            deterministic=args.deterministic,
            video_dir=args.video,
            video_every=args.video_every,
        )
    except (ConfigError, CheckpointError, ValueError) as err:
        print(f"relayrl: {err}", file=sys.stderr)
        return 2
    for i, (ret, length) in enumerate(zip(result["returns"], result["lengths"], strict=True)):
        print(f"episode {i + 1}: return {ret:.2f}, length {length}")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
