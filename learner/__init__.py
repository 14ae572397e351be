"""The DDP learner group.

Layout:
    * ``config``: :class:`LearnerConfig` (scaling, placement, sampling, loss, stepper, target
      network), validated on construction.
    * ``losses``: one TorchRL-style loss module per algorithm (TensorDict in, ``loss_*`` out),
      registered by name in ``losses.LOSSES`` (with the stepper ``auto`` picks for it), each
      with its math in its docstring: :class:`DQNLoss` (double DQN, Huber, per-item
      ``td_error``), :class:`PPOLoss` (clipped surrogate, optional value clipping, entropy,
      KL and clip-fraction diagnostics), :class:`A2CLoss`, :class:`ReinforceLoss` (optional
      baseline), :class:`SACLoss` (twin Q, Polyak targets, learned temperature),
      :class:`MultiAgentQLoss` (IQL, VDN, QMIX over a shared agent network; the mixers in
      ``losses.mixers``), :class:`IMPALALoss` and :class:`APPOLoss` (V-trace over trajectory
      chunks; ``vtrace``: V-trace itself, pure torch), :class:`SequenceQLoss` (Q-learning over
      stored sequences: recurrent DQN, and :class:`R2D2Loss` on top of it);
      ``LearnerConfig.loss`` names one, a
      user ``"module:factory"``, or a
      TorchRL class (``torchrl:DQNLoss`` for ``dqn``, ``torchrl:ClipPPOLoss`` for ``ppo``: the
      ``torchrl`` extra, built around the same networks, ``losses.torchrl_loss`` and
      ``losses.torchrl_ppo``); ``options``: their settings (``learner.onpolicy``,
      ``learner.vtrace``, ``learner.sac``, ``learner.marl``, ``learner.dqn``, ``learner.r2d2``).
    * ``loss``: :class:`LossDispatch` routes named loss methods through DDP.
    * ``stepper``: the :class:`Stepper` protocol and :class:`DefaultStepper` (clip by norm or
      value, ``grad_norm``, optional LR scheduler); ``precision``: :class:`MixedPrecisionStepper`
      (bf16/fp16 autocast, fp16 GradScaler, gradient accumulation, non-finite guard);
      ``delayed``: :class:`DelayedPolicyStepper` (TD3-style delayed actor updates, the example
      of a user stepper); ``multi``: :class:`MultiOptimizerStepper` (one optimizer per named
      loss method, SAC's critic, actor and temperature).
    * ``core``: :class:`LearnerCore`, the pure training state of one rank; ``version`` counts
      optimizer steps in the lineage; ``state_dict`` is tensors and plain values.
    * ``compilation``: ``learner.compile`` (``off`` or a ``torch.compile`` mode) and
      ``learner.compile_backend``: the core compiles its policy network in place after the loss
      is built (``nn.Module.compile`` silently skips ``nn.Sequential`` networks on torch 2.13,
      so a traced function of ours calls ``_call_impl``); ``state_dict`` keys, published
      weights and checkpoints are unchanged; DDP wraps the loss around it as in eager mode.
    * ``determinism``: ``run.deterministic``'s deterministic kernels and fixed thread counts
      (CUDA: cuDNN and cuBLAS settings), and the digest of a learner's state.
    * ``plugins``: resolution of ``"module:factory"`` paths (user losses and steppers).
    * ``weights``: tensor schema of published weights, checked against the collectors' policy.
    * ``ranks`` (room): the DDP group: ``rank`` (the ``LearnerRank`` actor: joins the process
      group, gloo or nccl with a GPU per rank, wraps the loss in DDP when ``world_size > 1``,
      samples ``global_batch_size / world_size`` per step, averages metrics over ranks, and on
      rank 0 publishes weights, ``ray.put`` once per publication), ``group``
      (:class:`LearnerGroup`: one placement group of ``world_size`` bundles, a generation per
      construction, sequential rounds verified by :func:`verify_receipts`,
      ``state_dicts``/``load_state_dicts`` of any saved world size, ``set_shards``),
      ``resize`` (:func:`states_for_world_size`: rank 0's replica for every new rank, RNG
      streams derived per new rank and generation), ``sampling`` (:class:`RankSampler`,
      per-rank sampling with one round of prefetch, and on-policy rounds, :class:`EpochPlan`,
      the asynchronous loop's queue rounds with stale chunks masked and counted),
      ``rendezvous`` (rank 0's store on a free port, retried on collision) and ``placement``
      (the ranks' placement group, ``resources_per_rank``, ``placement_strategy``).
    * ``receipts``: :class:`StepReceipt`, :class:`PublishedWeights` and the protocol errors.
    * ``bench``: ``python -m learner.bench``; ``gpu`` (room): ``python -m learner.gpu.check``
      and ``python -m learner.gpu.algorithms`` (GPU paths, run on a GPU machine).

Equivalence: DDP averages gradients, so ``world_size`` ranks on ``B / world_size`` items each
take the same step as one rank on ``B`` items (the losses are means).

Versions: a step skipped by the non-finite guard still counts as a step (the version follows
the steps the driver asked for); ``nonfinite_skipped`` in the metrics says it was skipped.

Driver usage (generations and checkpoints)::

    group = LearnerGroup(run, config, spec, shards, seed, generation=g)
    published = group.publish()                     # version 0, schema checked
    pending = group.start_round(k)                  # one round in flight at most
    receipt = group.finish_round(pending)           # ProtocolError: generation g failed
    states = group.state_dicts()                    # no round in flight; one dict per rank
    torch.save(states[r], path_r)                   # tensors + plain values
    states = [torch.load(p, weights_only=True) for p in paths]
    group.shutdown()
    group = LearnerGroup(run, config, spec, shards, seed, generation=g + 1)
    version = group.load_state_dicts(states)        # any world size (learner.ranks.resize)
    published = group.publish()                     # newer key (g + 1, version): force it out

Prioritized replay: with ``update_priorities``, each rank hands ``(shard, index, |td_error|)``
of a round's items to ``ReplayClient.update_priorities(shard, index, priority)`` (numpy arrays,
fire and forget) when the client has it.
"""

from __future__ import annotations

import importlib

# Exports load on first use, so a process that unpickles one small class (a receipt, a spec)
# does not import the whole package (torch.distributed, DDP, env machinery).
_EXPORTS = {
    "DefaultStepper": "learner.stepper",
    "EpochPlan": "learner.ranks.sampling",
    "MultiOptimizerStepper": "learner.multi",
    "OnPolicyOptions": "learner.options",
    "DelayedPolicyStepper": "learner.delayed",
    "LearnerConfig": "learner.config",
    "LearnerCore": "learner.core",
    "LearnerGroup": "learner.ranks.group",
    "LearnerRank": "learner.ranks.rank",
    "LossDispatch": "learner.loss",
    "MixedPrecisionStepper": "learner.precision",
    "PendingRound": "learner.ranks.group",
    "ProtocolError": "learner.receipts",
    "PublishedWeights": "learner.receipts",
    "RankSampler": "learner.ranks.sampling",
    "StaleGenerationError": "learner.receipts",
    "StepReceipt": "learner.receipts",
    "Stepper": "learner.stepper",
    "WeightSchemaError": "learner.weights",
    "check_schema": "learner.weights",
    "tensor_schema": "learner.weights",
    "total_loss": "learner.stepper",
    "verify_receipts": "learner.receipts",
    "states_for_world_size": "learner.ranks.resize",
}

__all__ = sorted(_EXPORTS)


def _algorithm_modules() -> list[str]:
    """Each registration's module and its loss module (their classes, e.g. ``PPOLoss``)."""
    from learner.algorithms import ALGORITHMS

    modules = dict.fromkeys(algo.loss_module for algo in ALGORITHMS.values())
    for algo in ALGORITHMS.values():
        modules.update(dict.fromkeys(options.__module__ for options in algo.options.values()))
    return list(modules)


def __getattr__(name: str):
    """Imports an exported name's module on first use (PEP 562).

    An algorithm's loss and options classes are found in its registration's modules.
    """
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name[:1].isupper():
        for module in _algorithm_modules():
            found = getattr(importlib.import_module(module), name, None)
            if found is not None:
                return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
