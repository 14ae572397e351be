"""Everything that makes experience.

Layout:
    * ``config``: :class:`CollectorConfig` (envs, rollouts, n-step, actors, exploration).
    * ``envs`` (room): ``vector``: vector envs in gymnasium's ``NEXT_STEP`` autoreset mode, from
      a gymnasium id or a ``package.module:function`` factory (with ``env_kwargs``), sync or
      async; per-env seeds derived from the run seed, the collector index and the generation;
      the relayrl extra a gymnasium env family needs (``box2d``, ``mujoco``, ``minigrid``), named
      when it is missing. ``multiagent``: :class:`ParallelVectorEnv`, PettingZoo parallel envs
      (cooperative multi-agent, the ``marl`` extra) as one vector env: agent fields stacked
      ``[num_envs, n_agents, ...]``, the global state, the team reward and team episode ends.
      ``episodes``: :class:`EpisodeTracker`, per-env returns and lengths across rollouts.
      ``framestream``: :class:`FrameStreamBuffer`, n-step transitions written as frame streams
      for frame-deduplicated replay (``replay.frame_stack``). ``masks``: action masks
      (``collector.action_mask_key``) taken out of the observation or read from the info,
      handed to the policy, stored (``action_mask``, ``next_action_mask``) and the forbidden
      actions taken counted (``invalid_actions``). ``connect4``: PettingZoo's Connect Four
      against a random opponent as a single-agent env with a mask.
      ``spaces``: ``Dict``/``Tuple``
      observations flattened by key path (``collector.observation_keys`` keeps some), each key
      stored as its own column ``observation.<key>``; ``images``: per-key image preprocessing
      (``collector.image_keys``); ``testing``: small shipped envs with
      ``Dict`` observations.
    * ``atari``: :func:`make_atari`, Atari envs with the DQN preprocessing (``atari`` extra;
      configs name ``collector.atari:make_atari`` as their env id).
    * ``noise``: :class:`~collector.noise.ColoredNoise`, temporally correlated (pink, red)
      Gaussian noise for Gaussian policies' exploration (``collector.action_noise``).
    * ``networks`` (room): what both collectors and learners import for the run's network: the
      :class:`~collector.networks.NetworkSpec` protocol and its specs (``q_mlp``: the DQN MLP
      with epsilon-greedy; ``actor_critic``: categorical / Gaussian actor-critics storing
      ``log_prob`` and ``value``; ``squashed``: SAC's tanh-Gaussian actor; ``cnn``: Nature and
      IMPALA torsos over uint8 stacks; ``agents``: one parameter-shared agent Q-network with
      per-agent epsilon-greedy; ``common``: exploration parameters, MLP trunks, dueling heads;
      ``distributions``: masked logits and the factorised distributions of ``MultiDiscrete``
      and ``MultiBinary`` actions;
      ``builders``: the ``NETWORKS`` registry a recipe's ``network`` names, spec builders from
      the env's spaces and :class:`~collector.networks.builders.NetworkOptions`).
    * ``nstep``: :class:`NStepBuffer`, n-step windows built collector-side (off-policy).
    * ``advantages``: :func:`gae` and :func:`returns_to_go`, pure and hand-checked.
    * ``rollout``: :class:`RolloutWorker`, the off-policy pure core (no Ray).
    * ``onpolicy``: :class:`OnPolicyWorker` and :class:`OnPolicyTransform`, the on-policy pure
      core: ``SAME_STEP`` envs, fixed-length rollouts with GAE, or one complete episode per env
      with Monte-Carlo returns (REINFORCE).
    * ``chunks``: :class:`~collector.chunks.ChunkWorker`, the asynchronous loop's pure core
      (IMPALA, APPO): one trajectory chunk per env per rollout, ``NEXT_STEP`` envs, the
      auto-reset steps masked, the learner computing V-trace.
    * ``sequences``: :func:`~collector.sequences.to_sequences`, a recurrent policy's lockstep
      rollouts as stored sequences (``learner.recurrent``: each with the state before its first
      step, ``reset`` and ``valid`` flags; both workers keep one state per env, zeroed where an
      episode starts).
    * ``actor``: the ``Collector`` Ray actor, a thin shell (its threads) over the pure parts:
      ``weights`` (:class:`~collector.weights.PolicyWeights`, the network and its
      ``(generation, version)``), ``delivery`` (:class:`~collector.delivery.ReplayWriter`:
      writer id, sequence numbers, sending, acknowledgement with failover to the next shard),
      ``control`` (:class:`~collector.control.PauseBarrier` and the saved-state format).
    * ``manage`` (room): the driver's side of the collectors: ``group``
      (:class:`CollectorGroup`), ``remote`` (starting one named collector actor), ``fleet``
      (:class:`~collector.manage.fleet.Fleet`: collectors joining and leaving a running group,
      live resizes), ``restarts`` (:class:`~collector.manage.restarts.DeathLedger`: which
      failed rollouts are new deaths, pure), ``completions`` (finished rollouts as a queue fed
      by Ray's callbacks, so the driver pays for what finished, not for what is in flight),
      ``dispatch`` (one driver call per rollout) and ``hub`` (one
      :class:`~collector.manage.hub.RolloutHub` per node batching orders and receipts both
      ways, ``collector.aggregate_min_collectors``).
    * ``rig``: the raw single-process loop and the collector rig that benchmarks set side by
      side (``collector.bench``, ``services.bench atari``), for any env and network spec.
    * ``bench``: ``python -m collector.bench``, collectors against the raw env + policy loop.

Off-policy transitions. The worker drops gymnasium's auto-reset steps, so no transition spans two
episodes, and only written transitions count as frames. Every transition stores
``observation, action, reward, next_observation, terminated, truncated, n_step_discount,
policy_version`` (plus ``log_prob, value`` for stochastic actors). Multi-agent transitions store
``observation, next_observation`` ``[n_agents, obs]`` and ``action`` ``[n_agents]`` per item,
``state, next_state`` (the global state) and a team ``reward``; replay, n-step windows, sharding
and checkpoints treat the agent dimension as data. With ``n_step = n`` a
transition sums ``k <= n`` discounted rewards, stopping at the episode's end; ``next_observation``
is the observation ``k`` steps later (the terminal or truncated state if the episode ended) and
``n_step_discount = gamma^k``, so the target is
``reward + n_step_discount * (1 - terminated) * V(next_observation)``: a termination does not
bootstrap, a truncation does. The last ``n - 1`` steps of a rollout wait for the next rollout, so
rollout boundaries never cut a window. ``frame_skip`` is for counting only (the driver
multiplies receipts' frames by it; collectors do not repeat actions).

On-policy transitions (``transform=OnPolicyTransform(...)``). Vector envs run in ``SAME_STEP``
autoreset mode, so every step is a transition and a rollout of ``rollout_frames`` yields
exactly that many; each stores ``observation, action, reward, terminated, truncated,
policy_version, log_prob, value, advantage, value_target``, with advantages computed
collector-side by the policy version that acted (so they are exact for a lockstep learner).

Weights. A collector applies published weights only if they are newer by
``(generation, version)``; older ones are ignored. Every transition and every receipt carries the
version that produced it. The group sends the newest weights it has seen with a rollout only
when that collector is behind (or recovering from a restart).

Pipelining and receipts. A collector runs two rollout calls at once and one stepper thread.
The stepper does a rollout's serial work in one go (fetch and apply newer weights, step, send
the replay write in sequence order); the calling thread only waits for the write's
acknowledgement, while the stepper already steps the next rollout. Keeping every other Python
thread of the process off the GIL during stepping is what makes collection nearly free: each
time another thread takes the GIL, the stepping thread waits to get it back (see
``collector.actor``). Writes of up to ``collector.config.INLINE_WRITE_BYTES`` (1 MiB) travel
inline in the shard call instead of through the object store. **A ``RolloutReceipt`` is
returned only after its replay write is acknowledged**, so every counted frame is stored. A
rollout lost to a dying collector is never counted (its write may or may not have been stored).

Pause barrier. :meth:`CollectorGroup.pause` refuses new rollouts, waits until every rollout the
group started has finished (so, by the rule above, every write is acknowledged), then pauses
each actor (rollouts sent to an actor directly wait until :meth:`CollectorGroup.resume`). After
it returns no rollout is in flight and replay write counts stay frozen until ``resume()``;
``resume()`` continues exactly where collection stopped (same envs, episodes, sequence numbers).

State. :meth:`CollectorGroup.state_dicts` / ``load_state_dicts`` (call them paused) save and
restore each collector's counters (sequence number, frames, episodes), its exploration RNG and
torch RNG: JSON-able values plus numpy arrays. What cannot be restored is an environment's
mid-episode state (gymnasium envs are not serializable in general), the partial statistics of
unfinished episodes and open n-step windows. A restore therefore resumes on fresh episodes:
every env is reset with seeds derived from the run seed, the collector index and the restored
sequence number (the same seeds for every restore of the same state, different from the
run's first ones), and its writes continue from the restored sequence number under a new
writer id (so they can never be mistaken for retries of writes the shard already holds).

Restarts. Ray restarts a dead collector (``max_restarts``) from its constructor: new writer id,
sequence numbers from 0, initial weights. The driver calls :meth:`CollectorGroup.mark_dead`
with the failed rollout's ticket; the group counts one restart per death (not per lost
rollout) and re-sends the newest weights with the collector's next rollouts.

Faults inside a collector: a replay write its shard cannot take (dead or restarting) goes to the
next shard under the same ``(writer_id, seq)``; an exception inside an env step (every sub-env
is wrapped in :class:`GuardedEnv`) rebuilds the collector's envs on fresh seeds and fails the
rollout with an :class:`EnvError` naming the env id and index, which the driver counts (nothing
of that rollout was written).
"""

from __future__ import annotations

import importlib

# Exports load on first use, so a process that unpickles one small class (a receipt, a spec)
# does not import the whole package (torch.distributed, DDP, env machinery).
_EXPORTS = {
    "EpisodeTracker": "collector.envs.episodes",
    "EnvError": "collector.envs.vector",
    "GuardedEnv": "collector.envs.vector",
    "FrameStreamBuffer": "collector.envs.framestream",
    "PixelQSpec": "collector.networks.cnn",
    "make_atari": "collector.atari",
    "OnPolicyTransform": "collector.config",
    "OnPolicyWorker": "collector.onpolicy",
    "SquashedGaussianSpec": "collector.networks.squashed",
    "TanhGaussianPolicy": "collector.networks.squashed",
    "gae": "collector.advantages",
    "returns_to_go": "collector.advantages",
    "ActorCriticSpec": "collector.networks.actor_critic",
    "Collector": "collector.actor",
    "CollectorConfig": "collector.config",
    "CollectorGroup": "collector.manage.group",
    "CollectorsPausedError": "collector.manage.group",
    "Completions": "collector.manage.completions",
    "Finished": "collector.manage.completions",
    "RolloutHub": "collector.manage.hub",
    "EpsilonGreedy": "collector.networks.q_mlp",
    "ModelSpec": "collector.networks.q_mlp",
    "NStepBuffer": "collector.nstep",
    "RolloutBatch": "collector.rollout",
    "RolloutReceipt": "collector.receipts",
    "RolloutWorker": "collector.rollout",
    "StochasticActor": "collector.networks.actor_critic",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Imports an exported name's module on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
