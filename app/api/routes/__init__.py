"""Thin endpoint modules; each exposes ``router``."""
