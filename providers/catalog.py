"""From a ``"provider:model"`` string to a ready ``Provider``.

``Catalog`` builds each provider once (per name) from an injected ``httpx.AsyncClient``, an
environment mapping and ``ProviderSettings``; it never reads ``os.environ`` itself. Names:

- ``openai`` / ``openai-responses``: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``
  (default https://api.openai.com/v1).
- ``anthropic``: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``.
- ``gemini``: ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``, ``GEMINI_BASE_URL``.
- ``bedrock``: ``BedrockProvider.from_env`` (AWS credentials and region from ``env``).
- ``demo``: the offline model, always available.
- any ``Profile`` (built in: ``ollama``, ``vllm``, ``openrouter``, ``groq``; operators add more):
  an OpenAI-compatible server, keyless when ``api_key_env`` is None.

What each provider takes besides text (``accepts``; the run pipeline refuses the rest with a
400 naming the model, ``providers.attachments`` has the media types):

- ``openai``: images (URLs passed on), PDFs, text documents; a profile (an OpenAI-compatible
  server): images (URLs fetched here), text documents, no PDFs;
- ``openai-responses`` and ``bedrock``: images and every document type, office files too;
- ``anthropic`` and ``gemini``: images, PDFs, text documents;
- ``demo``: everything (it only describes it); a custom provider (``AGENTLOOP_PROVIDER_FACTORY``)
  without an ``accepts`` attribute: text and images given as data.

Attachments given by URL that a provider does not fetch itself are fetched by its adapter with
the catalog's one ``AttachmentFetcher`` (``ProviderSettings``: size cap, timeout, private
addresses).

The adapters of other protocols are imported lazily, so this module works before they exist.
Timeouts: the OpenAI adapters take ``ProviderSettings.timeout()`` per request; the other
adapters use the client's, so build the shared client with ``settings.timeout()`` too.

Exceptions::

    ValueError
     └── ModelSpecError      a bad model string, an unknown provider or missing credentials
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

import httpx

from providers._http import RetryPolicy
from providers.attachment_fetch import AttachmentFetcher, MiB
from providers.attachments import BASIC, Accepts
from providers.base import Provider
from providers.openai import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider


class ModelSpecError(ValueError):
    """The model string cannot be served; ``field`` names the request field at fault."""

    def __init__(self, message: str, field: str = "model") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(slots=True, frozen=True)
class Profile:
    """An OpenAI-compatible server reachable under its own provider name."""

    base_url: str
    api_key_env: str | None = None
    """Environment variable holding the key; None for servers that take none."""
    protocol: Literal["openai", "openai-responses"] = "openai"


def builtin_profiles() -> dict[str, Profile]:
    """The OpenAI-compatible servers known out of the box."""
    return {
        "ollama": Profile("http://localhost:11434/v1"),
        "vllm": Profile("http://localhost:8000/v1", "VLLM_API_KEY"),
        "openrouter": Profile("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        "groq": Profile("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    }


@dataclass(slots=True)
class ProviderSettings:
    """How providers are reached: retries, timeouts and the OpenAI-compatible profiles."""

    retry_attempts: int = 4
    """Attempts before the first streamed byte (429, 5xx, connection failures)."""
    connect_timeout: float = 10
    """Seconds to open a connection."""
    read_timeout: float = 300
    """Seconds to wait between two streamed bytes."""
    profiles: dict[str, Profile] = field(default_factory=builtin_profiles)
    """Provider name → OpenAI-compatible server; add entries to reach more servers."""
    attachment_max_bytes: int = 10 * MiB
    """Largest attachment an adapter fetches from a URL."""
    fetch_timeout: float = 20.0
    """Seconds one attachment fetch may take, redirects included."""
    fetch_allow_private: bool = False
    """Let attachment fetches reach loopback and private addresses (never metadata ones)."""

    def timeout(self) -> httpx.Timeout:
        """The ``httpx.Timeout`` these settings describe."""
        return httpx.Timeout(self.read_timeout, connect=self.connect_timeout)

    def retry(self) -> RetryPolicy:
        """The retry policy these settings describe."""
        return RetryPolicy(attempts=self.retry_attempts)

    def fetcher(self) -> AttachmentFetcher:
        """The attachment fetcher these settings describe."""
        return AttachmentFetcher(max_bytes=self.attachment_max_bytes, timeout=self.fetch_timeout,
                                 allow_private=self.fetch_allow_private)


def accepts(provider: object) -> Accepts:
    """What ``provider`` takes besides text: its ``accepts`` attribute, else ``BASIC`` (text
    and images given as data)."""
    found = getattr(provider, "accepts", None)
    return found if isinstance(found, Accepts) else BASIC


BUILTIN = ("openai", "openai-responses", "anthropic", "gemini", "bedrock", "demo")
_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",), "openai-responses": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",), "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "bedrock": ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK"),
}
_DEFAULTS = (("openai", "gpt-4.1-mini"), ("anthropic", "claude-sonnet-4-5"),
             ("gemini", "gemini-2.5-flash"))


def parse_model(spec: str, known: Collection[str] | None = None) -> tuple[str, str]:
    """``"provider:model"`` → (provider, model id); the model id may contain colons.

    ``known`` is the set of provider names to accept (default: built-ins and built-in profiles).
    """
    provider, colon, model = spec.partition(":")
    provider, model = provider.strip(), model.strip()
    if not colon:
        raise ModelSpecError(f"model {spec!r} must look like 'provider:model', e.g. "
                             "'openai:gpt-4.1-mini'")
    if not provider or not model:
        raise ModelSpecError(f"model {spec!r} has an empty provider or model part")
    names = set(known) if known is not None else set(BUILTIN) | set(builtin_profiles())
    if provider not in names:
        raise ModelSpecError(f"unknown provider {provider!r} in {spec!r}; known: "
                             + ", ".join(sorted(names)))
    return provider, model


def default_model(env: Mapping[str, str]) -> str:
    """The first of openai/anthropic/gemini with a key in ``env``, else ``demo:echo``."""
    for provider, model in _DEFAULTS:
        if any(env.get(k) for k in _KEYS[provider]):
            return f"{provider}:{model}"
    return "demo:echo"


class Catalog:
    """Provider instances by name, built on first use and cached."""

    def __init__(self, client: httpx.AsyncClient, env: Mapping[str, str],
                 settings: ProviderSettings) -> None:
        self._client = client
        self._env = env
        self._settings = settings
        self._cache: dict[str, Provider] = {}
        self._fetcher = settings.fetcher()

    def names(self) -> list[str]:
        """Every provider name this catalog knows."""
        return [*BUILTIN, *(n for n in self._settings.profiles if n not in BUILTIN)]

    def configured(self) -> list[str]:
        """Names that can be built now: credentials present, or none needed (demo, ollama)."""
        return [n for n in self.names() if self._missing(n) is None]

    def resolve(self, spec: str) -> tuple[Provider, str]:
        """The provider and model id for ``"provider:model"`` (raises ``ModelSpecError``)."""
        name, model = parse_model(spec, self.names())
        return self.provider(name), model

    def provider(self, name: str) -> Provider:
        """The provider called ``name`` (raises ``ModelSpecError`` if unknown or unusable)."""
        if name not in self._cache:
            if name not in self.names():
                raise ModelSpecError(f"unknown provider {name!r}")
            missing = self._missing(name)
            if missing is not None:
                raise ModelSpecError(f"provider {name!r} is not configured: set {missing}")
            self._cache[name] = self._builders()[name]()
        return self._cache[name]

    def _missing(self, name: str) -> str | None:
        """The env var(s) to set for ``name``, or None when it can be built."""
        profile = self._settings.profiles.get(name)
        if name not in BUILTIN and profile is not None:
            keys: tuple[str, ...] = (profile.api_key_env,) if profile.api_key_env else ()
        else:
            keys = _KEYS.get(name, ())
        if not keys or any(self._env.get(k) for k in keys):
            return None
        return " or ".join(keys)

    def _builders(self) -> dict[str, Callable[[], Provider]]:
        builders: dict[str, Callable[[], Provider]] = {
            "openai": lambda: self._openai("openai", OpenAIChatProvider),
            "openai-responses": lambda: self._openai("openai-responses",
                                                     OpenAIResponsesProvider),
            "anthropic": self._anthropic, "gemini": self._gemini, "bedrock": self._bedrock,
            "demo": _demo,
        }
        for name in self._settings.profiles:
            if name not in BUILTIN:
                builders[name] = functools.partial(self._profile, name)
        return builders

    def _openai(self, name: str,
                kind: type[OpenAIChatProvider] | type[OpenAIResponsesProvider]) -> Provider:
        base = self._env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if kind is OpenAIChatProvider:
            return OpenAIChatProvider(
                client=self._client, base_url=base, api_key=self._env.get("OPENAI_API_KEY"),
                retry=self._settings.retry(), name=name, timeout=self._settings.timeout(),
                fetcher=self._fetcher)
        return kind(client=self._client, base_url=base, api_key=self._env.get("OPENAI_API_KEY"),
                    retry=self._settings.retry(), name=name, timeout=self._settings.timeout())

    def _profile(self, name: str) -> Provider:
        profile = self._settings.profiles[name]
        key = self._env.get(profile.api_key_env) if profile.api_key_env else None
        retry, timeout = self._settings.retry(), self._settings.timeout()
        if profile.protocol == "openai-responses":
            return OpenAIResponsesProvider(client=self._client, base_url=profile.base_url,
                                           api_key=key, retry=retry, name=name, timeout=timeout)
        # compatible servers read max_tokens; max_completion_tokens is OpenAI's own spelling
        return OpenAIChatProvider(client=self._client, base_url=profile.base_url, api_key=key,
                                  retry=retry, name=name, timeout=timeout,
                                  max_tokens_field="max_tokens", compatible=True,
                                  fetcher=self._fetcher)

    def _anthropic(self) -> Provider:
        from providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            client=self._client, api_key=self._env["ANTHROPIC_API_KEY"],
            base_url=self._env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
            retry=self._settings.retry(), fetcher=self._fetcher)

    def _gemini(self) -> Provider:
        from providers.gemini import GeminiProvider

        key = self._env.get("GEMINI_API_KEY") or self._env["GOOGLE_API_KEY"]
        base = self._env.get("GEMINI_BASE_URL") or "https://generativelanguage.googleapis.com"
        return GeminiProvider(client=self._client, base_url=base, api_key=key,
                              retry=self._settings.retry(), fetcher=self._fetcher)

    def _bedrock(self) -> Provider:
        from providers.bedrock import BedrockProvider  # type: ignore[import-not-found,unused-ignore]

        try:
            provider: Provider = BedrockProvider.from_env(
                client=self._client, env=self._env, retry=self._settings.retry(),
                fetcher=self._fetcher)
        except ValueError as exc:
            raise ModelSpecError(f"provider 'bedrock' is not configured: {exc}") from exc
        return provider


def _demo() -> Provider:
    from providers.demo import DemoProvider

    return DemoProvider()
