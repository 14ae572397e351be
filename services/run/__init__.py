"""One run's life: launch, run id and directory, storage root, the embedded Ray, the Python API.

Modules:
    * ``launch``: :func:`~services.run.launch.prepare_run`, a run's id, directory, log,
      endpoint and controller.
    * ``rundir``, ``storage``: the run directory and the storage root.
    * ``embedded``: the embedded local Ray (``init_ray``), its processes out of the driver's
      process group.
    * ``raytools``: what the run logs for Ray's tools.
    * ``trainer``: :class:`~services.run.trainer.Trainer`, training from Python.
    * ``events``: the typed payloads of the ``Trainer``'s callbacks.
"""
