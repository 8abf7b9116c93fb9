"""The HTTP API: the one run pipeline (``pipeline``, ``checks``, ``options``), the one
control path (``control``), the views (``run_view``, ``thread_view``), bodies (``schemas``),
errors, auth, the OpenAPI contract and the routes (``routes``)."""
