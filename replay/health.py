"""A client's view of its shards: each one's last reported figures, which are down, probes.

A call to a shard fails with one of :data:`SHARD_FAILURES` when the shard died, is restarting,
cannot be reached, or gave no reply in time. The replay client marks a shard whose call failed
as down (:meth:`ShardView.mark_down`): its figures drop to zero, so samples are split around
it, and a cheap ``info`` probe, sent at most every ``probe_interval_s``, brings it back once Ray
has restarted it (:meth:`ShardView.probe`). Collectors send a write that failed to the next
shard and the driver's direct writes skip a shard that does not answer; both catch the same
tuple.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import ray

logger = logging.getLogger(__name__)

# What a call to a shard raises when the shard died, is restarting or cannot be reached
# (RayActorError, with its subclasses ActorDiedError and ActorUnavailableError), or gave no reply
# within the ``ray.get`` timeout (GetTimeoutError). A wait without a timeout only ever raises the
# first; where a late reply is not a failure (:meth:`ShardView.get`), the timeout is caught
# before this tuple.
SHARD_FAILURES = (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError)


class ShardUnavailableError(RuntimeError):
    """A service-wide call (dump, load) could not reach a shard; the message names it."""


def shard_names(shards: Iterable[int]) -> str:
    """``"replay-0, replay-2"``: the shards named in order, or ``"none"``.

    Examples:
        >>> shard_names({2, 0})
        'replay-0, replay-2'
    """
    return ", ".join(f"replay-{i}" for i in sorted(shards)) or "none"


class ShardView:
    """Each shard's figures as of its last reply, and the shards that are down.

    Args:
        shards: The shard actors, in shard order.

    Keyword Args:
        probe_interval_s: Seconds between probes of a shard that is down.
        on_down: Called with a shard's index whenever it is marked down (the client drops what
            it holds for that shard).

    Attributes:
        infos: Per shard, its ``info`` as of its last reply (``size``, ``sampler``, and
            ``mass``/``min_mass`` or ``remaining``; see ``replay.sampling.sharding``).
        down: ``{shard: (probe reference or None, when it was sent)}`` for each shard that is
            down.
        faults: Shard failures seen (a shard that comes back and fails again counts again).
    """

    def __init__(
        self,
        shards: Sequence[ray.actor.ActorHandle],
        *,
        probe_interval_s: float = 0.5,
        on_down: Callable[[int], None] | None = None,
    ) -> None:
        self.shards = list(shards)
        self.probe_interval_s = probe_interval_s
        self.on_down = on_down
        self.infos: list[dict] = [{"size": 0} for _ in self.shards]
        self.down: dict[int, tuple[ray.ObjectRef | None, float]] = {}
        self.faults = 0

    @property
    def sizes(self) -> np.ndarray:
        """Each shard's size as of its last reply."""
        return np.array([info["size"] for info in self.infos], dtype=np.int64)

    def sampler(self) -> str | None:
        """The shards' sampler kind, once one has replied."""
        return next((info["sampler"] for info in self.infos if "sampler" in info), None)

    def mark_down(self, shard: int, error: BaseException) -> None:
        """Stops routing samples and updates to ``shard`` until a probe finds it back."""
        if shard not in self.down:
            self.faults += 1
            logger.warning("replay-%d unavailable, sampling around it: %s", shard, error)
        self.down[shard] = (None, 0.0)
        self.infos[shard] = {**self.infos[shard], "size": 0, "mass": 0.0, "remaining": 0}
        if self.on_down is not None:
            self.on_down(shard)

    def get(self, shard: int, ref: ray.ObjectRef, timeout: float | None = None):
        """``ray.get`` of one shard's reply, or None.

        None when it failed (the shard is marked down) or gave no reply within ``timeout``
        seconds (a stuck shard is the driver's to handle). Any other error (a shard that refused
        the call) is raised.
        """
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:  # before SHARD_FAILURES: late is not down
            return None
        except SHARD_FAILURES as err:
            self.mark_down(shard, err)
            return None

    def probe(self) -> list[int]:
        """Checks the shards that are down without blocking; returns those that came back."""
        back = []
        now = time.monotonic()
        for shard, (ref, sent) in list(self.down.items()):
            if ref is not None and ray.wait([ref], timeout=0)[0]:
                try:
                    self.infos[shard] = ray.get(ref)
                except SHARD_FAILURES:
                    ref = None
                else:
                    del self.down[shard]
                    back.append(shard)
                    logger.info("replay-%d is back (%d items)", shard, self.infos[shard]["size"])
                    continue
            if ref is None and now - sent >= self.probe_interval_s:
                self.down[shard] = (self.shards[shard].info.remote(), now)
            elif ref is None:
                self.down[shard] = (None, sent)
        return back

    def revive(self, timeout: float) -> list[int]:
        """Asks every shard that is down, and waits; returns those that answered (now live)."""
        refs = {shard: self.shards[shard].info.remote() for shard in self.down}
        back = []
        for shard, ref in refs.items():
            try:
                self.infos[shard] = ray.get(ref, timeout=timeout)
            except SHARD_FAILURES:
                continue
            del self.down[shard]
            back.append(shard)
        return back

    def refresh(self) -> list[dict]:
        """Asks every live shard for its figures now (probes the ones that are down)."""
        self.probe()
        refs = {i: s.info.remote() for i, s in enumerate(self.shards) if i not in self.down}
        for i, ref in refs.items():
            info = self.get(i, ref)
            if info is not None:
                self.infos[i] = info
        return self.infos

    def wait(self) -> None:
        """Waits up to ``probe_interval_s`` for a probe's reply (or any shard's, if none)."""
        probes = [ref for ref, _ in self.down.values() if ref is not None]
        ray.wait(probes or [self.shards[0].info.remote()], timeout=self.probe_interval_s)

    def each(self, method: str, *args_per_shard: Sequence, timeout: float = 600.0) -> list:
        """Calls ``method`` on every shard in parallel; the replies in shard order.

        Args:
            method: The shard method.
            *args_per_shard: One sequence per argument, indexed by shard.
            timeout: Seconds all the replies may take together.

        Raises:
            ShardUnavailableError: Naming the first shard that did not answer (died, or gave
                no reply within ``timeout`` seconds); that shard is marked down.
        """
        refs = [
            getattr(s, method).remote(*(a[i] for a in args_per_shard))
            for i, s in enumerate(self.shards)
        ]
        replies = []
        deadline = time.monotonic() + timeout
        for i, ref in enumerate(refs):
            try:
                replies.append(ray.get(ref, timeout=max(deadline - time.monotonic(), 0.001)))
            except SHARD_FAILURES as err:
                self.mark_down(i, err)
                message = f"replay-{i} is unavailable for {method}: {err}"
                raise ShardUnavailableError(message) from err
        return replies

    def gather(self, method: str, timeout: float) -> list:
        """Calls ``method`` on every live shard; the replies that came within ``timeout`` s."""
        live = [i for i in range(len(self.shards)) if i not in self.down]
        refs = {i: getattr(self.shards[i], method).remote() for i in live}
        deadline = time.monotonic() + timeout
        replies = [
            self.get(i, ref, timeout=max(deadline - time.monotonic(), 0.001))
            for i, ref in refs.items()
        ]
        return [reply for reply in replies if reply is not None]
