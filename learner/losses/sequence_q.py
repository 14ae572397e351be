"""Q-learning over stored sequences: the core R2D2 and recurrent DQN share.

A batch holds sequences (``collector.sequence_worker``): observations ``o_0 .. o_L``, actions,
rewards, ``terminated``, ``valid [B, L]`` (False on padding), the stored state ``s`` before
step 0 and the burn-in length ``b``. With ``Q`` the online and ``Q'`` the target network::

    burn-in     s_b = Q.state(o_0 .. o_{b-1} | s), s'_b = Q'.state(...)   (no gradient, no loss)
    values      q_t = Q(o_t | s_b)[a_t],  t = b .. L-1 (valid steps)
    n-step      k_t = min(n, E - t)      (E: the sequence's real steps; o_E its next state)
                G_t = sum_{i<k_t} gamma^i r_{t+i}
    target      y_t = h(G_t + gamma^k_t (1 - d_t) h^{-1}(Q'(o_{t+k_t} | s'_b)[a*]))
                a*  = argmax_a Q(o_{t+k_t} | s_b)[a]     (double Q; argmax_a Q'(...) without)
    loss        loss_q = mean_items(w * mean_t penalty(y_t - q_t))
    priority    p = eta * max_t |y_t - q_t| + (1 - eta) * mean_t |y_t - q_t|

``d_t`` is 1 where the window ends on the episode's termination (only a sequence's last real
step can terminate: sequences never cross an episode boundary); a truncation or the
sequence's end bootstraps. ``penalty`` is ``0.5 delta^2`` (R2D2) or Huber's with threshold 1
(DQN's ``smooth_l1``); ``h`` is the identity here, R2D2's value rescaling in a subclass
(``learner.losses.r2d2``). ``w`` is the item's importance weight (prioritized replay; 1
otherwise); the means over ``t`` run over valid post-burn-in steps. Padding enters neither the
loss, nor the priority, nor a state (``collector.networks.recurrent``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from learner.losses.common import follow

PENALTIES = ("squared", "huber")


def mixed_priority(td_abs: torch.Tensor, mask: torch.Tensor, eta: float) -> torch.Tensor:
    """``eta * max_t |delta| + (1 - eta) * mean_t |delta|`` per row over ``mask``ed steps.

    Rows with no masked step get 0.

    Examples:
        >>> td = torch.tensor([[1.0, 3.0, 9.0]]); mask = torch.tensor([[True, True, False]])
        >>> mixed_priority(td, mask, 0.9)  # 0.9 * 3 + 0.1 * 2
        tensor([2.9000])
    """
    td_abs = torch.where(mask, td_abs, torch.zeros_like(td_abs))
    count = mask.sum(-1)
    mean = td_abs.sum(-1) / count.clamp(min=1)
    return eta * td_abs.max(-1).values + (1.0 - eta) * mean


class SequenceQLoss(nn.Module):
    """n-step Q-learning over stored sequences (the module docstring has the math).

    Args:
        value_network: The online recurrent Q-network
            (``collector.networks.recurrent.RecurrentQ``).

    Keyword Args:
        gamma: Discount factor.
        n_step: Steps of the returns, within each sequence.
        double_q: Select bootstrap actions with the online network.
        penalty: ``squared`` (``0.5 delta^2``) or ``huber`` (threshold 1).
        priority_eta: ``eta`` of the sequence priority.

    Examples:
        >>> import gymnasium as gym
        >>> from collector.envs.spaces import describe
        >>> from collector.networks.recurrent import RecurrentQSpec
        >>> spec = RecurrentQSpec(describe(gym.spaces.Box(-1, 1, (3,))), num_actions=2,
        ...                       recurrent="gru", recurrent_hidden_size=4)
        >>> loss = SequenceQLoss(spec.build(), gamma=0.9, n_step=2, penalty="huber")
        >>> batch = TensorDict({
        ...     "observation": torch.zeros(2, 5, 3), "action": torch.zeros(2, 4, dtype=torch.long),
        ...     "reward": torch.ones(2, 4), "terminated": torch.zeros(2, 4, dtype=torch.bool),
        ...     "valid": torch.tensor([[True] * 4, [True, True, False, False]]),
        ...     "recurrent_state": torch.zeros(2, 4)}, batch_size=[2])
        >>> out = loss(batch)
        >>> out["loss_q"].shape, out["td_error"].shape
        (torch.Size([]), torch.Size([2]))
    """

    def __init__(
        self,
        value_network: nn.Module,
        *,
        gamma: float = 0.99,
        n_step: int = 1,
        double_q: bool = True,
        penalty: str = "squared",
        priority_eta: float = 0.9,
    ) -> None:
        super().__init__()
        if penalty not in PENALTIES:
            raise ValueError(f"penalty: must be one of {PENALTIES}, got {penalty!r}")
        self.value_network = value_network
        self.target_network = copy.deepcopy(value_network).requires_grad_(False)
        self.gamma, self.n_step, self.eta = gamma, n_step, priority_eta
        self.double_q, self.penalty = double_q, penalty

    def _h(self, x: torch.Tensor) -> torch.Tensor:
        """The target's transform ``h`` (the identity; R2D2 rescales)."""
        return x

    def _h_inv(self, x: torch.Tensor) -> torch.Tensor:
        """``h^{-1}``, applied to the target network's bootstrap values."""
        return x

    def _penalty(self, q_taken: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.penalty == "huber":
            return F.smooth_l1_loss(q_taken, target, reduction="none")
        return 0.5 * (target - q_taken).pow(2)

    def forward(self, batch: TensorDict) -> TensorDict:
        """Returns ``loss_q``, ``q_mean`` and the items' mixed priorities (``td_error``)."""
        obs, valid = batch["observation"], batch["valid"].to(torch.bool)
        state = batch["recurrent_state"]
        stored_burn_in = batch.get("burn_in", None)  # every item of a run has the same
        burn_in = 0 if stored_burn_in is None else int(stored_burn_in.reshape(-1)[0])
        # o_0 is real; o_{t+1} exists where step t is real (o_E is the bootstrap state).
        obs_valid = torch.cat([torch.ones_like(valid[:, :1]), valid], dim=1)
        online_state, target_state = state, state
        if burn_in:
            with torch.no_grad():
                _, online_state = self.value_network(
                    obs[:, :burn_in], state, valid=obs_valid[:, :burn_in]
                )
                _, target_state = self.target_network(
                    obs[:, :burn_in], state, valid=obs_valid[:, :burn_in]
                )
        learn_obs, learn_valid = obs[:, burn_in:], obs_valid[:, burn_in:]
        q_all, _ = self.value_network(learn_obs, online_state.detach(), valid=learn_valid)
        steps = valid.shape[1] - burn_in  # learning steps t = b .. L-1, at index t - b
        action = batch["action"][:, burn_in:].long()
        q_taken = q_all[:, :steps].gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            q_next, _ = self.target_network(learn_obs, target_state, valid=learn_valid)
            chooser = q_all.detach() if self.double_q else q_next
            best = chooser.argmax(-1, keepdim=True)
            bootstrap = self._h_inv(q_next.gather(-1, best).squeeze(-1))  # [B, steps + 1]
            target = self._n_step_targets(batch, valid, burn_in, bootstrap)
        mask = valid[:, burn_in:]
        td = target - q_taken
        weight = batch.get("weight", None)
        per_step = self._penalty(q_taken, target) * mask
        per_item = per_step.sum(-1) / mask.sum(-1).clamp(min=1)
        if weight is not None:
            per_item = weight.reshape(-1).to(per_item.dtype) * per_item
        priority = mixed_priority(td.detach().abs(), mask, self.eta)
        q_mean = (q_taken.detach() * mask).sum() / mask.sum().clamp(min=1)
        return TensorDict(
            {"loss_q": per_item.mean(), "q_mean": q_mean, "td_error": priority}, batch_size=[]
        )

    def _n_step_targets(self, batch, valid, burn_in: int, bootstrap: torch.Tensor):
        """``y_t`` for ``t = b .. L-1`` (``[B, L - b]``); ``bootstrap[:, j]`` is at ``o_{b+j}``."""
        reward = batch["reward"].to(bootstrap.dtype) * valid
        terminated = batch["terminated"].to(torch.bool) & valid
        length = valid.shape[1]
        real = valid.sum(-1, keepdim=True)  # E per row
        t = torch.arange(burn_in, length, device=valid.device).unsqueeze(0)  # [1, steps]
        k = (real - t).clamp(min=1, max=self.n_step)  # [B, steps]
        ret = torch.zeros_like(k, dtype=bootstrap.dtype)
        padded = torch.nn.functional.pad(reward, (0, self.n_step))
        for i in range(self.n_step):
            ret = ret + (i < k).to(ret.dtype) * self.gamma**i * padded[:, burn_in + i : length + i]
        end = t + k  # the bootstrap observation's index
        ended = terminated.any(-1, keepdim=True) & (end == real)
        value = bootstrap.gather(1, (end - burn_in).clamp(max=bootstrap.shape[1] - 1))
        discount = torch.pow(torch.full_like(ret, self.gamma), k.to(ret.dtype))
        return self._h(ret + discount * (~ended).to(ret.dtype) * value)

    @torch.no_grad()
    def update_target(self, tau: float = 1.0) -> None:
        """Copies (``tau=1``) or Polyak-averages the online weights into the target network."""
        follow(self.target_network, self.value_network, tau)


__all__ = ["PENALTIES", "SequenceQLoss", "mixed_priority"]
