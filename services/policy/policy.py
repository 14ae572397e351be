""":class:`Policy`: a trained network and its actions, outside Ray (``load_policy`` makes one).

``act`` takes one observation or a batch, numpy or torch, and returns actions of the same kind
and batch form: deterministic ones from the family's :class:`~services.policy.heads.PolicyHead`
(greedy Q-values, the mode of a categorical, the mean of a Gaussian within the bounds, SAC's
squashed mean, each agent's greedy action), or, with ``deterministic=False``, sampled by the
run's own collector policy (DQN with its final epsilon). Pixel policies also take single frames
``[H, W]`` (:mod:`services.policy.frames`), multi-agent ones the env wrapper's mapping or one
step's agent observations (:mod:`services.policy.agents`); both keep what they need between
steps until :meth:`Policy.reset`.

A run with action masks (``collector.action_mask_key``) takes the mask with the observation:
``act(observation, mask=mask)`` (bool or 0/1 ``[width]`` or ``[B, width]``), or the env's own
``Dict`` observation holding the mask under that key (connect4's ``{"observation",
"action_mask"}``); forbidden actions are never returned. A multi-agent policy takes one mask
per agent, ``[n_agents, n_actions]`` (or ``[B, n_agents, n_actions]``), or the env wrapper's
mapping with the masks added under that key.

A recurrent policy (``learner.recurrent``, :mod:`services.policy.memory`) takes the state with
the observation and returns the next one: ``action, state = policy.act(obs, state=state)``,
starting from ``policy.initial_state()`` (or ``state=None``) at every episode's first step.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from collector.networks.distributions import masked_logits
from services.policy.agents import AgentFeatures
from services.policy.frames import FrameStack
from services.policy.heads import PolicyHead
from services.policy.memory import StateInput
from services.policy.structured import StructuredInput


class Policy:
    """A trained policy: its network on a device, and ``act``.

    Args:
        network: The trained network (put in eval mode on ``device``).
        spec: The run's network spec (``family``, ``make_policy``).
        config: The run's ``RunConfig``.
        observation_space: The env's observation space.
        action_space: The env's action space.

    Keyword Args:
        checkpoint: The checkpoint the weights came from.
        version: Their model version (optimizer steps).
        device: Where the network runs.
        seed: Seeds ``act(..., deterministic=False)``'s sampling (default: the run's seed).

    Attributes:
        network: The trained ``nn.Module``.
        head: Its deterministic forward (:class:`~services.policy.heads.PolicyHead`), the
            module ``services.export`` writes.

    Examples:
        >>> policy = load_policy("~/relayrl_results/<run id>")  # doctest: +SKIP
        >>> action = policy.act(observation)  # one observation: one action  # doctest: +SKIP
        >>> actions = policy.act(observations)  # [B, ...]: [B] actions  # doctest: +SKIP

        A recurrent policy (``policy.recurrent``) carries a state from step to step:

        >>> state = policy.initial_state()  # an episode's first step  # doctest: +SKIP
        >>> action, state = policy.act(observation, state=state)  # doctest: +SKIP
    """

    def __init__(
        self,
        network: nn.Module,
        spec,
        config,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        checkpoint: Path | None = None,
        version: int = 0,
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.network = network.eval().to(self.device)
        self.spec = spec
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space
        self.checkpoint = checkpoint
        self.version = version
        self.family: str = spec.family
        self.head = PolicyHead(self.network, self.family, action_space).to(self.device).eval()
        space = observation_space
        layout = getattr(getattr(spec, "base", spec), "layout", None)
        self.structured = StructuredInput(layout) if layout is not None and layout.keyed else None
        if self.structured is not None:  # a Dict/Tuple observation (services.policy.structured)
            space = gym.spaces.Box(0, 1, (1,))
        elif isinstance(space, gym.spaces.Dict):
            space = space["observation"]
        self.observation_shape = tuple(space.shape)
        self.dtype = torch.uint8 if space.dtype == np.uint8 else torch.float32
        self.frames = FrameStack(space.shape[0]) if self.dtype == torch.uint8 else None
        self.agents = None
        if self.family == "agents":
            base = getattr(spec, "base", spec)
            self.agents = AgentFeatures(base.obs_dim, base.num_actions, base.prev_action)
        self.seed = config.seed if seed is None else seed
        self.mask_key = config.collector.action_mask_key or None
        self._sampler = None
        self.recurrent = self.head.recurrent
        self.states = (
            StateInput(int(network.initial_state(1).shape[-1])) if self.recurrent else None
        )

    def __repr__(self) -> str:
        return (
            f"Policy({self.config.algorithm}, {self.family}, version {self.version}, "
            f"{self.device}, checkpoint={str(self.checkpoint) if self.checkpoint else None})"
        )

    def initial_state(self, batch: int | None = None) -> np.ndarray:
        """A recurrent policy's state at an episode's first step: zeros, float32.

        Args:
            batch: None: ``[state_size]`` (one observation); else ``[batch, state_size]``.

        Raises:
            ValueError: For a feed-forward policy (it has no state).
        """
        if self.states is None:
            raise ValueError("initial_state: the policy is feed-forward; it has no state")
        return self.states.initial(batch)

    def reset(self) -> None:
        """A new episode: clears the frame stacks and the agents' previous actions.

        A recurrent policy's state is the caller's: start the episode from
        :meth:`initial_state`.
        """
        if self.frames is not None:
            self.frames.reset()
        if self.agents is not None:
            self.agents.reset()
        if self.structured is not None:
            self.structured.reset()

    def forward(
        self,
        observation: torch.Tensor,
        mask: torch.Tensor | None = None,
        state: torch.Tensor | None = None,
    ):
        """The head's output for a batch of tensors (what an exported file computes).

        With ``mask`` (``[B, width]``) forbidden actions score the dtype's minimum. A recurrent
        policy takes ``state`` ``[B, state_size]`` (None: zeros) and returns ``(output,
        next_state)``.
        """
        with torch.inference_mode():
            observation = observation.to(self.device, self.dtype)
            if self.recurrent:
                if state is None:
                    state = torch.as_tensor(self.states.initial(len(observation)))
                out, next_state = self.head(observation, state.to(self.device, torch.float32))
            else:
                out, next_state = self.head(observation), None
            out = out if mask is None else masked_logits(out, mask.to(self.device))
            return out if next_state is None else (out, next_state)

    def act(
        self, observation: Any, deterministic: bool = True, *, mask: Any = None, state: Any = None
    ):
        """The action for one observation, or the actions for a batch.

        Args:
            observation: ``[*obs_shape]`` or ``[B, *obs_shape]``, numpy or torch (a pixel
                policy also takes one frame ``[H, W]``; a multi-agent one the env wrapper's
                mapping or ``[n_agents, obs_dim]``).
            deterministic: Greedy, mode or mean actions; False samples as the run's
                collectors did (DQN: epsilon-greedy with the final epsilon).
            mask: The allowed actions (``[width]`` or ``[B, width]``, bool or 0/1; a
                multi-agent policy's ``[n_agents, n_actions]`` or ``[B, n_agents,
                n_actions]``); None: all, or the mask entry of a ``Dict`` observation
                (``collector.action_mask_key``).
            state: A recurrent policy's state before the step: ``[state_size]`` for one
                observation, ``[B, state_size]`` for a batch (what the previous ``act``
                returned); None or :meth:`initial_state` at an episode's first step.

        Returns:
            ``[*action_shape]`` or ``[B, *action_shape]``: numpy for numpy input, a tensor on
            the input's device for torch input. A recurrent policy returns ``(actions,
            next_state)``, the state in the same form.

        Raises:
            ValueError: Naming the shape expected, for an observation or a state of another
                shape, or a state handed to a feed-forward policy.
        """
        if state is not None and not self.recurrent:
            raise ValueError(
                "state: the policy is feed-forward (trained without learner.recurrent); "
                "act(observation) takes no state"
            )
        as_torch, device = _tensor_kind(observation)
        observation, mask = self._split_mask(observation, mask)
        if self.structured is not None:
            return self._act_structured(observation, deterministic, as_torch, device, mask, state)
        observation = self._features(observation)
        shape = self.observation_shape
        single = observation.ndim == len(shape)
        batch = observation[None] if single else observation
        if batch.ndim != len(shape) + 1 or tuple(batch.shape[1:]) != shape:
            raise ValueError(
                f"observation: expected {list(shape)} or [B, {', '.join(map(str, shape))}], "
                f"got {list(observation.shape)}"
            )
        if mask is not None:
            mask = self._batched_mask(mask, batch.shape[0])
        states = (
            None if self.states is None else self.states.batched(state, len(batch), single=single)
        )
        next_state = None
        if deterministic:
            tensor = torch.as_tensor(batch).to(self.device, self.dtype)
            torch_mask = None if mask is None else torch.from_numpy(mask)
            if states is None:
                scores = self.forward(tensor, torch_mask)
            else:
                scores, next_state = self.forward(tensor, torch_mask, torch.from_numpy(states))
            actions = self.head.actions(scores).cpu().numpy()
        else:
            actions, next_state = self._sample(batch, mask, states)
        if self.agents is not None and single:
            self.agents.record(actions[0])
        return self._returned(actions, next_state, single, as_torch, device)

    def _returned(self, actions, next_state, single: bool, as_torch: bool, device):
        actions = actions[0] if single else actions
        actions = torch.as_tensor(actions, device=device) if as_torch else actions
        if self.states is None:
            return actions
        kind = {"single": single, "as_torch": as_torch, "device": device}
        return actions, self.states.returned(next_state, **kind)

    def _batched_mask(self, mask, size: int) -> np.ndarray:
        """``mask`` as bool ``[B, *mask_shape]`` (one mask per agent for multi-agent policies).

        Raises:
            ValueError: Naming the mask shape expected.
        """
        mask = np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask).astype(bool)
        if self.agents is None:
            return mask[None] if mask.ndim == 1 else mask
        shape = (len(self.action_space.nvec), self.agents.num_actions)
        mask = mask[None] if mask.ndim == 2 else mask
        if mask.shape[1:] != shape or mask.shape[0] not in (1, size):
            raise ValueError(
                f"mask: one mask per agent, {list(shape)} or [B, {shape[0]}, {shape[1]}], "
                f"got {list(mask.shape)}"
            )
        return mask

    def collector_policy(self, seed: np.random.SeedSequence):
        """The run's collector policy over this network on the CPU (sampling, evaluation)."""
        network = self.network if self.device.type == "cpu" else copy.deepcopy(self.network).cpu()
        return self.spec.make_policy(network, seed)

    def exploration(self) -> dict[str, Any]:
        """What the collectors explored with at the end of the run (``deterministic=False``)."""
        from services.config.recipes import algorithm_for

        config = self.config
        explore = algorithm_for(config).exploration(config, config.controller.total_frames)
        explore.pop("epsilons", None)
        return explore

    def _split_mask(self, observation, mask):
        """Takes the mask out of a ``Dict`` observation holding ``collector.action_mask_key``."""
        key = self.mask_key
        if key is None or not isinstance(observation, dict) or key not in observation:
            return observation, mask
        rest = {k: v for k, v in observation.items() if k != key}
        mask = observation[key] if mask is None else mask
        return (next(iter(rest.values())) if len(rest) == 1 else rest), mask

    def _act_structured(
        self, observation, deterministic: bool, as_torch: bool, device, mask=None, state=None
    ):
        batch, single = self.structured(observation, self.device)
        size = len(next(iter(batch.values())))
        if mask is not None:
            mask = self._batched_mask(mask, size)
        states = None if self.states is None else self.states.batched(state, size, single=single)
        next_state = None
        if deterministic:
            with torch.inference_mode():
                if states is None:
                    out = self.head(batch)
                else:
                    out, next_state = self.head(batch, torch.from_numpy(states).to(self.device))
                if mask is not None:
                    out = masked_logits(out, torch.from_numpy(mask).to(self.device))
                actions = self.head.actions(out).cpu().numpy()
        else:
            arrays = {key: value.cpu().numpy() for key, value in batch.items()}
            actions, next_state = self._sample(arrays, mask, states)
        return self._returned(actions, next_state, single, as_torch, device)

    def _features(self, observation):
        if self.agents is not None:
            return self.agents(observation)
        if isinstance(observation, dict):
            raise ValueError("observation: a mapping is read by multi-agent policies only")
        if not isinstance(observation, torch.Tensor):
            observation = np.asarray(observation)
        if self.frames is not None and observation.ndim == len(self.observation_shape) - 1:
            if isinstance(observation, torch.Tensor):
                observation = observation.cpu().numpy()
            return self.frames.push(observation)
        return observation

    def _sample(self, batch, mask: np.ndarray | None = None, states: np.ndarray | None = None):
        """Sampled actions (the run's collector policy) and, if recurrent, the next state."""
        if self._sampler is None:
            self._sampler = self.collector_policy(np.random.SeedSequence([self.seed, 0x5A3B]))
        array: Any = batch  # a structured observation's arrays as they are
        if not isinstance(batch, dict):
            array = batch.cpu().numpy() if isinstance(batch, torch.Tensor) else np.asarray(batch)
            dtype = np.uint8 if self.dtype == torch.uint8 else np.float32
            array = np.ascontiguousarray(array, dtype=dtype)
        if self.agents is not None:
            array = {"observation": array}
        kwargs: dict[str, Any] = {} if mask is None else {"mask": mask}
        if states is not None:
            kwargs["state"] = states
        with torch.inference_mode():
            actions, _, *next_state = self._sampler.act(array, self.exploration(), **kwargs)
        return np.asarray(actions), (next_state[0] if next_state else None)


def _tensor_kind(observation) -> tuple[bool, torch.device | None]:
    if isinstance(observation, dict):
        first = next(iter(observation.values()), None)
        observation = observation.get("observation", first)
    if isinstance(observation, torch.Tensor):
        return True, observation.device
    return False, None
