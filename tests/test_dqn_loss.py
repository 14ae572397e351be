import torch
from tensordict import TensorDict
from torch import nn

from learner.losses.dqn import DQNLoss
from learner.stepper import total_loss


def linear_q(weight, bias):
    layer = nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
        layer.bias.copy_(torch.tensor(bias))
    return layer


def batch():
    return TensorDict(
        {
            "observation": torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
            "action": torch.tensor([0, 1]),
            "reward": torch.tensor([1.0, 0.5]),
            "next_observation": torch.tensor([[0.0, 1.0], [1.0, 1.0]]),
            "terminated": torch.tensor([False, True]),
            "truncated": torch.tensor([True, False]),
        },
        batch_size=[2],
    )


def test_double_dqn_huber_loss_matches_hand_computation():
    online = linear_q([[1.0, 0.0], [0.0, 2.0]], [0.0, 0.0])
    loss_module = DQNLoss(online, gamma=0.5, double_dqn=True)
    with torch.no_grad():
        loss_module.target_network.weight.copy_(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))
    out = loss_module(batch())
    # q(s0)[0] = 1; q(s1)[1] = 2.
    # item 0: next (0,1): online argmax -> action 1; target Q = 4; truncated bootstraps:
    #   target = 1 + 0.5 * 4 = 3, error 2 -> huber 1.5
    # item 1: terminated: target = 0.5, error -1.5 -> huber 1.0
    assert torch.allclose(out["loss_q"], torch.tensor((1.5 + 1.0) / 2))
    assert torch.allclose(out["td_error"], torch.tensor([2.0, -1.5]))
    assert torch.allclose(total_loss(out), out["loss_q"])


def test_plain_dqn_uses_target_argmax():
    online = linear_q([[1.0, 0.0], [0.0, 2.0]], [0.0, 0.0])
    loss_module = DQNLoss(online, gamma=0.5, double_dqn=False)
    with torch.no_grad():
        loss_module.target_network.weight.copy_(torch.tensor([[5.0, 0.0], [0.0, 4.0]]))
    # item 0 next obs (0,1): target values (0, 4) -> 4 either way; item 1 terminated.
    out = loss_module(batch())
    assert torch.allclose(out["td_error"], torch.tensor([2.0, -1.5]))


def test_hard_and_soft_target_updates():
    online = linear_q([[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0])
    loss_module = DQNLoss(online)
    with torch.no_grad():
        for p in loss_module.target_network.parameters():
            p.zero_()
    loss_module.update_target(tau=0.25)
    assert torch.allclose(loss_module.target_network.bias, torch.tensor([0.25, 0.25]))
    loss_module.update_target(tau=1.0)
    assert torch.allclose(loss_module.target_network.weight, online.weight)
    assert not any(p.requires_grad for p in loss_module.target_network.parameters())
