"""Which network a recipe's network becomes with ``learner.recurrent`` (no torch).

A recipe names its feed-forward network; with ``learner.recurrent: lstm | gru`` the run builds
that network's recurrent twin (:data:`RECURRENT`, a key of
``collector.networks.builders.NETWORKS``): ``recurrent_q`` for the Q-networks (DQN, R2D2),
``recurrent_actor_critic`` for the actor-critics (PPO, A2C, REINFORCE, IMPALA, APPO) and
``recurrent_squashed`` for SAC's actor (``collector.networks.recurrent_squashed``).
"""

from __future__ import annotations

# A recipe's network -> its recurrent twin (``learner.recurrent``); other networks have none.
RECURRENT = {
    "q_mlp": "recurrent_q",
    "cnn_q": "recurrent_q",
    "multi_input_q": "recurrent_q",
    "actor_critic": "recurrent_actor_critic",
    "cnn_actor_critic": "recurrent_actor_critic",
    "multi_input_actor_critic": "recurrent_actor_critic",
    "squashed": "recurrent_squashed",
}


def recurrent_network(network: str, recurrent: str) -> str:
    """``network``'s recurrent twin with ``recurrent`` set, else ``network``.

    Raises:
        ValueError: Naming ``learner.recurrent`` for a network with no recurrent twin.

    Examples:
        >>> recurrent_network("cnn_actor_critic", "lstm"), recurrent_network("q_mlp", "none")
        ('recurrent_actor_critic', 'q_mlp')
    """
    if recurrent == "none" or network in RECURRENT.values():
        return network
    if network not in RECURRENT:
        raise ValueError(
            f"learner.recurrent: {recurrent!r} has no recurrent form of the {network!r} network "
            f"(recurrent networks: {sorted(set(RECURRENT))})"
        )
    return RECURRENT[network]
