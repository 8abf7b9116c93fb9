# agentloop: the HTTP API and/or a worker (same image; see docker-compose.yml).
FROM python:3.11-slim

# bubblewrap sandboxes run_python/run_shell; without it the code tools stay off
# (AGENTLOOP_UNSAFE_CODE_TOOLS=true runs them under resource limits only).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/agentloop
COPY pyproject.toml README.md ./
COPY app ./app
COPY providers ./providers
COPY tool_registry ./tool_registry
RUN pip install ".[bedrock]"

RUN useradd --system --create-home --uid 10001 agentloop \
    && mkdir -p /var/lib/agentloop/workspaces \
    && chown -R agentloop:agentloop /var/lib/agentloop
USER agentloop

ENV AGENTLOOP_HOST=0.0.0.0 \
    AGENTLOOP_PORT=8000 \
    AGENTLOOP_WORKSPACE_ROOT=/var/lib/agentloop/workspaces
EXPOSE 8000

HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('AGENTLOOP_PORT', '8000') + '/healthz', timeout=2)"

# exec form: SIGTERM reaches agentloop, which drains the API and hands running runs back
CMD ["agentloop", "serve", "--host", "0.0.0.0"]
