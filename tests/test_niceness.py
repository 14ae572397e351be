"""``collector.niceness``: every thread of a process lowered, later threads inheriting it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collector.niceness import MAX_NICE, renice_process, thread_niceness

# In a child process: this test's own process must keep its priority.
CHILD = """
import json, os, threading
from collector.niceness import renice_process, thread_niceness
ready, done = threading.Barrier(3), threading.Event()
def wait(nice):
    os.nice(nice)  # threads at other values than the main thread's, as in a restarted Ray actor
    ready.wait()
    done.wait()
threads = [threading.Thread(target=wait, args=(nice,)) for nice in (0, 7)]
for thread in threads:
    thread.start()
ready.wait()
before = thread_niceness()
after_self = renice_process({increment})
during = thread_niceness()
seen = {{}}
late = threading.Thread(target=lambda: seen.update(nice=os.getpriority(os.PRIO_PROCESS, 0)))
late.start()
late.join()
done.set()
print(json.dumps({{"before": before, "during": during, "self": after_self, "late": seen["nice"]}}))
"""


def run_child(increment: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(increment=increment)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not thread_niceness(), reason="needs Linux /proc")
@pytest.mark.parametrize("increment", [3, 30])
def test_every_thread_is_lowered_and_a_later_thread_inherits(increment):
    result = run_child(increment)
    before, during = result["before"], result["during"]
    assert len(before) >= 3 and set(before) == set(during)  # main + 2 waiting threads
    main = before[min(before)]  # the main thread's id is the process id, the smallest
    assert len(set(before.values())) > 1  # not all alike before
    target = min(MAX_NICE, main + increment)
    assert set(during.values()) == {target}  # every thread at the process's niceness + increment
    assert result["self"] == result["late"] == target


def test_raising_priority_is_refused_and_zero_changes_nothing():
    with pytest.raises(ValueError, match="increment: must be >= 0"):
        renice_process(-1)
    assert renice_process(0) == thread_niceness()[min(thread_niceness())]
