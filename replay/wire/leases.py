"""Writer leases: who owns a writer id, how far its ``seq`` may jump, how fast it may write.

A replay table deduplicates by ``(writer id, seq)``: a batch whose ``seq`` is not above the
writer's last is taken for a retry and stored nowhere. Over the network that is an opening: a
caller that sends another writer's id with a huge ``seq`` makes every later batch of that writer
a "duplicate", and one that sends its next ``seq`` first has its own data stored and the real
batch dropped. So both servers keep a :class:`WriterLeases` book in front of their tables:

- **ownership**: a writer id belongs to the caller that first wrote with it (its
  :func:`replay.wire.auth.caller_identity`: credential, client certificate, lease id); another
  caller using it is refused with PERMISSION_DENIED naming ``writer_id``, until the owner has
  been idle for ``lease_s`` seconds and its lease expires;
- **window**: a ``seq`` more than ``window`` ahead of the highest this server accepted from the
  writer is refused with INVALID_ARGUMENT naming ``seq``; lower ones pass on to the table, so
  retries of stored batches are still acknowledged as duplicates. A writer new to this server
  starts where its first batch says when its caller is distinct (a lease id or a client
  certificate: an actor that fails over from a shard to the driver, or a run resumed from a
  checkpoint, goes on at its own ``seq``); callers that cannot be told apart (a shared
  credential, nothing else) are *anchored*: their writers start at -1, so a caller posing as
  another cannot make its later batches look like retries;
- **rate** (optional): at most ``frames_per_s`` frames per second per writer, with a burst of one
  second's worth (RESOURCE_EXHAUSTED beyond: retry later);
- **bounded**: at most ``max_writers`` leases; expired ones are dropped first (oldest first),
  and with none to drop a new writer is refused with RESOURCE_EXHAUSTED.

Pure (no gRPC objects): refusals are :class:`Refused` errors carrying a status code name.

Examples:
    >>> leases = WriterLeases(window=4)
    >>> leases.admit("robot-1", 0, owner="a", frames=10, anchored=True)
    >>> leases.admit("robot-1", 9, owner="a", frames=10)
    Traceback (most recent call last):
    ...
    replay.wire.leases.Refused: seq: 9 is more than 4 ahead of the highest (0) of writer 'robot-1'

"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable

from replay.wire.batches import shown

SEQ_WINDOW = 1024
MAX_WRITERS = 4096
LEASE_S = 300.0


class Refused(Exception):
    """A call refused by a lease; ``code`` names its gRPC status (``PERMISSION_DENIED``...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass
class _Lease:
    owner: str
    high: int
    used: float
    tokens: float
    refilled: float


class WriterLeases:
    """The lease book of one server (thread-safe; see the module docstring).

    Args:
        lease_s: Seconds a writer id stays its owner's after its last write.
        window: Largest jump of ``seq`` ahead of the writer's highest.
        max_writers: Leases held at most.
        frames_per_s: Frames per second per writer (None: no limit).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        lease_s: float = LEASE_S,
        window: int = SEQ_WINDOW,
        max_writers: int = MAX_WRITERS,
        frames_per_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease_s = lease_s
        self.window = window
        self.max_writers = max_writers
        self.frames_per_s = frames_per_s
        self.clock = clock
        self._leases: collections.OrderedDict[str, _Lease] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._leases)

    def admit(
        self, writer: str, seq: int, *, owner: str, frames: int, anchored: bool = False
    ) -> None:
        """Lets batch ``seq`` of ``writer`` (``frames`` transitions) through, or refuses it.

        ``anchored``: a writer new to this server starts at -1 (its caller is not distinct),
        else at ``seq``.

        Raises:
            Refused: PERMISSION_DENIED (another caller's writer id), INVALID_ARGUMENT (``seq``
                beyond the window), RESOURCE_EXHAUSTED (over the rate, or no lease free).
        """
        with self._lock:
            now = self.clock()
            self._expire(now)
            lease = self._leases.get(writer)
            if lease is None:
                if len(self._leases) >= self.max_writers:
                    raise Refused(
                        "RESOURCE_EXHAUSTED",
                        f"writer_id: {self.max_writers} writers hold leases on this server; "
                        f"retry once one has been idle for {self.lease_s:.0f} s",
                    )
                start = -1 if anchored else seq - 1
                lease = _Lease(owner, start, now, self.frames_per_s or 0.0, now)
            elif lease.owner != owner:
                raise Refused(
                    "PERMISSION_DENIED",
                    f"writer_id: {shown(writer)} belongs to another caller until it has been "
                    f"idle for {self.lease_s:.0f} s; use a writer id of your own",
                )
            if seq > lease.high + self.window:
                raise Refused(
                    "INVALID_ARGUMENT",
                    f"seq: {seq} is more than {self.window} ahead of the highest "
                    f"({lease.high}) of writer {shown(writer)}",
                )
            if self.frames_per_s:
                rate = self.frames_per_s
                lease.tokens = min(rate, lease.tokens + (now - lease.refilled) * rate)
                lease.refilled = now
                if lease.tokens < min(frames, rate):
                    wait = (min(frames, rate) - lease.tokens) / rate
                    raise Refused(
                        "RESOURCE_EXHAUSTED",
                        f"writer_id: {shown(writer)} is over grpc.writer_frames_per_s={rate:g}; "
                        f"retry in {wait:.2f} s",
                    )
                lease.tokens -= frames
            lease.high = max(lease.high, seq)
            lease.used = now
            self._leases[writer] = lease
            self._leases.move_to_end(writer)

    def _expire(self, now: float) -> None:
        """Drops leases idle past ``lease_s`` (the book is in order of last use)."""
        while self._leases:
            writer, lease = next(iter(self._leases.items()))
            if now - lease.used <= self.lease_s:
                return
            del self._leases[writer]
