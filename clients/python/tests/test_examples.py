"""Each framework's worked example, run as a user runs it — `python
examples/NAME.py` in a process of its own, against the ledger named by
EFFECTWATCH_DATABASE_URL — so an example that stops working fails the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework_refunds import read

EXAMPLES = Path(__file__).parent.parent / "examples"
FRAMEWORKS = ["langchain_refund.py", "openai_agents_refund.py", "pydantic_ai_refund.py"]
# Run by hand against `effectwatch demo`, whose provider it needs.
NOT_RUN_HERE = ["refund_agent.py"]


def run(example: str, database_url: str | None) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "EFFECTWATCH_DATABASE_URL"}
    if database_url is not None:
        environment["EFFECTWATCH_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, str(EXAMPLES / example)], env=environment, capture_output=True, text=True, timeout=180,
    )


def test_every_example_is_run_by_the_suite() -> None:
    assert sorted(path.name for path in EXAMPLES.glob("*.py")) == sorted(FRAMEWORKS + NOT_RUN_HERE)


@pytest.mark.parametrize("example", FRAMEWORKS)
def test_the_example_refunds_once_and_tells_the_model(example: str, database_url: str) -> None:
    done = run(example, database_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    told = [line.split(": ", 1)[1] for line in lines if line.startswith("told")]
    assert len(told) == 5, done.stdout
    first, replayed, changed, lost, again = told
    assert read(first) == read(replayed), "a replay answers the stored result"
    assert "was already used for another intent" in changed and "Nothing was sent" in changed
    assert "may have been performed" in lost and "Do not call refund again" in lost
    assert "already in flight" in again and "Do not call it again" in again
    made = [line for line in lines if line.startswith("provider made")]
    assert len(made) == 2 and all(line.startswith("provider made 1 refund for refund:") for line in made), made
    assert lines[-1] == "agent: done"


def test_an_example_without_a_ledger_says_what_to_set() -> None:
    done = run(FRAMEWORKS[0], None)
    assert done.returncode == 1
    assert "set EFFECTWATCH_DATABASE_URL" in done.stderr
