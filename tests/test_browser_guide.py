"""docs/browser.md's code is the playground's code: every block equals its file (or region)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "browser.md"


def guide_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("browser_guide", ROOT / "scripts" /
                                                  "browser_guide.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_code_block_is_byte_identical_to_the_playground_file() -> None:
    text = GUIDE.read_text()
    assert guide_script().render(text) == text, "run scripts/browser_guide.py"
    for whole in ("agentloop.js", "transcript.js", "asks.js", "dom.js"):
        assert (ROOT / "app" / "static" / whole).read_text() in text, whole
    for region in ("create", "open", "steer"):
        assert f"<!-- code: app/static/app.js#{region} -->" in text


def test_the_check_notices_a_file_that_changed(tmp_path: Path) -> None:
    script = guide_script()
    shutil.copytree(ROOT / "app" / "static", tmp_path / "app" / "static")
    client = tmp_path / "app" / "static" / "agentloop.js"
    client.write_text(client.read_text().replace("class Client", "class Klient"))
    assert script.render(GUIDE.read_text(), tmp_path) != GUIDE.read_text()
    with pytest.raises(ValueError, match="no region 'open'"):
        script.excerpt("app/static/dom.js#open", tmp_path)


def test_the_script_checks_from_the_command_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "browser_guide.py"),
                           "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_an_empty_block_is_filled_without_swallowing_the_next_ones() -> None:
    guide = ("<!-- code: app/static/dom.js -->\n```js\n```\n\nprose between\n\n"
             "<!-- code: app/static/app.js#answer -->\n```js\nstale\n```\nthe end\n")
    rendered = guide_script().render(guide)
    assert "prose between\n" in rendered and rendered.endswith("```\nthe end\n")
    assert "export function el(" in rendered and "answer(event, {kind, ...body})" in rendered
    assert "stale" not in rendered
