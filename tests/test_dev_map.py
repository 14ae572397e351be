"""docs/development.md names only paths that exist: its map, its commands, its test files.

A path is a code span (or a word in a command block) with a ``/`` or a file suffix. A bare name
(``rollout.py``) or a relative one (``bench/``) is looked up under the repo root, then under
the folder of the nearest full path before it in the same table cell or paragraph: in
``collector/`` (``rollout.py``, ``nstep.py``) both names live in ``collector/``. A ``test_*``
name is a file under ``tests/``. Names with placeholders (``learner/losses/<name>.py``) are
skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

DEVELOPMENT = ROOT / "docs" / "development.md"
SUFFIXES = (".py", ".md", ".yaml", ".yml", ".json", ".proto", ".toml", ".txt")
PATHLIKE = re.compile(r"^[\w.*/-]+$")
TEST_NAME = re.compile(r"^test_\w+\*?$")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
COMMAND_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.*-]*)")


def is_path(token: str) -> bool:
    return bool(PATHLIKE.match(token)) and ("/" in token or token.endswith(SUFFIXES))


def exists(path: Path) -> bool:
    if "*" in path.name:
        return any(path.parent.glob(path.name))
    return path.exists()


def units(text: str) -> list[tuple[str, list[str]]]:
    """``(kind, tokens)`` per table cell, prose paragraph and command block, in order."""
    found, paragraph, inside = [], [], False
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if inside:
            found.append(("command", COMMAND_PATH.findall(line)))
        elif line.startswith("|"):
            found += [("cell", CODE_SPAN.findall(cell)) for cell in line.strip("|").split("|")]
        elif line.strip():
            paragraph += CODE_SPAN.findall(line)
        else:
            found.append(("prose", paragraph))
            paragraph = []
    return found


def missing_paths(text: str) -> list[str]:
    """The paths and test names ``text`` (a docs/development.md) names that do not exist."""
    missing = []
    for _, tokens in units(text):
        folder = ROOT
        for token in tokens:
            if "<" in token:
                continue
            if TEST_NAME.match(token):
                if not exists(ROOT / "tests" / f"{token.removesuffix('*')}*.py"):
                    missing.append(token)
                continue
            if not is_path(token):
                continue
            rooted = ROOT / token
            if "/" in token and exists(rooted):  # the folder for the names after it
                folder = rooted if rooted.is_dir() else rooted.parent
            elif not (exists(rooted) or exists(folder / token)):
                missing.append(token)
    return missing


def test_every_path_docs_development_names_exists():
    missing = missing_paths(DEVELOPMENT.read_text())
    assert not missing, f"docs/development.md names paths that do not exist: {missing}"


def test_the_check_finds_a_moved_file():
    text = (
        "| concern | where |\n|---|---|\n"
        "| envs | `collector/` (`rollout.py`, `no_such_module.py`) |\n"
        "| ranks | `learner/rank.py` |\n\n"
        "Tests: `test_replay_*`, `test_no_such_file`.\n\n"
        "```bash\npython -m pytest -q tests/test_no_such_file.py\n```\n"
    )
    assert missing_paths(text) == [
        "no_such_module.py",
        "learner/rank.py",
        "test_no_such_file",
        "tests/test_no_such_file.py",
    ]
