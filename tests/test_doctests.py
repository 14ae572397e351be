"""The ``>>>`` examples in the four packages' docstrings run, as written, in the suite.

Examples that need a running cluster or a run carry ``# doctest: +SKIP`` (they are still read by
people, and kept); everything else runs here, so an example that drifts from the code fails.
The test command installs the optional extras (``atari``, ``torchrl``, ``marl``) whose modules
some examples import.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

from tests.conftest import ROOT

PACKAGES = ("replay", "collector", "learner", "services")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def module_names() -> list[str]:
    """Every module of the four packages that has an example (commands' ``__main__`` aside)."""
    names = []
    for package in PACKAGES:
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            if info.name.endswith(("__main__", "_pb2", "_pb2_grpc")):
                continue
            path = ROOT / (info.name.replace(".", "/") + ("/__init__.py" if info.ispkg else ".py"))
            if ">>>" in path.read_text():
                names.append(info.name)
        if ">>>" in (ROOT / package / "__init__.py").read_text():
            names.append(package)
    return sorted(set(names))


def test_examples_are_found():
    assert len(module_names()) >= 30


@pytest.mark.parametrize("name", module_names())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, globs=dict(vars(module)))
    assert tests, f"{name} has '>>>' but no example was found"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
