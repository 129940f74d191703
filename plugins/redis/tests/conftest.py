"""Fixtures: a real redis-server per test (hosts.py starts the "hosts" that use it)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from redis_server import RedisServer  # noqa: E402


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    yield s
    s.stop()


@pytest.fixture
def locked_server() -> Iterator[RedisServer]:
    s = RedisServer(password="s3cret-pw")
    yield s
    s.stop()
