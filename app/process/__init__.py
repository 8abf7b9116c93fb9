"""A process of the service: the ``agentloop`` command (``cli``), the ASGI app and its
lifespan (``main``), the shared resources (``services``, ``setup``), health checks
(``liveness``), and ``serve --processes N``: the supervisor (``supervisor``) and each of its
API processes (``child``)."""
