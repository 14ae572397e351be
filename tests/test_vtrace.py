import math

import numpy as np
import pytest
import torch

from collector.advantages import gae
from learner.vtrace import vtrace

FIELDS = (
    "behaviour_log_prob",
    "target_log_prob",
    "reward",
    "value",
    "bootstrap_value",
    "discount",
    "cut",
)


def random_batch(*, B=5, T=8, gamma=0.9, seed=0, on_policy=False, varying_discount=False):
    """Random [B, T] chunks with terminations and truncations; float64 unless moved."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)

    terminated = rand(B, T) < 0.15
    truncated = (rand(B, T) < 0.15) & ~terminated
    gammas = 0.7 + 0.3 * rand(B, T) if varying_discount else torch.full((B, T), gamma)
    behaviour = -2.0 * rand(B, T)
    target = behaviour if on_policy else behaviour + 2.0 * rand(B, T) - 1.0
    cut = terminated | truncated
    value = 4.0 * rand(B, T) - 2.0
    # V(x_{t+1}) is the next step's V(x_t) inside an episode; at an episode's end (the final
    # observation) and at the chunk's end it is a value of its own.
    bootstrap_value = 4.0 * rand(B, T) - 2.0
    bootstrap_value[:, :-1] = torch.where(cut[:, :-1], bootstrap_value[:, :-1], value[:, 1:])
    batch = {
        "behaviour_log_prob": behaviour,
        "target_log_prob": target.clone(),
        "reward": 4.0 * rand(B, T) - 2.0,
        "value": value,
        "bootstrap_value": bootstrap_value,
        "discount": gammas * ~terminated,
        "cut": cut,
    }
    return batch, terminated, truncated


def eq1_ground_truth(batch, *, rho_bar=1.0, c_bar=1.0, rho_bar_pg=None, lam=1.0):
    """The paper's eq. 1 as a direct sum per (b, s), with per-step discounts and cuts."""
    rho_bar_pg = rho_bar if rho_bar_pg is None else rho_bar_pg
    mu, pi, r, v, bv, d, cut = (batch[name].tolist() for name in FIELDS)
    B, T = len(r), len(r[0])
    vs = [[0.0] * T for _ in range(B)]
    adv = [[0.0] * T for _ in range(B)]
    for b in range(B):
        rho = [math.exp(pi[b][t] - mu[b][t]) for t in range(T)]
        delta = [min(rho_bar, rho[t]) * (r[b][t] + d[b][t] * bv[b][t] - v[b][t]) for t in range(T)]
        for s in range(T):
            total, weight = v[b][s], 1.0
            for t in range(s, T):
                total += weight * delta[t]
                if cut[b][t]:
                    break
                weight *= d[b][t] * lam * min(c_bar, rho[t])
            vs[b][s] = total
        for s in range(T):
            v_next = vs[b][s + 1] if s + 1 < T and not cut[b][s] else bv[b][s]
            adv[b][s] = min(rho_bar_pg, rho[s]) * (r[b][s] + d[b][s] * v_next - v[b][s])
    return torch.tensor(vs, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64)


# 1. On-policy: n-step returns (lam = 1) and GAE (lam < 1).


def test_on_policy_lambda_one_is_the_n_step_return_to_the_chunk_end():
    batch, _, _ = random_batch(on_policy=True, varying_discount=True)
    r, bv, d, cut = (batch[k].tolist() for k in ("reward", "bootstrap_value", "discount", "cut"))
    B, T = len(r), len(r[0])
    expected = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        for s in range(T):
            ret, weight = 0.0, 1.0
            for t in range(s, T):
                ret += weight * r[b][t]
                weight *= d[b][t]
                if cut[b][t] or t == T - 1:
                    ret += weight * bv[b][t]  # 0 at a termination (d = 0)
                    break
            expected[b, s] = ret
    out = vtrace(**batch)
    torch.testing.assert_close(out.vs, expected)
    torch.testing.assert_close(out.rho, torch.ones(B, T, dtype=torch.float64))


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95])
def test_on_policy_lambda_below_one_is_gae(lam):
    batch, _, _ = random_batch(on_policy=True, varying_discount=True, seed=1)
    r, v, bv, d, cut = (batch[k] for k in ("reward", "value", "bootstrap_value", "discount", "cut"))
    B, T = r.shape
    advantage = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            running *= 0.0 if cut[b, t] else d[b, t].item() * lam
            running += r[b, t].item() + d[b, t].item() * bv[b, t].item() - v[b, t].item()
            advantage[b, t] = running
    out = vtrace(**batch, lam=lam)
    torch.testing.assert_close(out.vs - v, advantage)
    # The advantage bootstraps from v_{t+1} = V(x_{t+1}) + A_{t+1} inside the episode.
    v_next = bv.clone()
    v_next[:, :-1] = torch.where(cut[:, :-1], bv[:, :-1], v[:, 1:] + advantage[:, 1:])
    torch.testing.assert_close(out.pg_advantage, r + d * v_next - v)


def test_on_policy_matches_the_collectors_gae():
    batch, terminated, truncated = random_batch(on_policy=True, seed=2)
    as_numpy = {k: batch[k].T.numpy() for k in ("reward", "value", "bootstrap_value")}
    _, target = gae(
        as_numpy["reward"],
        as_numpy["value"],
        as_numpy["bootstrap_value"],
        terminated.T.numpy(),
        truncated.T.numpy(),
        gamma=0.9,
        lam=0.8,
    )
    out = vtrace(**batch, lam=0.8)
    np.testing.assert_allclose(out.vs.T.numpy(), target, rtol=1e-5, atol=1e-5)


# 2. Off-policy against eq. 1, asymmetric clipping, varying discounts.


@pytest.mark.parametrize(
    ("rho_bar", "c_bar", "rho_bar_pg", "lam"),
    [
        (1.0, 1.0, None, 1.0),
        (1.5, 0.8, 1.2, 1.0),
        (0.9, 1.3, 2.0, 0.9),
        (math.inf, math.inf, 0.5, 1.0),
    ],
)
def test_off_policy_matches_eq1(rho_bar, c_bar, rho_bar_pg, lam):
    batch, terminated, truncated = random_batch(varying_discount=True, seed=3)
    assert terminated.any() and truncated[:, :-1].any()  # episode ends inside chunks
    out = vtrace(**batch, rho_bar=rho_bar, c_bar=c_bar, rho_bar_pg=rho_bar_pg, lam=lam)
    assert (out.rho < 0.8).any() and (out.rho > 2.0).any()  # every clip is exercised
    vs, pg_advantage = eq1_ground_truth(
        batch, rho_bar=rho_bar, c_bar=c_bar, rho_bar_pg=rho_bar_pg, lam=lam
    )
    torch.testing.assert_close(out.vs, vs)
    torch.testing.assert_close(out.pg_advantage, pg_advantage)


# 3. The ratio is pi / mu.


def test_ratio_is_target_over_behaviour():
    ones = torch.ones(1, 2)
    out = vtrace(
        behaviour_log_prob=torch.full((1, 2), -3.0),
        target_log_prob=torch.zeros(1, 2),
        reward=ones,
        value=torch.zeros(1, 2),
        bootstrap_value=torch.zeros(1, 2),
        discount=0.5 * ones,
        cut=torch.zeros(1, 2, dtype=torch.bool),
        rho_bar=100.0,
        c_bar=100.0,
    )
    e3 = math.exp(3.0)
    torch.testing.assert_close(out.rho, torch.full((1, 2), e3))
    # delta_t = e^3 * 1; v_0 = delta_0 + 0.5 * c_0 * delta_1 with c_0 = e^3 (swapped: e^-3).
    torch.testing.assert_close(out.vs, torch.tensor([[e3 + 0.5 * e3 * e3, e3]]))
    torch.testing.assert_close(out.pg_advantage, torch.tensor([[e3 * (1 + 0.5 * e3), e3]]))


# 4. Termination, truncation and a truncation in the middle of a chunk.


def test_termination_does_not_bootstrap_and_truncation_bootstraps_from_the_final_state():
    # Row 0 terminates at t = 1, row 1 is truncated at t = 1 (final state's value 10).
    gamma = 0.9
    batch = {
        "behaviour_log_prob": torch.zeros(2, 3),
        "target_log_prob": torch.zeros(2, 3),
        "reward": torch.tensor([[1.0, 2.0, 3.0]] * 2),
        "value": torch.tensor([[0.5, 1.0, 1.5]] * 2),
        "bootstrap_value": torch.tensor([[1.0, 10.0, 2.0]] * 2),
        "discount": torch.tensor([[gamma, 0.0, gamma], [gamma, gamma, gamma]]),
        "cut": torch.tensor([[False, True, False]] * 2),
    }
    out = vtrace(**batch)
    expected_vs = torch.tensor(
        [
            [1 + gamma * 2, 2.0, 3 + gamma * 2],  # no bootstrap at the termination
            [1 + gamma * (2 + gamma * 10), 2 + gamma * 10, 3 + gamma * 2],
        ]
    )
    torch.testing.assert_close(out.vs, expected_vs)
    expected_pg = torch.tensor(
        [
            [1 + gamma * 2.0 - 0.5, 2 - 1.0, 3 + gamma * 2 - 1.5],
            [1 + gamma * 11.0 - 0.5, 2 + gamma * 10 - 1.0, 3 + gamma * 2 - 1.5],
        ]
    )
    torch.testing.assert_close(out.pg_advantage, expected_pg)
    # Nothing of the next episode (t = 2) flows into t <= 1.
    changed = dict(batch, reward=batch["reward"] + torch.tensor([0.0, 0.0, 50.0]))
    changed["value"] = batch["value"] + torch.tensor([0.0, 0.0, -7.0])
    again = vtrace(**changed)
    torch.testing.assert_close(again.vs[:, :2], out.vs[:, :2])
    torch.testing.assert_close(again.pg_advantage[:, :2], out.pg_advantage[:, :2])


def test_a_truncation_mid_chunk_is_two_chunks():
    batch, _, _ = random_batch(B=3, T=8, varying_discount=True, seed=4)
    batch["cut"][:] = False
    batch["discount"][:] = batch["discount"].clamp(min=0.5)  # no terminations
    batch["cut"][:, 3] = True  # a truncation at t = 3: discount_3 = gamma, bootstraps
    kwargs = {"rho_bar": 1.2, "c_bar": 0.9, "rho_bar_pg": 1.5, "lam": 0.95}
    out = vtrace(**batch, **kwargs)
    vs, pg_advantage = eq1_ground_truth(batch, **kwargs)
    torch.testing.assert_close(out.vs, vs)
    torch.testing.assert_close(out.pg_advantage, pg_advantage)
    first = vtrace(**{k: t[:, :4] for k, t in batch.items()}, **kwargs)
    second = vtrace(**{k: t[:, 4:] for k, t in batch.items()}, **kwargs)
    torch.testing.assert_close(out.vs, torch.cat([first.vs, second.vs], dim=1))
    torch.testing.assert_close(
        out.pg_advantage, torch.cat([first.pg_advantage, second.pg_advantage], dim=1)
    )


# 5. Against TorchRL's V-trace.


@pytest.mark.parametrize("with_truncations", [False, True])
def test_matches_torchrl_vtrace(with_truncations):
    functional = pytest.importorskip("torchrl.objectives.value.functional")
    gamma, rho_bar, c_bar = 0.9, 1.3, 0.9
    batch, terminated, truncated = random_batch(gamma=gamma, seed=5)
    if not with_truncations:
        truncated[:] = False
        batch["cut"] = terminated.clone()
    # TorchRL computes rho = exp(log_pi - log_mu): its log_pi is the learner's (target) policy
    # and log_mu the collector's (its docstring says the reverse; its VTrace module passes these).
    # ``done`` cuts the trace, ``terminated`` drops the bootstrap; tensors are [B, T, 1].
    advantage, vs = functional.vtrace_advantage_estimate(
        gamma,
        batch["target_log_prob"].unsqueeze(-1),
        batch["behaviour_log_prob"].unsqueeze(-1),
        batch["value"].unsqueeze(-1),
        batch["bootstrap_value"].unsqueeze(-1),
        batch["reward"].unsqueeze(-1),
        (terminated | truncated).unsqueeze(-1),
        terminated.unsqueeze(-1),
        rho_thresh=rho_bar,
        c_thresh=c_bar,
    )
    out = vtrace(**batch, rho_bar=rho_bar, c_bar=c_bar)
    torch.testing.assert_close(out.vs, vs.squeeze(-1))
    torch.testing.assert_close(out.pg_advantage, advantage.squeeze(-1))


# 6. Shapes, dtypes and devices.


@pytest.mark.parametrize("name", FIELDS)
def test_refuses_a_mismatched_shape_naming_the_argument(name):
    batch, _, _ = random_batch(B=2, T=4)
    batch[name] = batch[name][:, :3]
    with pytest.raises(ValueError, match=name):
        vtrace(**batch)


def test_refuses_a_value_that_is_not_batch_by_time():
    batch, _, _ = random_batch(B=2, T=4)
    batch = {k: t.reshape(-1) for k, t in batch.items()}
    with pytest.raises(ValueError, match="value must be"):
        vtrace(**batch)


DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")),
]


@pytest.mark.parametrize("device", DEVICES)
def test_float32_on_device_is_detached(device):
    batch, _, _ = random_batch(varying_discount=True, seed=6)
    vs, pg_advantage = eq1_ground_truth(batch, rho_bar=1.1, c_bar=0.9)
    moved = {
        k: t.to(device, torch.float32) if t.is_floating_point() else t.to(device)
        for k, t in batch.items()
    }
    moved["value"].requires_grad_(True)
    out = vtrace(**moved, rho_bar=1.1, c_bar=0.9)
    for tensor in (out.vs, out.pg_advantage, out.rho):
        assert tensor.dtype == torch.float32 and tensor.device.type == device
        assert not tensor.requires_grad
    torch.testing.assert_close(out.vs.cpu().double(), vs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.pg_advantage.cpu().double(), pg_advantage, rtol=1e-5, atol=1e-5)
