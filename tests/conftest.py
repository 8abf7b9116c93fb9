"""Shared fixtures: see tests/support/ for the wire server and the Redis/uvicorn helpers."""
