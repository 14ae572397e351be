"""A trained policy outside Ray: load it, act with it (``load_policy``, ``Policy``).

Modules, by job:
    * ``loading``: :func:`load_policy` (a checkpoint, a rotation directory or a run directory:
      its newest valid checkpoint), reading ``weights_only``, rebuilding the run's network spec
      (a ``learner.network`` too) without Ray.
    * ``policy``: :class:`Policy`, the network on a device and ``act(observation,
      deterministic=True)`` for single and batched observations, numpy or torch.
    * ``heads``: each family's deterministic forward (greedy Q-values, logits or the mean
      action, SAC's squashed mean, per-agent Q-values), the module ``services.export`` writes;
      the recurrent families' take and return the state.
    * ``memory``: a recurrent policy's state as ``act`` takes and returns it
      (``action, state = policy.act(obs, state=state)``, from ``policy.initial_state()``).
    * ``frames``: frame stacks for pixel policies fed one frame at a time.
    * ``agents``: the multi-agent network's input rows (previous actions kept across steps).
    * ``export``: ``torch.export`` (``pt2``) and ONNX files of a policy's head, checked
      against ``act`` (``python -m services.export``).

Playing episodes with a policy and recording videos is ``services.evaluation.playback``
(``python -m services.evaluate``).

Examples:
    >>> from services.policy import load_policy
    >>> policy = load_policy("~/relayrl_results/<run id>", device="cpu")  # doctest: +SKIP
    >>> policy.act(env.reset(seed=0)[0])  # doctest: +SKIP
"""

from __future__ import annotations

from services.policy.loading import load_policy
from services.policy.policy import Policy

__all__ = ["Policy", "load_policy"]
