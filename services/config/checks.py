"""Refusals of what an algorithm cannot run, read from its recipe (no torch).

:func:`check` runs when a :class:`~services.config.sections.RunConfig` is built (the config's
fields against the recipe); :func:`check_spaces` runs once the env's spaces are known (before
any actor starts). Both raise :class:`~services.config.recipes.AlgorithmConfigError` naming the
field; the callers turn it into ``ConfigError``. No branch names an algorithm: each asks a field
of the recipe (``loop``, ``actions``, ``pixel_network``, ``transform``, ``multi_agent``,
``one_step_per_batch``).
"""

from __future__ import annotations

import gymnasium as gym

from collector.envs.spaces import ObservationDict, describe
from collector.networks.builders import MULTI_INPUT, flat_obs_dim, is_pixels
from services.config import multiagent
from services.config.actions import factorised_actions
from services.config.recipes import ALGORITHMS, AlgorithmConfigError

# The algorithms that may store stacked frames once in replay (replay.frame_stack).
_FRAME_STACKING = tuple(
    name for name, algo in ALGORITHMS.items() if algo.pixel_network and not algo.on_policy
)


def check(config) -> None:
    """Refuses combinations the algorithm cannot run (spaces: :func:`check_spaces`).

    Raises:
        AlgorithmConfigError: Naming the field.
    """
    algo = ALGORITHMS[config.algorithm]
    learner, collector = config.learner, config.collector
    if collector.action_noise != "white" and algo.epsilon_greedy:
        raise AlgorithmConfigError(
            f"collector.action_noise: colors the noise of a Gaussian policy (an algorithm that "
            f"samples its own actions, on continuous actions); {algo.name} explores "
            f"epsilon-greedily, got {collector.action_noise!r}"
        )
    _check_registered(config, algo)
    _check_sequences(config, algo)
    if learner.recurrent != "none" and not algo.recurrent:
        takes = sorted(name for name, other in ALGORITHMS.items() if other.recurrent)
        raise AlgorithmConfigError(
            f"learner.recurrent: {algo.name} trains feed-forward networks only (recurrent: "
            f"{', '.join(takes) or 'none yet'}), got {learner.recurrent!r}"
        )
    if learner.recurrent != "none" and learner.loss.startswith("torchrl:"):
        raise AlgorithmConfigError(
            f"learner.loss: {learner.loss} trains feed-forward networks; a recurrent policy "
            f"(learner.recurrent={learner.recurrent!r}) trains with relayrl's {algo.loss!r} loss"
        )
    if ":" not in learner.loss and learner.loss != algo.loss:
        raise AlgorithmConfigError(
            f"learner.loss: algorithm {algo.name} trains with {algo.loss!r} (or a "
            f"'module:factory' loss), got {learner.loss!r}"
        )
    if learner.network and learner.loss.startswith("torchrl:") and algo.on_policy:
        raise AlgorithmConfigError(
            f"learner.network: a user network trains with relayrl's {algo.name} loss; "
            f"learner.loss={learner.loss} reads the built-in actor-critic's critic, "
            f"got {learner.network!r}"
        )
    if learner.loss.startswith("torchrl:"):  # LearnerConfig has checked the torchrl extra
        from learner.losses.torchrl_loss import check_torchrl_options, torchrl_algorithm

        trains = torchrl_algorithm(learner.loss)
        if trains != algo.name:
            raise AlgorithmConfigError(
                f"learner.loss: {learner.loss} trains algorithm {trains}, the run's algorithm is "
                f"{algo.name}"
            )
        try:
            check_torchrl_options(learner.loss, learner.loss_options)
        except ValueError as err:
            raise AlgorithmConfigError(str(err)) from None
    if not algo.on_policy:
        if config.replay.sampler == "fifo":
            raise AlgorithmConfigError(
                f"replay.sampler: {algo.name} is off-policy and needs uniform or prioritized "
                "(fifo is for on-policy algorithms), got 'fifo'"
            )
        if algo.multi_agent:
            try:
                multiagent.check(config)
            except multiagent.MultiAgentConfigError as err:
                raise AlgorithmConfigError(str(err)) from None
        return
    options = learner.onpolicy
    if config.replay.sampler != "fifo":
        raise AlgorithmConfigError(
            f"replay.sampler: {algo.name} is on-policy and needs 'fifo', got "
            f"{config.replay.sampler!r}"
        )
    if config.controller.init_random_frames:
        raise AlgorithmConfigError(
            f"controller.init_random_frames: {algo.name} learns from its own samples only; "
            f"must be 0, got {config.controller.init_random_frames}"
        )
    if algo.loop == "async":
        _check_async(config, algo)
        return
    if algo.one_step_per_batch and (options.num_epochs, options.num_minibatches) != (1, 1):
        raise AlgorithmConfigError(
            f"learner.onpolicy.num_epochs: {algo.name.upper()} takes one gradient step per "
            "batch; num_epochs and num_minibatches must be 1, got "
            f"{options.num_epochs} and {options.num_minibatches}"
        )
    if options.bptt_length and learner.recurrent == "none":
        raise AlgorithmConfigError(
            "learner.onpolicy.bptt_length: cuts a recurrent policy's rollouts into sequences; "
            f"set learner.recurrent (lstm or gru) or leave it 0, got {options.bptt_length}"
        )
    if algo.transform == "episodes":
        return  # the batch is whatever complete episodes make
    batch, items = collector.fleet_size * collector.rollout_frames, "transitions"
    length = algo.sequence_length(config)
    if length:  # a recurrent policy's sequences (collector.sequences)
        steps = collector.rollout_frames // collector.envs_per_collector
        if steps % length or collector.rollout_frames % collector.envs_per_collector:
            raise AlgorithmConfigError(
                f"learner.onpolicy.bptt_length: must divide the {steps} steps per env of a "
                "rollout (collector.rollout_frames / collector.envs_per_collector, a whole "
                f"number), got {options.bptt_length}"
            )
        batch, items = batch // length, f"sequences of {length} steps"
    if batch % options.num_minibatches:
        raise AlgorithmConfigError(
            f"learner.onpolicy.num_minibatches: must divide the batch of {batch} {items} "
            f"(collector.num_collectors x collector.rollout_frames), got {options.num_minibatches}"
        )
    minibatch = batch // options.num_minibatches
    if minibatch % learner.world_size:
        raise AlgorithmConfigError(
            f"learner.world_size: each minibatch of {minibatch} is split across the ranks; "
            f"must divide it, got {learner.world_size}"
        )
    per_shard = -(-collector.fleet_size // config.replay.num_shards) * collector.rollout_frames
    if per_shard > config.replay.shard_capacity:
        raise AlgorithmConfigError(
            f"replay.capacity: each shard must hold one iteration's {per_shard} transitions, "
            f"got {config.replay.shard_capacity} per shard"
        )


def _check_sequences(config, algo) -> None:
    """Refuses sequence replay where nothing trains from it, and what it cannot carry yet.

    Sequences (``replay.sequence_length``) are what an off-policy recurrent algorithm learns
    from; without them its collectors would write transitions its loss cannot read. With
    ``replay.frame_stack`` they store each frame of their stacked pixel observations once
    (``replay.sequence_frames``; :func:`check_spaces` checks the stack against the env's).
    """
    replay, collector = config.replay, config.collector
    recurrent = config.learner.recurrent != "none"
    takes = not algo.on_policy and algo.recurrent
    if takes and recurrent and not replay.sequences:
        raise AlgorithmConfigError(
            f"replay.sequence_length: {algo.name} with learner.recurrent learns from sequences "
            "(>= 2), got 0"
        )
    if not replay.sequences:
        return
    if not (takes and recurrent):
        raise AlgorithmConfigError(
            "replay.sequence_length: sequences are for an off-policy algorithm with "
            f"learner.recurrent (lstm or gru), got {replay.sequence_length} with algorithm "
            f"{algo.name} and learner.recurrent={config.learner.recurrent!r}"
        )
    if replay.frame_stack == 1:
        raise AlgorithmConfigError(
            "replay.frame_stack: with replay.sequence_length a sequence's observations of one "
            "frame each are already stored once; set 0, or the env's frame stack (>= 2) to "
            "store each frame of stacked observations once, got 1"
        )
    refused = [
        (collector.action_mask_key, "collector.action_mask_key", "sequences carry no masks"),
        (replay.sampler == "fifo", "replay.sampler", "sequences are sampled off-policy"),
    ]
    for bad, field, why in refused:
        if bad:
            raise AlgorithmConfigError(
                f"{field}: not with replay.sequence_length ({why}); got {bad!r}"
            )


def _check_async(config, algo) -> None:
    """The asynchronous loop's queue, batch and lag (``services.driver.loops.asynchronous``)."""
    learner, collector, replay = config.learner, config.collector, config.replay
    if config.run.deterministic:
        raise AlgorithmConfigError(
            f"run.deterministic: {algo.name}'s asynchronous loop trains on chunks as they arrive "
            "(the policy lag depends on timing); use a lockstep on-policy algorithm, got true"
        )
    if learner.max_policy_lag < 1:
        raise AlgorithmConfigError(
            f"learner.max_policy_lag: {algo.name}'s collectors act with weights at least one "
            f"version behind the learner while it trains; must be >= 1, got "
            f"{learner.max_policy_lag}"
        )
    if not replay.fifo_queue:
        raise AlgorithmConfigError(
            f"replay.fifo_queue: {algo.name}'s learner queue hands each chunk out once; must be "
            "true, got false"
        )
    options = learner.vtrace
    per_rank, ranks = divmod(learner.global_batch_size, learner.world_size)
    if ranks or per_rank % options.num_minibatches:
        raise AlgorithmConfigError(
            f"learner.global_batch_size: the {learner.global_batch_size} chunks of a round are "
            f"split over {learner.world_size} ranks and each rank's share into "
            f"learner.vtrace.num_minibatches={options.num_minibatches}; must divide evenly"
        )
    queue = options.queue_batches * learner.global_batch_size
    inflight = collector.fleet_size * collector.max_inflight * collector.envs_per_collector
    if replay.capacity < 2 * (queue + inflight):
        raise AlgorithmConfigError(
            f"replay.capacity: the learner queue ({options.queue_batches} batches of "
            f"{learner.global_batch_size} chunks) and the chunks in flight ({inflight}) need "
            f"twice their {queue + inflight} chunks of room; got {replay.capacity}"
        )


def _check_registered(config, algo) -> None:
    """The fields the registration fixes, then the checks it adds."""
    for field, value in algo.fixed.items():
        section, _, name = field.rpartition(".")
        node = config
        for part in section.split("."):
            node = getattr(node, part)
        got = getattr(node, name)
        if got != value:
            raise AlgorithmConfigError(
                f"{field}: algorithm {algo.name} fixes it to {value!r}, got {got!r} (choose the "
                "algorithm instead)"
            )
    for extra in algo.checks:
        try:
            extra(config)
        except ValueError as err:
            raise AlgorithmConfigError(str(err)) from None


def _check_key_frames(config, algo, obs_space: ObservationDict) -> None:
    """Refuses ``replay.frame_stack`` with a ``Dict`` observation unless one key can take it.

    Frames are stored once for one image key stacking ``replay.frame_stack`` frames
    (``collector.image_keys``), by an off-policy algorithm without external actors.
    """
    stack = config.replay.frame_stack
    stacked = [image.key for image in obs_space.images if image.frame_stack == stack]
    if algo.name not in _FRAME_STACKING or len(stacked) != 1:
        raise AlgorithmConfigError(
            f"replay.frame_stack: with a Dict observation, stores the frames of one image key "
            f"once; it needs algorithm {' or '.join(_FRAME_STACKING)} and exactly one key of "
            f"collector.image_keys with frame_stack: {stack} (got algorithm {algo.name}, "
            f"stacked keys {stacked}, collector.image_keys "
            f"{ {i.key: i.frame_stack for i in obs_space.images} }); set replay.frame_stack=0 "
            "to store whole observations"
        )
    if config.grpc.enabled:
        raise AlgorithmConfigError(
            "grpc.port: external actors insert stacked observations, which a "
            "frame-deduplicated replay (replay.frame_stack) does not take; set "
            f"replay.frame_stack=0 to serve them, got port {config.grpc.port}"
        )


def check_spaces(config, obs_space: gym.Space, action_space: gym.Space) -> None:
    """Refuses env spaces the algorithm cannot use (no torch needed).

    What a recipe takes is read from its fields: ``actions``, ``pixel_network`` (frames, and
    stored once in an off-policy replay with ``replay.frame_stack``), ``multi_agent``.

    Raises:
        AlgorithmConfigError: Naming ``collector.env_id``.
    """
    algo = ALGORITHMS[config.algorithm]
    if algo.multi_agent:
        try:
            return multiagent.check_spaces(config, obs_space, action_space)
        except multiagent.MultiAgentConfigError as err:
            raise AlgorithmConfigError(str(err)) from None
    if config.replay.sequences and not isinstance(obs_space, gym.spaces.Box):
        raise AlgorithmConfigError(
            f"replay.sequence_length: sequences store array observations (a Box); "
            f"{config.collector.env_id} has {obs_space}"
        )
    if factorised_actions(config, obs_space, action_space):  # MultiDiscrete, MultiBinary
        return
    discrete = isinstance(action_space, gym.spaces.Discrete)
    box = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    if (algo.actions == "discrete" and not discrete) or (algo.actions == "continuous" and not box):
        kind = "a discrete" if algo.actions == "discrete" else "a continuous (Box)"
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} needs {kind} action space, "
            f"{config.collector.env_id} has {action_space}"
        )
    if config.collector.action_noise != "white" and not box:
        raise AlgorithmConfigError(
            f"collector.action_noise: colors a Gaussian policy's noise over continuous actions, "
            f"{config.collector.env_id} has {action_space}; got {config.collector.action_noise!r}"
        )
    if not (discrete or box):
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} needs a Discrete or flat Box action space, "
            f"{config.collector.env_id} has {action_space}"
        )
    pixels = algo.pixel_network is not None and is_pixels(obs_space)
    if pixels and not discrete:
        raise AlgorithmConfigError(
            f"collector.env_id: {algo.name} on pixels needs a discrete action space, "
            f"{config.collector.env_id} has {action_space}"
        )
    if pixels and algo.on_policy and not config.replay.frame_stack:
        return  # e.g. a categorical actor-critic with a CNN torso (collector.networks.cnn)
    if pixels and not algo.on_policy:  # frames may be stored once (replay.frame_stack)
        if config.replay.frame_stack not in (0, obs_space.shape[0]):
            raise AlgorithmConfigError(
                f"replay.frame_stack: must be 0 or the env's frame stack "
                f"{obs_space.shape[0]}, got {config.replay.frame_stack}"
            )
        if config.replay.frame_stack and config.grpc.enabled:
            raise AlgorithmConfigError(
                "grpc.port: external actors insert stacked observations, which a "
                "frame-deduplicated replay (replay.frame_stack) does not take; set "
                f"replay.frame_stack=0 to serve them, got port {config.grpc.port}"
            )
        return  # e.g. a Q-network with a CNN torso over the frames (collector.networks.cnn)
    if config.replay.frame_stack and isinstance(obs_space, ObservationDict):
        _check_key_frames(config, algo, obs_space)
    elif config.replay.frame_stack:
        raise AlgorithmConfigError(
            f"replay.frame_stack: needs stacked uint8 frames [S, H, W] and algorithm "
            f"{' or '.join(_FRAME_STACKING)} (on-policy tables keep stacks), "
            f"{config.collector.env_id} has {obs_space}; got {config.replay.frame_stack}"
        )
    network = algo.network_for(obs_space)
    try:
        if network in MULTI_INPUT.values():  # Dict/Tuple, Discrete, ...: the per-key encoder
            describe(obs_space, env_id=config.collector.env_id)
        else:
            flat_obs_dim(config.collector.env_id, obs_space)
    except ValueError as err:
        raise AlgorithmConfigError(str(err)) from None
