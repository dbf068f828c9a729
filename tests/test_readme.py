"""The README's Python example runs as written and its quoted numbers hold."""

from __future__ import annotations

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(tmp_path, monkeypatch):
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has a python example"
    monkeypatch.chdir(tmp_path)  # the example saves a file
    ns = {"np": np}
    exec(compile(blocks[0], "README.md", "exec"), ns)
    lo, hi = ns["lo"], ns["hi"]
    assert lo <= 7.0167886 <= hi  # exact (Balle & Wang) epsilon quoted in the README
    assert (tmp_path / "run.pld").exists()
