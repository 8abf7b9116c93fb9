"""A TypeScript client generated from the live server's ``/openapi.json`` (openapi-typescript
and openapi-fetch, the versions package-lock.json pins), compiled with ``tsc --strict`` and run
under node against the server: it creates a run, reads it, steers it and reads its events with
typed access to tool calls and results (``typed_client.ts``, which also holds compile-time
checks that the schema keeps defaulted options optional, enums closed and events
discriminated)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import serve
from tests.support.steer_gate import ANSWER, GATE_RESULT, gated_script, open_gate_after_steer

HERE = Path(__file__).parent
BIN = HERE / "node_modules" / ".bin"
TSCONFIG = {
    "compilerOptions": {
        "strict": True, "target": "es2022", "module": "nodenext",
        "moduleResolution": "nodenext", "lib": ["es2022", "dom", "dom.iterable"],
        "noEmitOnError": True, "skipLibCheck": False, "noUnusedLocals": True,
    },
    "files": ["typed_client.ts"],
}


async def run(*argv: str | Path, cwd: Path, within: float = 120) -> str:
    proc = await asyncio.create_subprocess_exec(*map(str, argv), cwd=cwd,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(within):
        out, err = await proc.communicate()
    assert proc.returncode == 0, (out + err).decode()
    return out.decode()


@pytest.fixture
def build() -> Iterator[Path]:
    """A scratch folder inside tests/js, so node finds node_modules from it."""
    if shutil.which("node") is None or not (BIN / "tsc").exists():
        pytest.fail("node or tests/js/node_modules missing: `make test` installs both (npm ci)")
    path = Path(tempfile.mkdtemp(prefix=".typed-client-", dir=HERE))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def compile_client(base_url: str, build: Path) -> Path:
    """Generate ``schema.d.ts`` from the served document, compile ``typed_client.ts``."""
    await run(BIN / "openapi-typescript", f"{base_url}/openapi.json", "-o", "schema.d.ts",
              cwd=build)
    shutil.copy(HERE / "typed_client.ts", build)
    (build / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    await run(BIN / "tsc", "-p", "tsconfig.json", "--strict", cwd=build)
    return build / "typed_client.js"


@pytest.mark.timeout(240)
async def test_generated_typescript_client_drives_a_run(build: Path) -> None:
    async with serve(api_key="key-ts", api_keys="key-ts:frontend") as api:
        script = await compile_client(api.url, build)
        api.fake.script = gated_script()
        async with open_gate_after_steer(api):
            seen: dict[str, Any] = json.loads(await run("node", script, api.url, "key-ts",
                                                        cwd=build))
    assert seen["created"]["status"] == "queued"
    assert seen["read"]["hasToken"] and seen["steer"] == {"kind": "steer", "position": 1}
    assert seen["picks"] == [{"type": "tool_call", "id": seen["calls"][0]["id"],
                              "name": "contract_gate", "arguments": {}}]
    assert seen["calls"] == [{"id": seen["picks"][0]["id"], "name": "contract_gate", "args": {}}]
    assert seen["results"] == [{"id": seen["calls"][0]["id"], "text": GATE_RESULT,
                                "isError": False}]
    assert seen["queued"] == ["steer"] and seen["answer"] == ANSWER
    assert seen["end"]["stopReason"] == "stop" and seen["end"]["totalTokens"] > 0
    assert seen["types"][0] == "run_created" and seen["types"][-1] == "agent_end"
    steer_text = api.fake.requests[1].messages[-1].content
    assert [block.text for block in steer_text] == ["and then stop"]
