"""The DDP learner group: its ranks, their rendezvous and placement, resizing, sampling.

* ``group``: :class:`LearnerGroup`, the driver's handle on the ranks (rounds, receipts,
publication, state, replay shards).
* ``rank``: the ``LearnerRank`` Ray actor, a thin shell over ``learner.core``.
* ``rendezvous``: the process group's store and join; ``placement``: the ranks' placement
group.
* ``resize``: learner state of any world size restored into another (pure).
* ``sampling``: a rank's background sampling of its batches.
"""
