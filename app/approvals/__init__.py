"""Human in the loop: tool approvals and frontend-executed (client) tools, parked durably.

``gate`` is what the loop sees (which picks wait for a person, the decisions made so far; no
storage, no HTTP); ``parking`` is the runner's side (park a run in the store, continue it with
the decisions when it is woken); ``nested`` lets a tool body's ``runtime.exec`` park the whole
run and go on from the log when it is woken; ``expiry`` wakes runs whose ``approval_timeout``
passed. The store operations live with the backends (``app.backends.parking``,
``redis_parking``) and the endpoints in ``app.routes.approvals``. The interplay with steer,
follow-up, cancel and timeouts is written down in docs/events.md ("Approvals and client
tools").
"""
