"""Every `python` block of README.md runs as written, so the documentation
cannot drift from the package: a block that begins `# examples/NAME.py` is
an excerpt of that example (its lines, in order, `...` eliding), which
tests/test_examples.py runs; every other block is run here, on its own, with
`payments` a `FakePayments` and EFFECTWATCH_DATABASE_URL naming the ledger."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from effectwatch.testing import FakePayments

PACKAGE = Path(__file__).parent.parent
README = PACKAGE / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EXCERPT = re.compile(r"# (examples/\w+\.py)\n")


def blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    return [(text.count("\n", 0, found.start()) + 1, found.group(1)) for found in BLOCK.finditer(text)]


RUN = [(line, code) for line, code in blocks() if not EXCERPT.match(code)]
EXCERPTS = [(line, code) for line, code in blocks() if EXCERPT.match(code)]


def test_the_readme_has_blocks_to_run_and_excerpts_to_check() -> None:
    assert len(RUN) >= 5, RUN
    named = [EXCERPT.match(code) for _, code in EXCERPTS]
    assert sorted(match.group(1) for match in named if match) == [
        "examples/langchain_refund.py", "examples/openai_agents_refund.py", "examples/pydantic_ai_refund.py",
    ]


@pytest.mark.parametrize("line, code", RUN, ids=[f"README.md:{line}" for line, _ in RUN])
def test_a_readme_block_runs(line: int, code: str, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EFFECTWATCH_DATABASE_URL", database_url)
    namespace = {"__name__": f"readme_{line}", "payments": FakePayments()}
    exec(compile(code, f"{README}:{line}", "exec"), namespace)


@pytest.mark.parametrize("line, code", EXCERPTS, ids=[f"README.md:{line}" for line, _ in EXCERPTS])
def test_a_readme_excerpt_is_its_example_verbatim(line: int, code: str) -> None:
    header, *lines = code.splitlines()
    example = (PACKAGE / header.removeprefix("# ")).read_text().splitlines()
    position = 0
    for wanted in (written.strip() for written in lines):
        if wanted in ("", "..."):
            continue
        found = next((at for at in range(position, len(example)) if example[at].strip() == wanted), None)
        assert found is not None, f"README.md:{line}: {wanted!r} is not in {header[2:]} (after line {position})"
        position = found + 1
