"""``python -m services.bench atari --compile``: the Nature CNN's learner compiled vs eager.

Two in-process learner cores (``services.bench.pixels.pong.LocalLoop``: a LearnerCore sampling
batches of 32 Pong transitions from an in-process frame-deduplicated table, one torch thread
like a learner rank) train side by side in one run, one with ``learner.compile`` (mode and
backend from the flags; inductor's ``default`` unless told) and one without, in alternating
windows. The last line is one JSON object:

* ``compile_seconds``: the compiled core's first optimizer step (Dynamo tracing and kernel
  generation for the forward, the backward and the no-grad bootstrap pass) less an eager step;
  inductor keeps compiled graphs in an on-disk cache, so a second run on the same machine
  reports seconds where the first (cold) one reports tens of seconds;
* ``compiled_updates_per_s``, ``eager_updates_per_s`` and their ratio ``ratio_compiled``
  (above 1: compile pays off once ``compile_seconds`` is amortized).

No Ray: compile changes the rank's compute, not its sampling or publication, which
``python -m services.bench atari`` measures.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import torch

from learner.config import LearnerConfig
from services.bench.pixels.pong import BATCH, LocalLoop, frame_stream_writes

logger = logging.getLogger("services.bench.pixels.compiled")


def timed_step(loop: LocalLoop) -> float:
    """Seconds of one optimizer step of ``loop`` (sampling included)."""
    start = time.perf_counter()
    loop.core.train([loop.core.to_batch(loop.table.sample(BATCH))])
    return time.perf_counter() - start


def measure_compile(args) -> dict:
    """Compiled against eager learner updates/s of the Nature CNN, windows alternating."""
    writes = frame_stream_writes(args.learn_transitions, seed=3)
    eager_config = LearnerConfig(global_batch_size=BATCH, lr=6.25e-5, target_update_interval=100)
    compiled_config = dataclasses.replace(
        eager_config, compile=args.compile_mode, compile_backend=args.compile_backend
    )
    eager, compiled = LocalLoop(eager_config, writes), LocalLoop(compiled_config, writes)
    eager.run(1.0)  # warm-up
    eager_step = min(timed_step(eager) for _ in range(3))
    first_step = timed_step(compiled)
    logger.info("compiled core's first step: %.1f s", first_step)
    compiled.run(1.0)  # warm-up (a shape seen for the first time would compile here)
    totals = {"eager": [0, 0.0], "compiled": [0, 0.0]}
    for _ in range(args.windows):
        for name, loop in (("eager", eager), ("compiled", compiled)):
            steps, elapsed = loop.run(args.seconds)
            totals[name][0] += steps
            totals[name][1] += elapsed
        logger.info("compile window: %s", totals)
    eager_rate = totals["eager"][0] / totals["eager"][1]
    compiled_rate = totals["compiled"][0] / totals["compiled"][1]
    return {
        "compiled_updates_per_s": round(compiled_rate, 2),
        "eager_updates_per_s": round(eager_rate, 2),
        "ratio_compiled": round(compiled_rate / eager_rate, 3),
        "compile_seconds": round(first_step - eager_step, 1),
        "compile_mode": args.compile_mode,
        "compile_backend": args.compile_backend,
        "batch_size": BATCH,
        "windows": args.windows,
        "seconds": args.seconds,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
