"""The CLI's signal handlers (``services.train.install_signal_handlers``), on a real controller.

A whole run stopped by a signal to its process group: ``tests/test_faults.py`` (SIGTERM). Here,
without a cluster: Ctrl-C's SIGINT and SIGTERM both ask for a stop at the next boundary, and a
second signal exits at once.
"""

from __future__ import annotations

import os
import signal

import pytest

from services.config import load_config
from services.driver.controller import Controller
from services.train import install_signal_handlers


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_asks_for_a_stop_and_a_second_exits_at_once(first):
    controller = Controller(load_config(overrides=["controller.total_frames=5000"]))
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        install_signal_handlers(controller)
        os.kill(os.getpid(), first)
        assert controller.stop_requested and controller.stop_reason == f"signal {int(first)}"
        second = signal.SIGTERM if first == signal.SIGINT else signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), second)
        assert controller.stop_reason == f"signal {int(first)}"  # the first one's reason stays
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
