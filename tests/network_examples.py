"""The worked examples of docs/networks.md, importable as ``tests.network_examples:<factory>``.

Importing this module executes the page's Python blocks, in order, in this module's namespace,
so a config naming ``learner.network: tests.network_examples:residual_q_network`` trains the
page's own code (collectors and learners import it by name, like any user's module).
"""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "networks.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
BLOCKS = BLOCK.findall(PAGE.read_text())

for _block in BLOCKS:
    exec(compile(_block, str(PAGE), "exec"), globals())  # the documented examples, as written
