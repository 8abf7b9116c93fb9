"""Who is calling, once their credentials are checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Via = Literal["api_key", "client_token", "jwt", "stream_token", "open"]


@dataclass(slots=True, frozen=True)
class Principal:
    """A caller: always a tenant; an end user also has a ``subject`` (the app's user id), the
    ``agents`` it may start (None: every agent) and the ``threads`` it may use (None: any of
    its own). A stream token's caller may read one run (or thread), ``run_id``."""

    tenant: str
    subject: str | None = None
    agents: frozenset[str] | None = None
    threads: frozenset[str] | None = None
    run_id: str | None = None
    via: Via = "api_key"

    def stream_holder(self) -> tuple[str, str, str] | None:
        """Whose streams this caller's count against (``app.delivery.stream_holds``): an end
        user's own, a stream token's run's (or thread's); None for the tenant's key."""
        if self.subject is not None:
            return ("user", self.tenant, self.subject)
        if self.via == "stream_token" and self.run_id is not None:
            return ("token", self.tenant, self.run_id)
        return None

    @property
    def end_user(self) -> bool:
        """An end user (a client token or an identity provider's JWT), not the tenant's key."""
        return self.subject is not None

    def sees(self, tenant: str, owner: str | None, thread_id: str | None) -> bool:
        """Whether a run or thread of ``tenant`` owned by ``owner`` (a thread, or a run of
        the thread ``thread_id``) is this caller's: the tenant's key sees every one of its
        tenant; an end user only its own, and of those only its ``threads`` when it has
        such a grant."""
        if tenant != self.tenant or (self.subject is not None and owner != self.subject):
            return False
        return self.threads is None or thread_id in self.threads
