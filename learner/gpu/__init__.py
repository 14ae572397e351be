"""GPU checks, run where a GPU machine is lent (the CPU suite cannot reach these paths).

* ``algorithms``: ``python -m learner.gpu.algorithms``, each loss on ``cuda:0`` against the
CPU (same weights, same batches), state round trips, GPU training speed.
* ``check``: ``python -m learner.gpu.check``, the learner on CUDA: precisions, the
non-finite guard, a Ray group with nccl and ``cuda:0`` per rank, two-GPU equivalence.
"""
