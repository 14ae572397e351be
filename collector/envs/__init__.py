"""The collectors' environments: vector envs, multi-agent envs, episodes, frame streams.

    * ``vector``: vector envs in gymnasium's ``NEXT_STEP`` (off-policy) or ``SAME_STEP``
      (on-policy) autoreset mode, from a gymnasium id or a ``module:function`` factory; the
      per-env seeds (:func:`env_seeds`); :class:`EnvError`.
    * ``multiagent``: :class:`ParallelVectorEnv`, PettingZoo parallel envs as one vector env.
    * ``episodes``: :class:`EpisodeTracker`, per-env returns and lengths across rollouts.
    * ``framestream``: observations written as frame streams for a frame-deduplicated replay.
    * ``masks``: action masks (``collector.action_mask_key``): :class:`MaskToInfo` takes the
      mask out of the observation, :class:`MaskReader` reads, counts and stores it.
    * ``connect4``: PettingZoo's Connect Four against a random opponent, one agent, a mask
      (``collector.envs.connect4:connect_four``).
    * ``spaces``: ``Dict``/``Tuple`` observations flattened by key path (their layout, the
      wrapper, the replay column of each key); ``images``: per-key grayscale, resize and frame
      stacks of image keys (``collector.image_keys``); ``testing``: small shipped envs with
      structured observations (tests, ``services.bench spaces``).

Atari's factory stays at ``collector.atari:make_atari`` (configs name it as their env id).
"""
