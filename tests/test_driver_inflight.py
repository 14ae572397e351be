"""The driver's rollouts in flight: free slots, overdue tickets, bounded bookkeeping (pure)."""

from collector.manage.restarts import DeathLedger
from services.driver.inflight import InFlight


def test_free_slots_refill_as_rollouts_finish_and_never_exceed_max_inflight():
    inflight = InFlight(num_collectors=3, slots=2)
    issued = []
    while (index := inflight.next_free()) is not None:
        inflight.add(len(issued), index)
        issued.append(index)
    assert sorted(issued) == [0, 0, 1, 1, 2, 2] and issued[:3] == [0, 1, 2]  # slot by slot
    assert inflight.per_collector == [2, 2, 2] and len(inflight) == 6
    assert inflight.pop(4) == 1  # ticket 4 ran on collector 1
    assert inflight.next_free() == 1 and inflight.next_free() is None
    inflight.release(1)  # the turn was not used (e.g. the frame budget closed)
    assert inflight.next_free() == 1


def test_rollouts_issued_without_turns_keep_the_free_queue_bounded():
    # The on-policy loop issues one rollout per collector per iteration without asking for
    # turns; thousands of iterations must not grow the queue of turns.
    inflight = InFlight(num_collectors=4, slots=2)
    for iteration in range(1000):
        for index in range(4):
            inflight.add((iteration, index), index)
        for index in range(4):
            inflight.pop((iteration, index))
    assert len(inflight._free) <= 4 * 2
    assert [inflight.next_free() for _ in range(9)].count(None) == 1


def test_overdue_looks_at_the_oldest_rollouts_only_and_reports_each_once():
    now = [0.0]
    inflight = InFlight(num_collectors=2, slots=2, clock=lambda: now[0])
    for ticket in range(4):
        now[0] = float(ticket)
        inflight.add(ticket, ticket % 2)
    now[0] = 10.0
    assert inflight.overdue(timeout=8.5) == [(0, 0), (1, 1)]
    assert inflight.overdue(timeout=8.5) == []
    inflight.pop(0)
    now[0] = 11.0
    assert inflight.overdue(timeout=8.5) == [(2, 0)]


def test_one_death_failing_several_rollouts_counts_once_and_recovery_ends_on_an_answer():
    ledger = DeathLedger(num_collectors=2)
    for ticket in ("a", "b", "c"):
        ledger.issued(ticket, 0)
    assert [ledger.died(0, t) for t in ("a", "b")] == [True, False]
    assert ledger.restarts == 1 and ledger.recovering(0) and not ledger.recovering(1)
    assert ledger.issued("d", 0)  # sent while recovering: carries the newest weights
    ledger.answered(0, "c", dead=True)  # issued before the death: says nothing
    ledger.answered(0, "d", dead=True)  # lost again before the restart: still recovering
    assert ledger.recovering(0)
    assert not ledger.died(0, "d")  # issued while recovering: the same death
    assert ledger.issued("e", 0)
    ledger.answered(0, "e", dead=False)
    assert not ledger.recovering(0) and ledger.restarts == 1
    assert ledger.died(0, "f") and ledger.restarts == 2  # unknown ticket: a new death
