"""``python -m services.bench <name>``: driver-side benchmarks, one module per subcommand.

Subcommands (each prints progress to stderr and one JSON object as its last line of stdout):
    * ``solve``: seconds and frames from process start until each algorithm solves its task,
      over seeds (:mod:`services.bench.solve`).
    * ``learn``: the shipped configs of a suite (``cpu``, ``full``) run to their thresholds,
      frames to threshold against published references, with a plot per entry
      (:mod:`services.bench.learn`; the entries: :mod:`services.bench.learn_suite`; the plots:
      :mod:`services.bench.learn_plot`).
    * ``grpc``: external insert throughput over gRPC against a raw gRPC stream of the same
      bytes (:mod:`services.bench.grpc`).
    * ``atari``: the pixel data path (:mod:`services.bench.atari`; ``--compile``:
      :mod:`services.bench.compiled`; the Pong task both use: :mod:`services.bench.pong`).
    * ``marl``: IQL, VDN and QMIX on Spread against random play (:mod:`services.bench.marl`).
    * ``soak``: faults injected on a schedule (:mod:`services.bench.soak`).
    * ``checkpoint``: cut and restore times of a run holding 1 M transitions
      (:mod:`services.bench.checkpoint`).
    * ``hostile``: a run with TLS and scoped credentials under hostile clients: refusal times,
      ``GetStatus`` latency, the driver's memory, coalesced checkpoints, honest frames kept
      (:mod:`services.bench.hostile`; its throwaway certificates: :mod:`services.bench.certs`).
    * ``scale``: the production driver against simulated fleets of 10, 100 and 1,000
      collectors: receipts/s, driver CPU per receipt, loop latency, exact frames
      (:mod:`services.bench.scale`; the simulated services: :mod:`services.bench.sim.controller`,
      their actors :mod:`services.bench.sim.fleet`).
    * ``determinism``: deterministic runs of DQN and PPO compared by digest, with the default
      mode's and a stopped-and-resumed run's, and the mode's cost in frames/s
      (:mod:`services.bench.determinism`).
    * ``elastic``: one DQN run resized live over ``Control/Scale`` (1/1/1 -> 3/2/2 -> 1/1/1),
      stopped and resumed at 2/3/1: exact frames, items kept, resize seconds, frames/s per
      size, the return across resizes (:mod:`services.bench.elastic`).
    * ``startup``: the floors under a run's ``startup_s`` (Python's imports, Ray's start, actors
      importing torch), each in fresh processes (:mod:`services.bench.startup`).
"""
