"""``python -m services.export``: write a policy's forward to a file that runs without relayrl.

Examples:
    python -m services.export ~/relayrl_results/<run id> --format pt2 --out policy.pt2
    python -m services.export ~/relayrl_results/<run id> --format onnx --out policy.onnx

PATH is a run directory, a rotation directory or a checkpoint (the newest valid one is used).
The file maps a batch of observations ``observation [B, *obs_shape]`` to action scores
(``q_values`` or ``logits``: the action is the argmax) or to the action (continuous actions, in
the env's bounds). ``pt2`` loads with ``torch.export.load(FILE).module()``; ``onnx`` runs in
``onnxruntime.InferenceSession(FILE)`` and needs ``pip install "relayrl[onnx]"``. The file is
loaded back and checked against the policy (to 1e-5) before the command succeeds; its last line
of output is a JSON object (``format``, ``out``, ``bytes``, ``input``, ``output``, ``discrete``,
``max_abs_diff``; ``mask`` for masked runs; ``state`` and ``next_state`` for recurrent policies,
whose files take ``(observation, state[, action_mask])`` and return ``(output, next_state)``).
Exit codes: 0 written, 2 invalid input (no checkpoint, a missing extra), 1 the export failed.
"""

from __future__ import annotations

import argparse
import json
import sys

PROG = "python -m services.export"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command's argument parser (``prog``: how the user called it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0].split(": ", 1)[1],
        epilog="examples:\n"
        f"  {prog} ~/relayrl_results/<run id> --format pt2 --out policy.pt2\n"
        f"  {prog} ~/relayrl_results/<run id> --format onnx --out policy.onnx",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "path", metavar="PATH", help="run directory, rotation directory or checkpoint"
    )
    parser.add_argument(
        "--format", required=True, choices=("pt2", "onnx"), help="pt2 (torch.export) or onnx"
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="the file to write")
    parser.add_argument(
        "--batch",
        type=int,
        default=4,
        help="observations in the check against the policy (default 4)",
    )
    parser.add_argument("--device", default="cpu", help="where the network is traced (default cpu)")
    from services.checkpoints.trust import add_trust_arguments

    add_trust_arguments(parser)
    return parser


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Runs the command; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    from replay.persist.npyio import CheckpointError
    from services.checkpoints.trust import trust_options
    from services.config import ConfigError
    from services.policy import load_policy
    from services.policy.export import ExportError, export_policy

    try:
        policy = load_policy(args.path, device=args.device, **trust_options(args))
        result = export_policy(policy, args.format, args.out, batch=args.batch)
    except (ConfigError, CheckpointError, ValueError) as err:
        print(f"relayrl: {err}", file=sys.stderr)
        return 2
    except ExportError as err:
        print(f"relayrl: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
