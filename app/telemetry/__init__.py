"""What every layer reports: logs with ``run_id`` and ``tenant`` (``logs``, ``redact``) and
Prometheus metrics (``metrics``)."""
