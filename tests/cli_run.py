"""A CLI run as a subprocess, read line by line: :class:`CliRun`; one run shared by a module.

Every end-to-end test that starts ``python -m services.train`` (or ``services.external_actor``)
and talks to it while it runs goes through :class:`CliRun`::

    with CliRun("--set", "controller.total_frames=1000000", run_dir=tmp_path) as run:
        run.until_episodes()              # the first progress line with finished episodes
        run.send_signal(signal.SIGTERM)
        summary = run.summary()           # exit code 0, the JSON last line of stdout
    assert summary["stopped_early"]

Both streams are read on threads, so a test never blocks on a full pipe or a hung run: each wait
has a timeout and fails with the tail of the run's log. A run that ends returns its exit code
and its summary (the JSON last line); ``close`` (the ``with`` block's end) kills what is left.
Tests that only need a finished run's output use :func:`tests.conftest.run_cli`.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import PYTHON, ROOT, cli_env

_EOF = None


def frames_of(progress_line: str) -> int:
    """Frames counted so far, from a progress line ``frames 5,120/40,000 | ...``."""
    return int(progress_line.split()[1].split("/")[0].replace(",", ""))


def is_progress(line: str) -> bool:
    """Whether ``line`` is a progress line (``frames N/M | ...``)."""
    return line.startswith("frames ")


class CliRun:
    """``python -m MODULE ARGS`` from the repo root, its stdout and stderr read on threads.

    Args:
        *args: The command's arguments.

    Keyword Args:
        module: The module run with ``python -m``.
        run_dir: Appended as ``--set run.dir=RUN_DIR`` when given.
        env: The whole environment (default: :func:`tests.conftest.cli_env`).
        stderr: Read stderr into :attr:`log` (False: discarded).
        new_session: Start the process in its own session and process group, as under a shell
            or a supervisor (:meth:`send_signal` with ``group=True`` reaches all of it).
        on_log: Called with each stderr line on the reader thread, as it comes (for what must
            happen at once, e.g. a scrape before the run's actors start).

    Attributes:
        lines: Stdout lines read so far (progress lines, then the JSON summary).
        log: Stderr lines read so far.
        process: The ``subprocess.Popen``.
    """

    def __init__(
        self,
        *args: str,
        module: str = "services.train",
        run_dir: Any = None,
        env: dict[str, str] | None = None,
        stderr: bool = True,
        new_session: bool = False,
        on_log: Callable[[str], None] | None = None,
    ) -> None:
        command = [PYTHON, "-m", module, *args]
        if run_dir is not None:
            command += ["--set", f"run.dir={run_dir}"]
        self.run_dir = run_dir
        self.lines: list[str] = []
        self.log: list[str] = []
        self._stdout: queue.Queue[str | None] = queue.Queue()
        self._logged = threading.Condition()
        self._log_done = not stderr
        self._on_log = on_log
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=cli_env() if env is None else env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr else subprocess.DEVNULL,
            text=True,
            start_new_session=new_session,
        )
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True)]
        if stderr:
            self._readers.append(threading.Thread(target=self._read_stderr, daemon=True))
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        for line in self.process.stdout:
            self._stdout.put(line.rstrip("\n"))
        self._stdout.put(_EOF)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            if self._on_log is not None:
                self._on_log(line)
            with self._logged:
                self.log.append(line.rstrip("\n"))
                self._logged.notify_all()
        with self._logged:
            self._log_done = True
            self._logged.notify_all()

    def tail(self, n: int = 30) -> str:
        """The last ``n`` lines of stderr and of stdout, for a failure message."""
        return "\n".join(["-- stderr:", *self.log[-n:], "-- stdout:", *self.lines[-n:]])

    # -- reading while it runs -----------------------------------------------------------------
    def until(
        self, predicate: Callable[[str], Any], timeout: float = 240, what: str = "a line"
    ) -> str:
        """Reads stdout until a line satisfies ``predicate``; returns that line.

        Fails the test when the run ends or ``timeout`` seconds pass first.
        """
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._stdout.get(timeout=max(left, 0.01))
            except queue.Empty:
                pytest.fail(f"no {what} within {timeout:g} s\n{self.tail()}")
            if line is _EOF:
                self._stdout.put(_EOF)
                pytest.fail(f"the run ended ({self.process.wait()}) before {what}\n{self.tail()}")
            self.lines.append(line)
            if predicate(line):
                return line

    def until_frames(self, frames: int, timeout: float = 240) -> str:
        """The first progress line past ``frames`` frames."""
        return self.until(
            lambda line: is_progress(line) and frames_of(line) > frames,
            timeout,
            f"a progress line past {frames} frames",
        )

    def until_episodes(self, timeout: float = 240) -> str:
        """The first progress line with finished episodes (training is under way)."""
        return self.until(
            lambda line: is_progress(line) and "return -" not in line,
            timeout,
            "a progress line with episodes",
        )

    def wait_log(self, pattern: str, timeout: float = 240) -> re.Match:
        """The first stderr line matching the regex ``pattern`` (read so far or to come)."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        checked = 0
        with self._logged:
            while True:
                for line in self.log[checked:]:
                    if match := compiled.search(line):
                        return match
                checked = len(self.log)
                left = deadline - time.monotonic()
                if self._log_done or left <= 0:
                    break
                self._logged.wait(left)
        pytest.fail(f"no stderr line matching {pattern!r}\n{self.tail()}")

    def send_signal(self, signum: int = signal.SIGTERM, *, group: bool = False) -> None:
        """Sends ``signum`` to the run (``group``: to its whole process group)."""
        if group:
            os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)

    # -- its end -------------------------------------------------------------------------------
    def finish(self, timeout: float = 240) -> tuple[int, dict]:
        """Waits for the exit; returns its code and the JSON last line of stdout ({} if none)."""
        code = self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=30)
        while True:  # what the reader has queued (all of it, unless a child holds the pipe)
            try:
                line = self._stdout.get_nowait()
            except queue.Empty:
                break
            if line is _EOF:
                self._stdout.put(_EOF)
                break
            self.lines.append(line)
        last = self.lines[-1] if self.lines else ""
        return code, json.loads(last) if last.startswith("{") else {}

    def summary(self, timeout: float = 240, code: int = 0) -> dict:
        """Waits for the exit, asserts its ``code`` and returns the JSON summary."""
        exit_code, summary = self.finish(timeout)
        assert exit_code == code, self.tail()
        assert summary, self.tail()
        return summary

    def close(self) -> None:
        """Kills the run if it still runs and reaps it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=60)
        for reader in self._readers:
            reader.join(timeout=30)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> CliRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SharedRun:
    """One live run shared by a module's tests, started when first needed, again after a stop.

    A module fixture holds one; tests that only talk to the run call :meth:`get`, and a test
    that ends it (a stop, a signal) calls :meth:`take`, so whichever test comes next, in any
    order or alone, gets a live run::

        @pytest.fixture(scope="module")
        def shared(tmp_path_factory):
            with SharedRun(lambda n: Started(tmp_path_factory.mktemp(f"run{n}"))) as runs:
                yield runs

    Args:
        start: Starts a run; called with the number of runs started before. Whatever it returns
            needs a ``close()`` and a ``process`` (a :class:`CliRun` or an object holding one).
    """

    def __init__(self, start: Callable[[int], Any]) -> None:
        self._start = start
        self._runs: list[Any] = []
        self._taken = True

    def get(self) -> Any:
        """The live shared run, started now if there is none."""
        if self._taken or self._runs[-1].process.poll() is not None:
            self._runs.append(self._start(len(self._runs)))
            self._taken = False
        return self._runs[-1]

    def take(self) -> Any:
        """The live run, for a test that ends it; the next :meth:`get` starts another."""
        run = self.get()
        self._taken = True
        return run

    def close(self) -> None:
        """Closes every run started."""
        for run in self._runs:
            run.close()

    def __enter__(self) -> SharedRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
