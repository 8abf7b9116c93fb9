"""providers.catalog: model strings, credentials, profiles, caching, the default model."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from providers.attachments import BASIC
from providers.base import ModelRequest
from providers.catalog import (
    Catalog,
    ModelSpecError,
    Profile,
    ProviderSettings,
    accepts,
    default_model,
    parse_model,
)
from providers.messages import UserMessage
from providers.openai import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider
from tests.providers import collect, fixture
from tests.support.wire_server import Reply, WireServer


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


@pytest.mark.parametrize(("spec", "parsed"), [
    ("openai:gpt-4.1-mini", ("openai", "gpt-4.1-mini")),
    ("bedrock:anthropic.claude-3-5-sonnet-20240620-v1:0",
     ("bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0")),
    ("ollama:qwen3:8b", ("ollama", "qwen3:8b")),
    ("demo:echo", ("demo", "echo")),
])
def test_parse_model(spec: str, parsed: tuple[str, str]) -> None:
    assert parse_model(spec) == parsed


@pytest.mark.parametrize(("spec", "words"), [
    ("gpt-4.1", "provider:model"), (":gpt-4.1", "empty"), ("openai:", "empty"),
    ("nope:model", "unknown provider 'nope'"), ("fake:x", "unknown provider 'fake'"),
])
def test_parse_model_errors(spec: str, words: str) -> None:
    with pytest.raises(ModelSpecError) as info:
        parse_model(spec)
    assert words in info.value.message and info.value.field == "model"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("env", "model"), [
    ({}, "demo:echo"),
    ({"GOOGLE_API_KEY": "g"}, "gemini:gemini-2.5-flash"),
    ({"GEMINI_API_KEY": "g", "ANTHROPIC_API_KEY": "a"}, "anthropic:claude-sonnet-4-5"),
    ({"GEMINI_API_KEY": "g", "OPENAI_API_KEY": "o"}, "openai:gpt-4.1-mini"),
    ({"OPENAI_API_KEY": ""}, "demo:echo"),
])
def test_default_model(env: dict[str, str], model: str) -> None:
    assert default_model(env) == model


def test_configured_and_missing_credentials(client) -> None:
    catalog = Catalog(client, {"OPENAI_API_KEY": "sk"}, ProviderSettings())
    assert catalog.configured() == ["openai", "openai-responses", "demo", "ollama"]
    with pytest.raises(ModelSpecError, match="set ANTHROPIC_API_KEY"):
        catalog.resolve("anthropic:claude-sonnet-4-5")
    with pytest.raises(ModelSpecError, match="set GEMINI_API_KEY or GOOGLE_API_KEY"):
        catalog.provider("gemini")
    with pytest.raises(ModelSpecError, match="set GROQ_API_KEY"):
        catalog.resolve("groq:llama-3.3-70b-versatile")
    with pytest.raises(ModelSpecError, match="unknown provider 'fake'"):
        catalog.resolve("fake:x")


def test_providers_are_cached_and_named(client) -> None:
    catalog = Catalog(client, {"OPENAI_API_KEY": "sk"}, ProviderSettings())
    provider, model = catalog.resolve("openai:gpt-4.1")
    assert isinstance(provider, OpenAIChatProvider) and model == "gpt-4.1"
    assert catalog.provider("openai") is provider
    responses = catalog.provider("openai-responses")
    assert isinstance(responses, OpenAIResponsesProvider)
    assert responses.name == "openai-responses"
    assert "sk" not in repr(provider) and "sk" not in repr(responses)


async def test_demo_provider(client) -> None:
    pytest.importorskip("providers.demo")
    catalog = Catalog(client, {}, ProviderSettings())
    assert catalog.resolve("demo:echo")[0].name == "demo"


@pytest.mark.parametrize(("name", "env"), [
    ("anthropic", {"ANTHROPIC_API_KEY": "a"}),
    ("gemini", {"GOOGLE_API_KEY": "g"}),
])
async def test_other_protocols_when_present(client, name: str, env: dict[str, str]) -> None:
    pytest.importorskip(f"providers.{name}")
    assert Catalog(client, env, ProviderSettings()).provider(name).name == name


async def test_bedrock_when_present(client) -> None:
    pytest.importorskip("providers.bedrock")
    env = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
           "AWS_REGION": "us-east-1"}
    assert Catalog(client, env, ProviderSettings()).provider("bedrock").name == "bedrock"


async def test_profiles_reach_compatible_servers(client) -> None:
    async with WireServer() as server:
        settings = ProviderSettings(retry_attempts=1, profiles={
            "local": Profile(server.url + "/v1", "LOCAL_KEY"),
            "local-resp": Profile(server.url + "/v1", None, protocol="openai-responses"),
        })
        catalog = Catalog(client, {"LOCAL_KEY": "k1"}, settings)
        assert "local" in catalog.configured() and "ollama" not in catalog.names()
        request = ModelRequest(model="", messages=[UserMessage(content="hi")], max_tokens=8)
        server.replies += [Reply(chunks=[fixture("openai_chat/text.sse")]),
                           Reply(chunks=[fixture("openai_responses/text.sse")])]
        for spec in ("local:qwen3:8b", "local-resp:gpt-oss"):
            provider, request.model = catalog.resolve(spec)
            _, msg = await collect(provider, request)
            assert msg["provider"] == spec.split(":")[0] and msg["stop_reason"] == "stop"
        chat_req, resp_req = server.requests
        assert (chat_req.path, chat_req.json["model"]) == ("/v1/chat/completions", "qwen3:8b")
        assert chat_req.json["max_tokens"] == 8
        assert chat_req.headers["authorization"] == "Bearer k1"
        assert resp_req.path == "/v1/responses" and "authorization" not in resp_req.headers


def test_what_each_provider_takes(client: httpx.AsyncClient) -> None:
    env = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "GEMINI_API_KEY": "k",
           "AWS_BEARER_TOKEN_BEDROCK": "t"}
    catalog = Catalog(client, env, ProviderSettings())
    takes = {name: accepts(catalog.provider(name)) for name in
             ("openai", "ollama", "openai-responses", "anthropic", "gemini", "bedrock", "demo")}
    pdf, docx = "application/pdf", "application/vnd.ms-excel"
    assert {n for n, t in takes.items() if pdf in t.documents} == {
        "openai", "openai-responses", "anthropic", "gemini", "bedrock", "demo"}
    assert {n for n, t in takes.items() if docx in t.documents} == {
        "openai-responses", "bedrock", "demo"}
    assert all(t.images and t.urls and "text/csv" in t.documents for t in takes.values())
    assert accepts(object()) == BASIC and not BASIC.urls and not BASIC.documents


def test_the_catalog_fetcher_follows_the_settings(client: httpx.AsyncClient) -> None:
    settings = ProviderSettings(attachment_max_bytes=123, fetch_allow_private=True)
    fetcher = settings.fetcher()
    assert (fetcher.max_bytes, fetcher.allow_private) == (123, True)
