"""An IMPALA loss whose every step is slowed on purpose: collectors must not wait (tests)."""

import time

from learner.losses.impala import impala_loss


def slow_impala(policy_network, config):
    """``impala_loss`` with ``loss_options.delay_s`` (default 0.05) added to every step."""
    loss = impala_loss(policy_network, config)
    delay = float(config.loss_options.get("delay_s", 0.05))
    original = loss.forward

    def forward(batch):
        time.sleep(delay)  # the simulated cost of a large learner step, not a wait
        return original(batch)

    loss.forward = forward
    return loss
