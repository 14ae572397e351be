"""The README and docs/: length, the two commands first, links and anchors, cited pages, commands.

Pure text checks (no Ray started): they keep the user documentation honest as the code moves.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from learner.algorithms import ALGORITHMS as REGISTERED
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

# CI (.ci/run) and a hook read these two blocks: keep them byte-identical and first.
MAIN_COMMAND = 'pip install "torch==2.13.0" && pip install -e . && python -m services.train'
TEST_COMMAND = (
    'pip install "torch==2.13.0" && pip install -e '
    '".[dev,atari,torchrl,marl,box2d,mujoco,tune,mlflow,wandb,minigrid,popgym]" '
    "&& python -m pytest -q"
)
ALGORITHMS = tuple(REGISTERED)  # every registration (learner.algorithms)
README_MAX_LINES = 250

FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block, in order."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        if FENCE.match(line):
            if lang is None:
                lang, body = line.strip()[3:].strip(), []
            else:
                blocks.append((lang, "\n".join(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, "an unclosed code fence"
    return blocks


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page, with GitHub's -1, -2 for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text()):
        match = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """Link targets in a page's prose (code blocks and code spans are not links)."""
    targets = []
    for line in prose_lines(page.read_text()):
        targets += LINK.findall(CODE_SPAN.sub("code", line))
    return targets


def python_files() -> list[Path]:
    return [
        path
        for path in ROOT.rglob("*.py")
        if not any(part.startswith(".") or part == "__pycache__" for part in path.parts)
    ]


def test_slug_follows_github():
    assert slug("Atari (pixels)") == "atari-pixels"
    assert slug("Multi-agent: IQL, VDN and QMIX") == "multi-agent-iql-vdn-and-qmix"
    assert slug("The rooms of services/") == "the-rooms-of-services"
    assert slug("`torch.compile` and run_id") == "torchcompile-and-run_id"


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    blocks = fenced_blocks(text)
    assert blocks[:2] == [("bash", MAIN_COMMAND), ("bash", TEST_COMMAND)]


def test_readme_intro_names_every_algorithm():
    text = README.read_text()
    intro = text[: text.index("```")]
    for name in ALGORITHMS:
        assert re.search(rf"\b{name}\b", intro), name
        assert f"| `{name}` |" in text, f"the algorithm table has no row for {name}"


def test_readme_algorithm_table_matches_the_registrations():
    rows = {}
    for line in README.read_text().splitlines():
        match = re.match(r"^\| `(\w+)` \| ([\w-]+) \|.*\| ([^|]*) \|$", line)
        if match:
            rows[match[1]] = (match[2], match[3])
    assert set(rows) == set(REGISTERED), "one README row per registered algorithm"
    for name, (loop, configs) in rows.items():
        algo = REGISTERED[name]
        words = {"offpolicy": "off-policy", "onpolicy": "on-policy", "async": "asynchronous"}
        assert loop == words[algo.loop], name
        for config in re.findall(r"`([\w.]+\.yaml)`", configs):
            assert config in algo.configs, f"README row {name} lists {config}, not its config"


def test_readme_config_example_is_valid(tmp_path):
    from services.config import load_config

    examples = [body for lang, body in fenced_blocks(README.read_text()) if lang == "yaml"]
    assert len(examples) == 1
    path = tmp_path / "example.yaml"
    path.write_text(examples[0])
    config = load_config(path)
    assert config.algorithm in ALGORITHMS


def test_readme_links_every_docs_page():
    linked = {(README.parent / target.split("#")[0]).resolve() for target in links(README)}
    missing = [page.name for page in DOCS if page.resolve() not in linked]
    assert not missing, f"README.md links no docs/{missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{page.name}: {broken}"


def test_docs_cited_in_python_exist():
    cited: dict[str, list[str]] = {}
    for path in python_files():
        for name in re.findall(r"\bdocs/[\w.-]+\.md\b", path.read_text(errors="replace")):
            cited.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert "docs/benchmarks.md" in cited
    missing = {name: files for name, files in cited.items() if not (ROOT / name).exists()}
    assert not missing, missing


def test_no_docstring_cites_a_missing_design_file():
    citing = [
        str(path.relative_to(ROOT))
        for path in python_files()
        if re.search(r"\bDESIGN\b", path.read_text(errors="replace")) and path != Path(__file__)
    ]
    assert (ROOT / "DESIGN.md").exists() or not citing, f"cite docs/ instead: {citing}"


def test_documented_python_modules_exist():
    modules = set()
    for page in PAGES:
        modules |= set(re.findall(r"\bpython3? -m ([A-Za-z_][\w.]*)", page.read_text()))
    assert {"services.train", "pytest"} <= modules
    missing = []
    for module in sorted(modules):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(module)
    assert not missing, f"python -m names no module: {missing}"
