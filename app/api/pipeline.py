"""The one run pipeline: every door turns its wire format into a ``RunRequest`` and hands it to
``submit``, which authorizes it, resolves the defaults, validates it and creates the run (or
posts to the thread, creating the thread where the door asks) in one atomic store step::

    POST /runs ─────────────┐
    POST /threads/{id}/runs ┤                 ┌ check_model ─ run_menu (tools, toolset,
    POST /ai-sdk/chat ──────┼─▶ RunRequest ─▶ │ tool_choice, client_tools) ─ check_approval ─
    POST /ag-ui ────────────┤   submit()      └ check_mcp_names ─ check_timeout ─
    POST /mcp tools/call ───┘                   check_response_format ─ check_mcp_urls ─ input
                                                (attachments against the model) ─ quotas
                                                (app.api.quotas: 429 quota_exceeded) ─▶ create_run
                                                                        │ post_thread_run
    every failure: ApiError naming the field, renamed by the door ◀─────┘ (nothing stored)

A door has no check of its own: what it may not skip lives here. Errors name fields in the
pipeline's names (``client_tools[0].name``, ``input[0].content``); ``RunRequest.rename``
turns them into the door's (``tools[0].name`` on AG-UI).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.api import agents, quotas
from app.api.attachment_checks import AttachmentRules, rules_for
from app.api.auth import Principal
from app.api.checks import (
    check_approval,
    check_model,
    check_response_format,
    check_timeout,
    check_webhook,
    invalid,
    normalise_input,
    run_menu,
    user_prompts,
)
from app.api.errors import ApiError, queue_full
from app.api.mcp_checks import check_mcp_names, check_mcp_urls
from app.api.options import RunOptions
from app.api.services import Services
from app.api.trace_context import incoming_traceparent
from app.engine.events import RunCreated, json_bytes
from app.store.errors import NotLastReply, QueueFull, ThreadNotFound
from app.store.ids import is_thread_id, new_message_id, new_run_id, new_thread_run_id
from app.store.records import RunRecord
from app.store.thread_records import DEFAULT_MULTITASK, PostOutcome, ThreadPost, ThreadRecord
from app.telemetry import metrics

IDEMPOTENCY_KEY_MAX = 255
"""Longest ``Idempotency-Key`` accepted (it becomes part of a store key)."""


def _same(name: str) -> str:
    return name


@dataclass(slots=True, kw_only=True)
class RunRequest:
    """One request to run, in no door's wire format."""

    principal: Principal
    options: RunOptions
    input: str | list[dict[str, Any]]
    """A user message, or a conversation (a thread takes user messages only)."""
    thread_id: str | None = None
    """Post to this thread instead of starting a run of no thread."""
    new_thread: ThreadRecord | None = None
    """Create the thread (this record) first when it does not exist, in the same step."""
    idempotency_key: str | None = None
    digest_of: dict[str, Any] = field(default_factory=dict)
    """What an ``Idempotency-Key`` repeat must match (the door's body)."""
    rename: Callable[[str], str] = _same
    """The door's name for a pipeline field (errors name the field as the client sent it)."""
    agent: str | None = None
    """The agent to run (``app.api.agents``); an end user's default when its token grants
    exactly one."""
    set_fields: frozenset[str] = frozenset()
    """The run options the caller set (an agent may lock them), as against defaults and what
    the door adds of its own (a chat's metadata)."""
    replaces: str | None = None
    """Regenerate: the thread's last run, whose reply the new run replaces (the thread must
    be idle: 409 ``thread_busy``; another run: 409 ``not_last_reply``)."""


@dataclass(slots=True)
class Submitted:
    """What ``submit`` made: a run of no thread (``record``; ``created`` False for an
    idempotent repeat) or a thread post (``outcome``)."""

    run_id: str
    record: RunRecord | None = None
    created: bool = True
    outcome: PostOutcome | None = None


async def submit(svc: Services, request: RunRequest) -> Submitted:
    """Authorize, resolve, validate and create (see the module docstring)."""
    try:
        return await _submit(svc, request)
    except ApiError as exc:
        if exc.code == "quota_exceeded":  # its field names the limit, not a door's field
            raise
        raise exc.renamed(request.rename) from None


async def _submit(svc: Services, request: RunRequest) -> Submitted:
    check_idempotency_key(request.idempotency_key)
    authorize(request)
    agent = await agent_of(svc, request)
    options = request.options
    if agent is not None:
        options = agents.apply(agent, options, request.set_fields)
    model = check_run_options(svc, options)
    await check_mcp_urls(options, svc.settings.mcp_allow_url_list(),
                         allow_private=svc.settings.fetch_allow_private)
    run = _Run(options=options, model=model, agent=agent, rules=rules_for(svc, model),
               webhook=options.webhook or svc.settings.tenant_webhook(request.principal.tenant))
    if request.thread_id is None:
        return await _create(svc, request, run)
    return await _post(svc, request, request.thread_id, run)


@dataclass(slots=True, frozen=True)
class _Run:
    """What the checks settled: the options, the model and the agent of the run, and what
    its input's attachments are checked against."""

    options: RunOptions
    model: str
    agent: agents.ResolvedAgent | None
    rules: AttachmentRules
    webhook: str | None = None
    """The run's, its agent's or its tenant's webhook."""

    def stored(self, value: Any) -> dict[str, Any]:
        """The JSON-ready request the runner reads (``model`` filled, ``input`` normalised,
        the agent's name and version recorded)."""
        request = {**self.options.option_fields(), "model": self.model, "input": value,
                   "webhook": self.webhook}
        if self.agent is not None:
            request.update(agent=self.agent.spec.name, agent_version=self.agent.version)
        return request


def check_run_options(svc: Services, options: RunOptions) -> str:
    """The model of ``options`` once they are checked (a request's, or an agent's own):
    the model, the menu, ``tool_choice``, client tools, approval names, the timeout, the
    response format."""
    model = options.model or svc.default_model
    check_model(model, svc.resolve_provider)
    run_menu(options, registry=svc.registry, disabled=svc.settings.disabled_tool_list(),
             env=svc.env)
    check_approval(options, svc.registry)
    check_mcp_names(options, svc.registry)
    check_timeout(options, svc.settings.run_timeout)
    check_response_format(options)
    check_webhook(options.webhook, secret=svc.settings.webhook_secret,
                  allowed=svc.settings.webhook_allow_list())
    return model


def authorize(request: RunRequest) -> None:
    """What the caller may start: a run of its own tenant (the records carry the tenant and
    owner, and every read is scoped to them); an end user whose token lists threads, only a
    post to one of them."""
    who = request.principal
    if who.threads is not None and request.thread_id not in who.threads:
        raise ApiError(403, "forbidden", "thread_id: this token may post only to the threads "
                       "it lists", "thread_id")


async def agent_of(svc: Services, request: RunRequest) -> agents.ResolvedAgent | None:
    """The agent the request runs: the one it names, an end user's only granted one, or none
    (the tenant's key may run without); 422/403/404 naming ``agent`` otherwise."""
    who, name = request.principal, request.agent
    if who.end_user:
        granted = who.agents
        if name is None and granted is not None and len(granted) == 1:
            name = next(iter(granted))
        if name is None:
            choices = f" (one of: {', '.join(sorted(granted))})" if granted else ""
            raise invalid("agent", f"an end user's request names the agent it runs{choices}")
        if granted is not None and name not in granted:
            raise ApiError(403, "agent_not_granted", f"agent: this token may not start agent "
                           f"{name!r}", "agent")
    if name is None:
        return None
    agent = await svc.agents.get(who.tenant, name)
    if agent is None:
        raise agents.agent_not_found(name)
    return agent


def check_idempotency_key(key: str | None) -> None:
    """422 for an ``Idempotency-Key`` longer than ``IDEMPOTENCY_KEY_MAX``."""
    if key is not None and len(key) > IDEMPOTENCY_KEY_MAX:
        raise ApiError(422, "validation_error", f"Idempotency-Key: at most "
                       f"{IDEMPOTENCY_KEY_MAX} characters", "Idempotency-Key")


def stored_idempotency_key(who: Principal, key: str | None) -> str | None:
    """The name a ``POST /runs`` ``Idempotency-Key`` is kept under: the tenant's own for its
    API key (as it always was), and for an end user one of its own within the tenant, so the
    same key from another end user names another run: it never replays this user's run (its
    answer, a stream token for it) nor says, by a 409, that the key was used. The subject is
    length-prefixed after a control character no header value holds, so no subject and no
    key of the tenant's can spell another's name. (A thread post's keys are the thread's, and
    only the thread's owner posts there.)"""
    if not key:
        return None
    if who.subject is None:
        return f"{who.tenant}:{key}"
    return f"{who.tenant}:\x1f{len(who.subject)}:{who.subject}:{key}"


def request_hash(request: dict[str, Any]) -> str:
    """A stable digest of a request (``Idempotency-Key`` compares these)."""
    return hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _create(svc: Services, request: RunRequest, run: _Run) -> Submitted:
    tenant = request.principal.tenant
    if run.options.multitask is not None:
        raise invalid("multitask", "only with thread_id")
    record = RunRecord(id=new_run_id(), tenant=tenant, model=run.model, created_at=time.time(),
                       traceparent=incoming_traceparent(),
                       metadata=dict(run.options.metadata), owner=request.principal.subject,
                       request=run.stored(normalise_input(request.input, run.rules)))
    key = stored_idempotency_key(request.principal, request.idempotency_key)
    # the digest only answers a repeat of an Idempotency-Key (~4 % of POST /runs otherwise)
    digest = request_hash({"tenant": tenant, "body": request.digest_of}) if key else None
    admission = await quotas.admit(svc, request.principal, record.id)
    quotas.mark(record, admission)
    try:
        record, created = await svc.backend.create_run(record, idempotency_key=key,
                                                       request_hash=digest,
                                                       first_event=RunCreated(model=run.model))
    except BaseException:
        await quotas.release(svc, admission)
        raise
    if not created:  # an Idempotency-Key repeat: the first request's run holds the quota
        await quotas.release(svc, admission)
    else:
        metrics.RUNS_CREATED.inc()
    return Submitted(run_id=record.id, record=record, created=created)


def thread_not_found(thread_id: str) -> ApiError:
    """404 for a missing thread (or another tenant's)."""
    return ApiError(404, "thread_not_found", f"no thread {thread_id}")


async def _post(svc: Services, request: RunRequest, thread_id: str, run: _Run) -> Submitted:
    if not is_thread_id(thread_id):
        raise thread_not_found(thread_id)
    post = _thread_post(request, thread_id, run, svc.settings.max_queued_messages)
    admission = await quotas.admit(svc, request.principal, post.candidate.id)
    quotas.mark(post.candidate, admission)
    try:
        outcome = await _post_step(svc, request, thread_id, post)
    except BaseException:
        await quotas.release(svc, admission)
        raise
    if outcome.repeat or outcome.run_id != post.candidate.id:  # no new run: the message
        await quotas.release(svc, admission)                   # joined a run already there
    if outcome.action == "rejected":
        why = "a reply is regenerated once the thread is idle" if request.replaces else \
            "multitask: reject"
        raise ApiError(409, "thread_busy", f"thread {thread_id} is busy with run "
                       f"{outcome.run_id} ({why})", "multitask",
                       headers={"Location": f"/runs/{outcome.run_id}"})
    if not outcome.repeat:
        if outcome.action in ("started", "interrupted"):
            metrics.RUNS_CREATED.inc()
        if outcome.in_queue:
            kind = "steer" if outcome.action == "steered" else "follow_up"
            metrics.QUEUE_DEPTH.labels(kind=kind).inc(len(outcome.message_ids))
    return Submitted(run_id=outcome.run_id, outcome=outcome)


async def _post_step(svc: Services, request: RunRequest, thread_id: str,
                     post: ThreadPost) -> PostOutcome:
    try:
        return await svc.backend.post_thread_run(thread_id, post)
    except ThreadNotFound as exc:
        raise thread_not_found(thread_id) from exc
    except NotLastReply as exc:
        raise ApiError(409, "not_last_reply", f"run {request.replaces} is not the last reply "
                       f"of thread {thread_id}: only the last reply is regenerated") from exc
    except QueueFull as exc:
        raise queue_full(exc) from exc


def _thread_post(request: RunRequest, thread_id: str, run: _Run, limit: int) -> ThreadPost:
    """The store's ``ThreadPost``: the prompts, and the run to create if one must start."""
    options, tenant = run.options, request.principal.tenant
    prompts = user_prompts(request.input, run.rules)
    stored = run.stored(normalise_input(request.input, run.rules))
    stored["thread_id"] = thread_id
    candidate = RunRecord(id=new_thread_run_id(thread_id), tenant=tenant, model=run.model,
                          created_at=time.time(), metadata=dict(options.metadata),
                          traceparent=incoming_traceparent(),
                          request=stored)
    digest = request_hash({"tenant": tenant, "thread": thread_id, "body": request.digest_of})
    multitask = "reject" if request.replaces else options.multitask or DEFAULT_MULTITASK
    return ThreadPost(tenant=tenant, multitask=multitask,
                      candidate=candidate, first_event=RunCreated(model=run.model),
                      prompts=[json_bytes(m) for m in prompts],
                      message_ids=[new_message_id() for _ in prompts],
                      idempotency_key=request.idempotency_key, request_hash=digest,
                      owner=request.principal.subject, create=request.new_thread,
                      replaces=request.replaces, queue_limit=limit)

