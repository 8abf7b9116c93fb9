"""``python -m app.worker``: one worker process, the same as ``agentloop worker``."""

from app.process.cli import main

main(["worker"])
