"""An algorithm is one registration: nothing outside it (and its own modules) names it.

The check reads the code of ``services/``, ``learner/``, ``collector/`` and ``replay/`` with
``ast``: an algorithm is *named* by an identifier equal to its name (``sac``, ``config.sac``)
or by a string literal holding it as a word (``"ppo"``, ``"learner.losses.dqn:dqn_loss"``,
``"algorithm=dqn"``). Docstrings and comments are prose and may mention any algorithm. The
places allowed to name an algorithm are its registration module (``learner/algorithms/``),
its loss module, the factories of its TorchRL losses and the modules it declares its own.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from learner.algorithms import ALGORITHMS, OPTION_SECTIONS, learn_entries, solve_tasks
from learner.config import LearnerConfig
from learner.losses import LOSSES
from services.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("services", "learner", "collector", "replay")
WORD = re.compile(r"[A-Za-z0-9]+")


def _module_file(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def owned_files(name: str) -> set[Path]:
    """The files allowed to name algorithm ``name``."""
    algo = ALGORITHMS[name]
    registration = importlib.import_module(
        next(
            m.__name__
            for m in map(importlib.import_module, _registration_modules())
            if any(a.name == name for a in m.REGISTERED)
        )
    )
    modules = {algo.loss_module, *algo.modules}
    modules |= {factory.partition(":")[0] for factory in algo.torchrl_losses.values()}
    return {Path(registration.__file__).resolve(), *(_module_file(m).resolve() for m in modules)}


def _registration_modules() -> list[str]:
    folder = ROOT / "learner" / "algorithms"
    return [
        f"learner.algorithms.{p.stem}"
        for p in sorted(folder.glob("*.py"))
        if p.stem not in ("__init__", "spec") and not p.stem.startswith("_")
    ]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def names_in(source: str, names: set[str]) -> list[tuple[int, str, str]]:
    """``(line, algorithm, text)`` for each place ``source`` names one of ``names``."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        identifiers: list[str] = []
        strings: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                strings.append(node.value)
        elif isinstance(node, ast.Name):
            identifiers.append(node.id)
        elif isinstance(node, ast.Attribute):
            identifiers.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            identifiers.append(node.name)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            identifiers.append(node.arg)
        elif isinstance(node, ast.alias):
            identifiers.extend(node.name.split("."))
        for text in identifiers:
            if text.lower() in names:
                hits.append((node.lineno, text.lower(), text))
        for text in strings:
            for word in {w.lower() for w in WORD.findall(text)} & names:
                hits.append((node.lineno, word, text[:80]))
    return hits


def test_the_check_finds_what_it_must():
    names = {"ppo", "sac"}
    source = '''
"""A docstring may say ppo."""
LOSS = "learner.losses.ppo:ppo_loss"   # a string naming it
def f(config):
    """So may this one: sac."""
    return config.learner.sac.init_alpha   # an attribute named after it
x = {"algorithm=sac": 1}
'''
    hits = names_in(source, names)
    assert sorted({(line, name) for line, name, _ in hits}) == [(3, "ppo"), (6, "sac"), (7, "sac")]
    assert names_in('"""ppo, sac."""\nY = "sackcloth ppo2"\n', names) == []


def test_no_algorithm_is_named_outside_its_registration():
    names = set(ALGORITHMS)
    allowed = {name: owned_files(name) for name in names}
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            for line, name, text in names_in(path.read_text(), names):
                if path.resolve() not in allowed[name]:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {name} ({text!r})")
    assert offenders == [], "\n".join(offenders)


def test_every_registration_is_whole():
    configs = {p.name for p in (ROOT / "deploy" / "configs").glob("*.yaml")}
    named = [c for algo in ALGORITHMS.values() for c in algo.configs]
    assert sorted(named) == sorted(configs), "every shipped config belongs to one registration"
    from services.driver.loops import DETERMINISTIC_LOOPS, LOOPS

    for name, algo in ALGORITHMS.items():
        assert algo.loop in LOOPS, name
        if algo.loop not in DETERMINISTIC_LOOPS:  # refused with run.deterministic
            with pytest.raises(ConfigError, match=r"run\.deterministic"):
                load_config(overrides=[f"algorithm={name}", "run.deterministic=true"])
        assert algo.loss in LOSSES and LOSSES[algo.loss].factory == algo.loss_factory
        assert _module_file(algo.loss_module).exists(), name
        for module in algo.modules:
            assert _module_file(module).exists(), (name, module)
        for section, options in algo.options.items():
            assert OPTION_SECTIONS[section] is options
            assert isinstance(getattr(LearnerConfig(), section), options)
        for entry in algo.learn:
            assert entry.config in algo.configs, (name, entry.name)
        if algo.solve is not None:
            assert algo.solve.config in algo.configs, name
    assert len({e.name for e in learn_entries()}) == len(learn_entries())
    assert set(solve_tasks()) <= set(ALGORITHMS)


def test_learner_config_fields_come_from_the_registrations():
    fields = {f.name for f in dataclasses.fields(LearnerConfig)}
    assert set(OPTION_SECTIONS) <= fields
    assert LearnerConfig().loss == ALGORITHMS[next(iter(ALGORITHMS))].loss


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_shipped_config_runs_its_registration(name):
    import yaml

    for config in ALGORITHMS[name].configs:
        data = yaml.safe_load((ROOT / "deploy" / "configs" / config).read_text())
        assert data.get("algorithm", next(iter(ALGORITHMS))) == name, config
