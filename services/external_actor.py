"""``python -m services.external_actor``: an example actor outside Ray, fed over gRPC.

A plain process (not a Ray worker) that runs a gymnasium vector env with the run's policy:
it reads the run's n-step and network settings from ``GetStatus``, fetches weights newer
than the ones it holds, acts epsilon-greedily with the run's current epsilon, builds the same
n-step transitions as a collector (:class:`collector.rollout.RolloutWorker`, a pure core) and
inserts them (``--direct``: straight into the replay shards, for a run with
``grpc.direct_writes``). A recurrent run's actor (``replay.sequence_length``, e.g.
``algorithm: r2d2``) builds the run's recurrent Q-network, keeps one state per env (zeros at
every episode's first step) and cuts overlapping sequences with the collectors' own
:class:`collector.sequence_worker.SequenceWorker`, each sent with its new steps so the run
counts every step once (:mod:`replay.wire.sequences`). It stops after ``--frames`` or when the
run stops taking experience, and prints a JSON summary as its last line.

The actor trusts only its own host: its env comes from its own command line (``--env``, a
gymnasium id or a ``module:function`` factory, and ``--env-kwargs``). Without ``--env`` it uses
the run's env id from ``GetStatus`` only if that is a registered gymnasium id (a plain
``Name-v1`` or relayrl's own ``relayrl:Name-v1``, no module to import) or one the actor was
allowed with ``--allow-env``; anything else (say ``os:system``) is refused with exit code 2
before it is called. The run's
``env_kwargs`` reach only the operator credential's ``GetStatus``: with the actor credential,
give them with ``--env-kwargs``. TLS: ``--ca-file``
(and ``--cert-file``/``--key-file`` for mutual TLS).

Examples:
    python -m services.external_actor --address 127.0.0.1:50051 --token s3cret --frames 20000
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import grpc
import gymnasium as gym
import numpy as np
import torch

from collector.envs.vector import (
    RELAYRL_PREFIX,
    env_seeds,
    gym_id,
    is_factory_path,
    make_vector_env,
)
from collector.networks.builders import NETWORKS, NetworkOptions, network_for_space
from collector.networks.q_mlp import ModelSpec
from collector.networks.twins import recurrent_network
from collector.rollout import RolloutWorker
from collector.sequence_worker import SequenceLayout, SequenceWorker
from services.grpc.client import RelayClient
from services.grpc.tokens import add_token_arguments, token_from_args

logger = logging.getLogger("relayrl.external_actor")


def build_parser() -> argparse.ArgumentParser:
    """The example's arguments."""
    parser = argparse.ArgumentParser(prog="python -m services.external_actor")
    parser.add_argument("--address", required=True, help="host:port of the run's gRPC server")
    add_token_arguments(parser, "the run's grpc.actor_token (or its operator grpc.token)")
    parser.add_argument("--ca-file", default=None, help="PEM CA of the server's certificate (TLS)")
    parser.add_argument("--cert-file", default=None, help="PEM client certificate (mutual TLS)")
    parser.add_argument("--key-file", default=None, help="PEM key of --cert-file (mutual TLS)")
    parser.add_argument(
        "--env",
        default=None,
        help="the env to act in: a gymnasium id or module:function (default: the run's env id "
        "if it is a registered gymnasium id or allowed by --allow-env)",
    )
    parser.add_argument("--env-kwargs", default=None, help="JSON keyword arguments of --env")
    parser.add_argument(
        "--allow-env",
        action="append",
        default=[],
        metavar="ENV_ID",
        help="a run env id (e.g. a module:function factory) this actor may build (repeatable)",
    )
    parser.add_argument("--frames", type=int, default=10_000, help="frames (env steps) to insert")
    parser.add_argument("--envs", type=int, default=8, help="sub-environments")
    parser.add_argument("--batch-frames", type=int, default=512, help="frames per inserted batch")
    parser.add_argument("--weights-every", type=int, default=4, help="batches between fetches")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--writer-id", default=None)
    parser.add_argument(
        "--direct",
        action="store_true",
        help="insert straight into the replay shards (the run needs grpc.direct_writes)",
    )
    return parser


class UntrustedEnv(ValueError):
    """The run names an env this actor's host does not allow it to build."""


def registered(env_id: str) -> bool:
    """Whether ``env_id`` is a registered gymnasium id, never a module to import.

    A plain ``Name-v1``, or one of relayrl's own (``relayrl:Name-v1``,
    :mod:`collector.envs.memory`).

    Examples:
        >>> registered("CartPole-v1"), registered("relayrl:StatelessCartPole-v1")
        (True, True)
        >>> registered("os:system"), registered("relayrl:os.system")
        (False, False)
    """
    if env_id.startswith(RELAYRL_PREFIX) and not is_factory_path(env_id):
        return gym_id(env_id) in gym.registry
    return ":" not in env_id and env_id in gym.registry


def choose_env(args: argparse.Namespace, served: dict) -> tuple[str, dict]:
    """The env id and kwargs to build: the actor's own, or the run's if this host allows it.

    Raises:
        UntrustedEnv: The run's env id is neither a registered gymnasium id nor allowed.
    """
    if args.env is not None:
        return args.env, json.loads(args.env_kwargs) if args.env_kwargs else {}
    env_id = str(served.get("env_id", ""))
    if env_id not in args.allow_env and not registered(env_id):
        raise UntrustedEnv(
            f"the run's env id {env_id[:80]!r} is not a registered gymnasium id; this actor "
            "builds only what its own host allows: pass --env (or --allow-env ENV_ID)"
        )
    kwargs = served.get("env_kwargs") or {}
    if args.env_kwargs:
        kwargs = json.loads(args.env_kwargs)
    if not isinstance(kwargs, dict):
        raise UntrustedEnv(f"the run's env_kwargs are not a mapping: {str(kwargs)[:80]}")
    return env_id, kwargs


def served_settings(config: dict) -> tuple[int, float, tuple[int, ...]]:
    """``(n_step, gamma, hidden_sizes)`` from the run's config, range-checked.

    Raises:
        UntrustedEnv: For values no run of relayrl serves.
    """
    try:
        n_step = int(config["collector"]["n_step"])
        gamma = float(config["collector"]["gamma"])
        hidden = tuple(int(size) for size in config["learner"]["hidden_sizes"])
    except (KeyError, TypeError, ValueError) as err:
        raise UntrustedEnv(f"the run's status lacks its network settings: {err}") from None
    if not (1 <= n_step <= 1000 and 0 <= gamma <= 1 and all(0 < h <= 1 << 16 for h in hidden)):
        raise UntrustedEnv(f"the run's settings are out of range: {n_step}, {gamma}, {hidden}")
    return n_step, gamma, hidden


def served_observation_keys(config: dict) -> tuple[str, ...]:
    """The run's ``collector.observation_keys`` (the keys of a ``Dict`` observation it stores).

    Raises:
        UntrustedEnv: For anything but a list of short key names.
    """
    keys = (config.get("collector") or {}).get("observation_keys") or ()
    if not isinstance(keys, list | tuple) or not all(
        isinstance(key, str) and 0 < len(key) <= 200 for key in keys
    ):
        raise UntrustedEnv(f"the run's observation_keys are not key names: {str(keys)[:80]}")
    return tuple(keys)


def served_images(config: dict) -> tuple:
    """The run's ``collector.image_keys`` parsed (``collector.envs.images``).

    Raises:
        UntrustedEnv: For anything ``collector.envs.images.parse`` refuses.
    """
    from collector.envs.images import parse

    try:
        return parse((config.get("collector") or {}).get("image_keys") or {})
    except (ValueError, TypeError) as err:
        raise UntrustedEnv(f"the run's image_keys are refused: {str(err)[:120]}") from None


def served_sequences(config: dict) -> tuple[SequenceLayout, str, int] | None:
    """A recurrent run's sequences and core: ``(layout, recurrent, hidden_size)``, or None.

    None for a run that stores transitions (no ``replay.sequence_length``).

    Raises:
        UntrustedEnv: For values no run of relayrl serves.
    """
    replay, learner = config.get("replay") or {}, config.get("learner") or {}
    if not replay.get("sequence_length"):
        return None
    try:
        layout = SequenceLayout(
            int(replay["sequence_length"]),
            int(replay.get("sequence_overlap", 0)),
            int(replay.get("burn_in", 0)),
        )
        recurrent = str(learner["recurrent"])
        hidden = int(learner["recurrent_hidden_size"])
    except (KeyError, TypeError, ValueError) as err:
        raise UntrustedEnv(f"the run's status lacks its sequence settings: {err}") from None
    length, overlap, burn_in = layout.length, layout.overlap, layout.burn_in
    if not (
        2 <= length <= 100_000
        and 0 <= overlap < length
        and 0 <= burn_in < length
        and recurrent in ("lstm", "gru")
        and 0 < hidden <= 1 << 16
    ):
        raise UntrustedEnv(
            f"the run's sequence settings are out of range: {layout}, {recurrent!r}, {hidden}"
        )
    return layout, recurrent, hidden


def actor_spec(env_id: str, envs, hidden_sizes: tuple[int, ...], config: dict):
    """The run's Q-network spec for these envs.

    An MLP over a flat ``Box``, as ever; over a ``Dict``/``Tuple`` observation the multi-input
    network (its options from the run's config, so the served weights load), whose rollouts
    carry each key as its own named field (``observation.<key>``); for a recurrent run
    (:func:`served_sequences`) the recurrent Q-network over either.
    """
    space, actions = envs.single_observation_space, envs.single_action_space
    name = network_for_space("q_mlp", space)
    sequences = served_sequences(config)
    if name == "q_mlp" and sequences is None:
        return ModelSpec(int(np.prod(space.shape)), int(actions.n), hidden_sizes)
    learner, collector = config.get("learner") or {}, config.get("collector") or {}
    recurrent, recurrent_hidden = ("none", 128) if sequences is None else sequences[1:]
    options = NetworkOptions(
        env_id=env_id,
        hidden_sizes=hidden_sizes,
        dueling=bool(learner.get("dueling", False)),
        pixel_torso=str(learner.get("pixel_torso", "nature")),
        discrete_encoding=str(collector.get("discrete_encoding", "one_hot")),
        recurrent=recurrent,
        recurrent_hidden_size=recurrent_hidden,
    )
    return NETWORKS[recurrent_network(name, recurrent)](options, space, actions)


def send(client: RelayClient, request, *, direct: bool, patience_s: float = 60.0):
    """Inserts one batch; retried (same ``seq``: stored once) while the run is still running.

    A replay shard that died answers UNAVAILABLE until Ray has restarted it (a run waits up to
    ``replay.restart_timeout_s``, 60 s by default, for that); a run that stops answers
    UNAVAILABLE for good and reports it in ``GetStatus``. RESOURCE_EXHAUSTED (the server's
    Insert streams are all taken, or this writer is over ``grpc.writer_frames_per_s``) is
    retried the same way.
    """
    deadline = time.monotonic() + patience_s
    delay = 0.1
    retried = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
    while True:
        try:
            return client.insert_direct([request]) if direct else client.insert([request])
        except grpc.RpcError as err:
            if err.code() not in retried or time.monotonic() > deadline:
                raise
            try:
                running = client.status().state == "running"
            except grpc.RpcError:
                running = False
            if not running:
                raise
            logger.warning("insert refused (%s); retrying", err.details())
            time.sleep(delay)  # back off while the shard restarts
            delay = min(2 * delay, 1.0)


def run(args: argparse.Namespace) -> dict:
    """Acts and inserts until ``args.frames`` or the run stops; returns a summary."""
    torch.set_num_threads(1)
    client = RelayClient(
        args.address,
        token=token_from_args(args),
        writer_id=args.writer_id,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
    )
    status = client.status()
    config = json.loads(status.config_json)
    env_id, env_kwargs = choose_env(args, config.get("collector", {}))
    n_step, gamma, hidden_sizes = served_settings(config)
    keys, images = served_observation_keys(config), served_images(config)
    envs = make_vector_env(
        env_id, args.envs, env_kwargs=env_kwargs, observation_keys=keys, images=images
    )
    spec = actor_spec(env_id, envs, hidden_sizes, config)
    network = spec.build().eval()
    policy = spec.make_policy(network, np.random.SeedSequence(args.seed))
    seeds = env_seeds(args.seed, 0, args.envs)
    sequences = served_sequences(config)
    worker: RolloutWorker | SequenceWorker
    if sequences is not None:  # the collectors' cutter; each item says its new steps
        worker = SequenceWorker(envs, policy, seeds, **vars(sequences[0]), new_steps=True)
    else:
        worker = RolloutWorker(envs, policy, seeds, n_step=n_step, gamma=gamma)
    held = (-1, -1)
    inserted = batches = fetches = 0
    returns: list[float] = []
    stopped_by = "frames"
    started = time.perf_counter()
    while inserted < args.frames:
        try:
            if batches % args.weights_every == 0:
                weights = client.get_weights(*held)
                if weights is not None:
                    network.load_state_dict(weights.state_dict)
                    held = weights.key
                    fetches += 1
                status = client.status()
                if batches:
                    logger.info("inserted %d frames; weights version %d", inserted, held[1])
            batch = worker.rollout(max(1, args.batch_frames // args.envs), status.epsilon, held[1])
            if batch.frames == 0:
                continue
            request = client.batch(
                batch.transitions,
                episode_returns=batch.episode_returns,
                episode_lengths=batch.episode_lengths,
            )
            reply = send(client, request, direct=args.direct)
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                stopped_by = f"run: {err.details()}"  # the run stopped or went away
                break
            raise
        inserted += reply.frames_counted
        batches += 1
        returns.extend(batch.episode_returns)
    envs.close()
    client.close()
    wall = time.perf_counter() - started
    return {
        "frames": inserted,
        "batches": batches,
        "weight_fetches": fetches,
        "weights_generation": held[0],
        "weights_version": held[1],
        "episodes": len(returns),
        "episode_return_mean": float(np.mean(returns[-20:])) if returns else None,
        "frames_per_s": round(inserted / max(wall, 1e-9), 1),
        "stopped_by": stopped_by,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the example; prints the JSON summary as the last line."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        summary = run(build_parser().parse_args(argv))
    except UntrustedEnv as err:
        print(f"external_actor: refused: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # a credential that cannot be read
        print(f"external_actor: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
