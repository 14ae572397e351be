"""``python -m services.bench <name>``: driver-side benchmarks, one module per subcommand.

The modules sit in sub-packages by concern: :mod:`services.bench.learning`,
:mod:`services.bench.pixels`, :mod:`services.bench.wire` and :mod:`services.bench.runtime`
(the dispatcher's table: ``services.bench.__main__.MODULES``).

Subcommands (each prints progress to stderr and one JSON object as its last line of stdout):
    * ``solve``: seconds and frames from process start until each algorithm solves its task,
      over seeds (:mod:`services.bench.learning.solve`).
    * ``learn``: the shipped configs of a suite (``cpu``, ``full``) run to their thresholds,
      frames to threshold against published references, with a plot per entry
      (:mod:`services.bench.learning.learn`; the entries:
      :mod:`services.bench.learning.learn_suite`; the plots:
      :mod:`services.bench.learning.learn_plot`).
    * ``grpc``: external insert throughput over gRPC against a raw gRPC stream of the same
      bytes (:mod:`services.bench.wire.grpc`).
    * ``atari``: the pixel data path (:mod:`services.bench.pixels.atari`; ``--compile``:
      :mod:`services.bench.pixels.compiled`; the Pong task both use:
      :mod:`services.bench.pixels.pong`).
    * ``marl``: IQL, VDN and QMIX on Spread against random play
      (:mod:`services.bench.learning.marl`).
    * ``soak``: faults injected on a schedule (:mod:`services.bench.runtime.soak`).
    * ``checkpoint``: cut and restore times of a run holding 1 M transitions
      (:mod:`services.bench.runtime.checkpoint`).
    * ``hostile``: a run with TLS and scoped credentials under hostile clients: refusal times,
      ``GetStatus`` latency, the driver's memory, coalesced checkpoints, honest frames kept
      (:mod:`services.bench.wire.hostile`; its throwaway certificates:
      :mod:`services.bench.wire.certs`).
    * ``scale``: the production driver against simulated fleets of 10, 100 and 1,000
      collectors: receipts/s, driver CPU per receipt, loop latency, exact frames
      (:mod:`services.bench.runtime.scale`; the simulated services:
      :mod:`services.bench.runtime.sim.controller`,
      their actors :mod:`services.bench.runtime.sim.fleet`).
    * ``determinism``: deterministic runs of DQN and PPO compared by digest, with the default
      mode's and a stopped-and-resumed run's, and the mode's cost in frames/s
      (:mod:`services.bench.runtime.determinism`).
    * ``elastic``: one DQN run resized live over ``Control/Scale`` (1/1/1 -> 3/2/2 -> 1/1/1),
      stopped and resumed at 2/3/1: exact frames, items kept, resize seconds, frames/s per
      size, the return across resizes (:mod:`services.bench.runtime.elastic`).
    * ``startup``: the floors under a run's ``startup_s`` (Python's imports, Ray's start, actors
      importing torch), each in fresh processes (:mod:`services.bench.runtime.startup`).
    * ``async``: the asynchronous actor-learner loop (APPO) against the lockstep loop (PPO):
      frames/s, collector wait, policy lag (:mod:`services.bench.runtime.async_bench`).
    * ``tune``: PBT against a random search with the same population and frames on LunarLander
      PPO through ``services.search``: best final return, frames to a return of 200
      (:mod:`services.bench.learning.tune`).
"""
