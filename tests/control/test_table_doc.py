"""docs/events.md's state × action table and these tests stay in step: every row names a test
here that runs once per state, and every test here that runs per state is in the table."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from tests.control.test_run_actions import STATES

DOC = Path(__file__).parents[2] / "docs" / "events.md"


def rows() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Acting on a run: the state × action table", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_the_table_has_a_column_per_state_and_a_test_per_row() -> None:
    header, *body = rows()
    assert header == ["action", *STATES, "test"]
    named = set()
    for row in body:
        assert len(row) == len(header) and all(row), row
        match = re.fullmatch(r"`(test_\w+)\.py::(test_\w+)`", row[-1])
        assert match, row[-1]
        module = importlib.import_module(f"tests.control.{match[1]}")
        test = getattr(module, match[2])
        states = [m.args[1] for m in test.pytestmark if m.name == "parametrize"
                  and m.args[0] == "state"]
        assert states == [STATES], f"{match[2]} does not run once per state"
        named.add((match[1], match[2]))
    for name in ("test_run_actions", "test_thread_actions", "test_deadlines"):
        module = importlib.import_module(f"tests.control.{name}")
        for attr, value in vars(module).items():
            per_state = any(m.name == "parametrize" and m.args[0] == "state"
                            for m in getattr(value, "pytestmark", []))
            if attr.startswith("test_") and per_state:
                assert (name, attr) in named, f"{name}::{attr} is not in the table"
