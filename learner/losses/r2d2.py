"""R2D2: recurrent double DQN over stored sequences (Kapturowski et al., ICLR 2019).

A batch holds sequences (``collector.sequence_worker``): observations ``o_0 .. o_L``, actions,
rewards, ``terminated``, ``valid [B, L]`` (False on padding), the stored state ``s`` before
step 0 and the burn-in length ``b``. With ``Q`` the online and ``Q'`` the target network::

    burn-in     s_b = Q.state(o_0 .. o_{b-1} | s), s'_b = Q'.state(...)   (no gradient, no loss)
    values      q_t = Q(o_t | s_b)[a_t],  t = b .. L-1 (valid steps)
    n-step      k_t = min(n, E - t)      (E: the sequence's real steps; o_E its next state)
                G_t = sum_{i<k_t} gamma^i r_{t+i}
    target      y_t = h(G_t + gamma^k_t (1 - d_t) h^{-1}(Q'(o_{t+k_t} | s'_b)[a*])),
                a*  = argmax_a Q(o_{t+k_t} | s_b)[a]                    (double Q-learning)
    loss        loss_q = mean_items(w * mean_t 0.5 (y_t - q_t)^2)
    priority    p = eta * max_t |y_t - q_t| + (1 - eta) * mean_t |y_t - q_t|

``d_t`` is 1 where the window ends on the episode's termination (only a sequence's last real
step can terminate: sequences never cross an episode boundary); a truncation or the
sequence's end bootstraps. ``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x`` is the value rescaling
(Pohlen et al., 2018; ``eps = 1e-3``) with the closed-form inverse

    h^{-1}(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1);

without rescaling ``h`` is the identity. ``w`` is the item's importance weight (prioritized
replay; 1 otherwise); the means over ``t`` run over valid post-burn-in steps. Padding enters
neither the loss, nor the priority, nor a state (``collector.networks.recurrent``).
"""

from __future__ import annotations

import copy

import torch
from tensordict import TensorDict
from torch import nn


def rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x``.

    Examples:
        >>> x = torch.tensor([-50.0, 0.0, 3.0])
        >>> torch.allclose(unrescale(rescale(x)), x, atol=1e-4)
        True
    """
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def unrescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h^{-1}``, the inverse of :func:`rescale`."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root**2 - 1.0)


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


class R2D2Loss(nn.Module):
    """R2D2's sequence loss (the module docstring has the math).

    Args:
        value_network: The online recurrent Q-network
            (``collector.networks.recurrent.RecurrentQ``).

    Keyword Args:
        gamma: Discount factor.
        n_step: Steps of the returns.
        priority_eta: ``eta`` of the sequence priority.
        value_rescaling: Apply ``h`` and ``h^{-1}``.
        rescale_epsilon: ``eps`` of ``h``.
    """

    def __init__(
        self,
        value_network: nn.Module,
        *,
        gamma: float = 0.997,
        n_step: int = 5,
        priority_eta: float = 0.9,
        value_rescaling: bool = True,
        rescale_epsilon: float = 1e-3,
    ) -> None:
        super().__init__()
        self.value_network = value_network
        self.target_network = copy.deepcopy(value_network).requires_grad_(False)
        self.gamma, self.n_step, self.eta = gamma, n_step, priority_eta
        self.value_rescaling, self.eps = value_rescaling, rescale_epsilon

    def _h(self, x: torch.Tensor) -> torch.Tensor:
        return rescale(x, self.eps) if self.value_rescaling else x

    def _h_inv(self, x: torch.Tensor) -> torch.Tensor:
        return unrescale(x, self.eps) if self.value_rescaling else x

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
            best = q_all.detach().argmax(-1, keepdim=True)
            bootstrap = self._h_inv(q_next.gather(-1, best).squeeze(-1))  # [B, steps + 1]
            target = self._n_step_targets(batch, valid, burn_in, bootstrap)
        mask = valid[:, burn_in:]
        td = target - q_taken
        weight = batch.get("weight", None)
        per_item = (0.5 * td.pow(2) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        if weight is not None:
            per_item = weight.reshape(-1).to(per_item.dtype) * per_item
        priority = mixed_priority(td.detach().abs(), mask, self.eta)
        q_mean = (q_taken.detach() * mask).sum() / mask.sum().clamp(min=1)
        return TensorDict(
            {
                "loss_q": per_item.mean(),
                "q_mean": q_mean,
                "td_error": priority,
            },
            batch_size=[],
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
        for target, online in zip(
            self.target_network.parameters(), self.value_network.parameters(), strict=True
        ):
            if tau >= 1.0:
                target.copy_(online)
            else:
                target.lerp_(online, tau)


def r2d2_loss(policy_network: nn.Module, config) -> R2D2Loss:
    """The built-in ``loss: r2d2`` factory (options: ``learner.r2d2``)."""
    options = config.r2d2
    return R2D2Loss(
        policy_network,
        gamma=config.gamma,
        n_step=options.n_step,
        priority_eta=options.priority_eta,
        value_rescaling=options.value_rescaling,
        rescale_epsilon=options.rescale_epsilon,
    )
