"""The suite runs against a real ledger: EFFECTWATCH_TEST_DATABASE_URL names
a database with the migrations applied (the repository's `cargo test` makes
one), and a real provider process on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def database_url() -> str:
    url = os.environ.get("EFFECTWATCH_TEST_DATABASE_URL")
    if not url:
        pytest.fail("EFFECTWATCH_TEST_DATABASE_URL is unset: name a database with the ledger's migrations applied")
    return url


@pytest.fixture(scope="session")
def provider_url() -> Iterator[str]:
    process = subprocess.Popen([sys.executable, str(HERE / "provider.py")], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def unique() -> str:
    """Makes this test's keys and targets its own in a shared ledger."""
    return uuid.uuid4().hex[:10]
