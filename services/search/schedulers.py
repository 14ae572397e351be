"""``--scheduler pbt | pb2 | asha | fifo`` as Ray Tune schedulers, all on frames.

Every scheduler's time attribute is ``frames`` (collected frames, as the runs count them):

- ``asha``: asynchronous successive halving; rungs from ``--perturbation-frames`` (default a
  eighth of ``--max-frames``) doubling up to ``--max-frames``; a trial below the median of its
  rung stops there (reduction factor 2).
- ``pbt``: population-based training; every ``--perturbation-frames`` a trial in the bottom
  quarter copies a top-quarter trial's checkpoint (exploit) and perturbs the space's fields
  (explore: resampled with probability 0.25, else scaled by 0.8 or 1.2 or moved to a
  neighbouring value), clipped to the space's bounds.
- ``pb2``: PBT whose explore step is a Gaussian-process bandit over the space's bounds.
- ``fifo``: every trial runs to its budget (a plain random or grid search).
"""

from __future__ import annotations

from services.search.space import Dimension

SCHEDULERS = ("pbt", "pb2", "asha", "fifo")


def clip_to_space(dims: list[Dimension]):
    """A PBT ``custom_explore_fn`` keeping perturbed numbers within the space's bounds."""
    bounds = {d.key: d for d in dims if d.kind in ("uniform", "loguniform", "randint")}

    def explore(config: dict) -> dict:
        for key, dim in bounds.items():
            if key in config:
                low, high = dim.values
                if dim.kind == "randint":
                    config[key] = int(min(max(round(config[key]), low), high - 1))
                else:
                    config[key] = float(min(max(config[key], low), high))
        return config

    return explore


def make_scheduler(
    name: str,
    dims: list[Dimension],
    *,
    max_frames: int,
    perturbation_frames: int,
):
    """The Tune scheduler ``name`` over ``dims``, metric and mode left to ``TuneConfig``."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining

    if name == "asha":
        return ASHAScheduler(
            time_attr="frames",
            max_t=max_frames,
            grace_period=perturbation_frames or max(max_frames // 8, 1),
            reduction_factor=2,
        )
    if name == "pbt":
        return PopulationBasedTraining(
            time_attr="frames",
            perturbation_interval=perturbation_frames,
            hyperparam_mutations={d.key: d.mutation() for d in dims if d.kind != "constant"},
            quantile_fraction=0.25,
            resample_probability=0.25,
            custom_explore_fn=clip_to_space(dims),
        )
    if name == "pb2":
        from ray.tune.schedulers.pb2 import PB2

        return PB2(
            time_attr="frames",
            perturbation_interval=perturbation_frames,
            hyperparam_bounds={d.key: list(d.values) for d in dims if d.kind != "constant"},
            quantile_fraction=0.25,
        )
    return FIFOScheduler()
