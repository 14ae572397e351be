"""``python -m services.scale``: resize a running job over its gRPC control plane.

Calls ``Control/Scale`` on the run's gRPC server (``grpc.port``; the run logs its address at
start) with the operator credential (``grpc.token``). Collectors join or leave without pausing
the others, replay shards change at a loop boundary (removed ones drained first), the learner
world size changes at a round boundary as a new generation (``services.driver.elastic``). A
size not given keeps its value. Prints the run's target sizes and the seconds the resize took
as one JSON line; exit code 2 when the run refuses the sizes (the message names the field).

Examples:
    python -m services.scale --address 127.0.0.1:50051 --token $TOKEN --collectors 8
    python -m services.scale --address 127.0.0.1:50051 --token $TOKEN --shards 3 --world-size 2
"""

from __future__ import annotations

import argparse
import json
import sys

import grpc

from services.grpc.client import RelayClient
from services.grpc.tokens import add_token_arguments, token_from_args


def build_parser(prog: str = "python -m services.scale") -> argparse.ArgumentParser:
    """The command's arguments."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[1],
        epilog=(
            "examples:\n"
            f"  {prog} --address 127.0.0.1:50051 --token $TOKEN --collectors 8\n"
            f"  {prog} --address 127.0.0.1:50051 --token $TOKEN --shards 3 --world-size 2"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--address", required=True, help="host:port of the run's gRPC server")
    add_token_arguments(parser, "the run's operator grpc.token")
    parser.add_argument("--ca-file", default=None, help="PEM CA of the server's certificate (TLS)")
    parser.add_argument("--cert-file", default=None, help="PEM client certificate (mutual TLS)")
    parser.add_argument("--key-file", default=None, help="PEM key of --cert-file (mutual TLS)")
    parser.add_argument("--collectors", type=int, default=0, help="collector actors")
    parser.add_argument("--shards", type=int, default=0, help="replay shards")
    parser.add_argument("--world-size", type=int, default=0, help="learner ranks")
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="answer once the targets are set, not once every collector has joined or left",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m services.scale") -> int:
    """Runs the command; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    if not (args.collectors or args.shards or args.world_size):
        print("nothing to do: give --collectors, --shards or --world-size", file=sys.stderr)
        return 2
    try:
        token = token_from_args(args)
    except ValueError as err:
        print(f"relayrl: {err}", file=sys.stderr)
        return 2
    client = RelayClient(
        args.address,
        token=token,
        timeout=args.timeout,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
    )
    try:
        reply = client.scale(
            num_collectors=args.collectors,
            num_shards=args.shards,
            world_size=args.world_size,
            wait=not args.no_wait,
        )
    except grpc.RpcError as err:
        print(f"scale refused: {err.code().name}: {err.details()}", file=sys.stderr)
        return 2 if err.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    finally:
        client.close()
    result = {
        "num_collectors": reply.num_collectors,
        "num_shards": reply.num_shards,
        "world_size": reply.world_size,
        "seconds": round(reply.seconds, 3),
        "frames": reply.frames,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
