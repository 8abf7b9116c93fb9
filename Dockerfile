# agentloop: the HTTP API and/or a worker (same image; see docker-compose.yml).
FROM python:3.11-slim

# bubblewrap sandboxes run_python/run_shell; without it the code tools stay off
# (AGENTLOOP_UNSAFE_CODE_TOOLS=true runs them under resource limits only).
# hadolint ignore=DL3008
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
# the project itself (its dependencies' ranges are in pyproject.toml)
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[bedrock,otel]"

# Custom tools: put modules in /srv/agentloop/tools (a volume, or COPY in an image built
# FROM this one) and name them in AGENTLOOP_TOOL_MODULES (e.g. "my_tools"); that directory is
# on PYTHONPATH.
RUN useradd --system --create-home --uid 10001 --user-group agentloop \
    && mkdir -p /var/lib/agentloop/workspaces /srv/agentloop/tools \
    && chown -R agentloop:agentloop /var/lib/agentloop
USER 10001

ENV AGENTLOOP_HOST=0.0.0.0 \
    AGENTLOOP_PORT=8000 \
    AGENTLOOP_WORKSPACE_ROOT=/var/lib/agentloop/workspaces \
    AGENTLOOP_HEALTH_FILE=/tmp/agentloop-worker.health \
    PYTHONPATH=/srv/agentloop/tools
EXPOSE 8000

# The API's check (GET /healthz on AGENTLOOP_PORT); a worker container runs
# `agentloop health --worker` instead (docker-compose.yml).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["agentloop", "health"]

# exec form: SIGTERM reaches agentloop, which drains the API and hands running runs back
CMD ["agentloop", "serve", "--host", "0.0.0.0"]
