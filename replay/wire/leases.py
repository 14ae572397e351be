"""Writer leases: whose a writer id is, how far its ``seq`` may jump, how fast it may write.

A replay table deduplicates by ``(writer id, seq)``: a batch whose ``seq`` is not above the
writer's last is taken for a retry and stored nowhere. Over the network that is an opening: a
caller that sends another writer's id with a huge ``seq`` would make every later batch of that
writer a "duplicate". So writer ids on the wire are *scoped to their caller*, and both servers
keep a :class:`WriterLeases` book in front of their tables:

- **one book per writer across the driver and the shards, by construction**: the replay writer
  of a batch is ``external/<writer id>@<owner>`` (:func:`scoped_writer`), where the owner is
  :func:`replay.wire.auth.caller_identity`'s hash of the caller's credential, client certificate
  and lease id (``x-relayrl-lease``, a random secret per :class:`services.grpc.client.
  RelayClient`). The driver and every shard compute the same owner from the same call, so a
  writer's batches meet the same dedup state whichever path they take (a batch written through
  the driver lands in the shard's table under the same key as a direct write), and no caller can
  touch another's: the lease id is the holder's lease token. A caller that uses someone else's
  writer id (another lease) writes its own writer, whatever its ``seq``: seq poisoning is
  impossible, and a restarted actor (same writer id and credential, a new lease) is served at
  once; one that keeps its lease (``RelayClient(lease=...)``) goes on with its dedup state;
- **window**: a ``seq`` more than ``window`` ahead of the highest this server accepted from the
  writer is refused with INVALID_ARGUMENT naming ``seq``; lower ones pass on to the table, so
  retries of stored batches are still acknowledged as duplicates. A writer new to this server
  starts where its first batch says when its caller is distinct (a lease id or a client
  certificate: an actor that fails over from a shard to the driver, or a run resumed from a
  checkpoint, goes on at its own ``seq``); callers that cannot be told apart (a shared
  credential, nothing else) share one scope and are *anchored*: their writers start at -1;
- **rate** (optional): at most ``frames_per_s`` frames per second per writer, with a burst of one
  second's worth (RESOURCE_EXHAUSTED beyond: retry later);
- **bounded, and fair between credentials**: at most ``max_writers`` leases, and at most
  ``per_principal`` of them for one principal (a credential or client certificate, however many
  lease ids it makes up). A lease is only the window and rate of a writer (its dedup state lives
  in the table), so room is made, never refused: expired leases go first, then the least
  recently used lease of the principal that asks (at its share) or of the principal holding the
  most. One credential's holder cannot lock another out of the book.

Pure (no gRPC objects): refusals are :class:`Refused` errors carrying a status code name.

Examples:
    >>> leases = WriterLeases(window=4)
    >>> leases.admit("robot-1", 0, owner="a", frames=10, anchored=True)
    >>> leases.admit("robot-1", 9, owner="a", frames=10)
    Traceback (most recent call last):
    ...
    replay.wire.leases.Refused: seq: 9 is more than 4 ahead of the highest (0) of writer 'robot-1'
    >>> scoped_writer("external/robot-1", "0f1e2d3c")
    'external/robot-1@0f1e2d3c'

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
# One principal holds at most this share of a book's leases.
PRINCIPAL_SHARE = 4


def scoped_writer(writer: str, owner: str) -> str:
    """The replay writer of ``writer``'s batches from the caller ``owner`` (module docstring)."""
    return f"{writer}@{owner}"


class Refused(Exception):
    """A call refused by a lease; ``code`` names its gRPC status (``PERMISSION_DENIED``...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass
class _Lease:
    principal: str
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
        per_principal: Leases one principal holds at most (None: ``max_writers`` over
            :data:`PRINCIPAL_SHARE`).
        frames_per_s: Frames per second per writer (None: no limit).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        lease_s: float = LEASE_S,
        window: int = SEQ_WINDOW,
        max_writers: int = MAX_WRITERS,
        per_principal: int | None = None,
        frames_per_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease_s = lease_s
        self.window = window
        self.max_writers = max_writers
        self.per_principal = per_principal or max(1, max_writers // PRINCIPAL_SHARE)
        self.frames_per_s = frames_per_s
        self.clock = clock
        self._leases: collections.OrderedDict[str, _Lease] = collections.OrderedDict()
        self._held: collections.Counter[str] = collections.Counter()  # leases per principal
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._leases)

    def held(self, principal: str) -> int:
        """Leases ``principal`` holds."""
        return self._held[principal]

    def admit(
        self,
        writer: str,
        seq: int,
        *,
        owner: str,
        frames: int,
        anchored: bool = False,
        principal: str | None = None,
    ) -> None:
        """Lets batch ``seq`` of ``writer`` (``frames`` transitions) through, or refuses it.

        ``writer`` is the scoped writer (:func:`scoped_writer`); ``owner`` and ``principal``
        (default: ``owner``) name its caller. ``anchored``: a writer new to this server starts
        at -1 (its caller is not distinct), else at ``seq``.

        Raises:
            Refused: INVALID_ARGUMENT (``seq`` beyond the window), RESOURCE_EXHAUSTED (over the
                rate).
        """
        principal = owner if principal is None else principal
        with self._lock:
            now = self.clock()
            self._expire(now)
            lease = self._leases.get(writer)
            new = lease is None
            if lease is None:  # booked once it passes (a refused first batch takes no lease)
                start = -1 if anchored else seq - 1
                lease = _Lease(principal, start, now, self.frames_per_s or 0.0, now)
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
            if new:
                self._make_room(principal)
                self._held[principal] += 1
            lease.high = max(lease.high, seq)
            lease.used = now
            self._leases[writer] = lease
            self._leases.move_to_end(writer)

    def _make_room(self, principal: str) -> None:
        """Drops a lease when ``principal`` is at its share or the book is full (docstring)."""
        if self._held[principal] >= self.per_principal:
            victim = principal
        elif len(self._leases) >= self.max_writers:
            victim = self._held.most_common(1)[0][0]
        else:
            return
        for writer, lease in self._leases.items():  # least recently used first
            if lease.principal == victim:
                self._drop(writer)
                return

    def _drop(self, writer: str) -> None:
        lease = self._leases.pop(writer, None)
        if lease is not None:
            self._held[lease.principal] -= 1
            if not self._held[lease.principal]:
                del self._held[lease.principal]

    def _expire(self, now: float) -> None:
        """Drops leases idle past ``lease_s`` (the book is in order of last use)."""
        while self._leases:
            writer, lease = next(iter(self._leases.items()))
            if now - lease.used <= self.lease_s:
                return
            self._drop(writer)
