"""Every `python` block of README.md runs as written, so the documentation
cannot drift from the package: a block that begins `# examples/NAME.py` is
an excerpt of that example (its lines, in order, `...` eliding), which
tests/test_examples.py runs; every other block is run here, on its own, with
`payments` a `FakePayments` and EFFECTWATCH_DATABASE_URL naming the ledger.
The `python` blocks of the repository's README (its first agent), where the
package sits in the repository, are run the same way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from effectwatch.testing import FakePayments

PACKAGE = Path(__file__).parent.parent
README = PACKAGE / "README.md"
REPOSITORY_README = PACKAGE.parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EXCERPT = re.compile(r"# (examples/\w+\.py)\n")


def blocks(readme: Path) -> list[tuple[Path, int, str]]:
    text = readme.read_text()
    return [(readme, text.count("\n", 0, found.start()) + 1, found.group(1)) for found in BLOCK.finditer(text)]


def named(readme: Path, line: int) -> str:
    return f"{'README.md' if readme == README else 'repository README.md'}:{line}"


REPOSITORY = blocks(REPOSITORY_README) if REPOSITORY_README.exists() else []
RUN = [(readme, line, code) for readme, line, code in blocks(README) + REPOSITORY if not EXCERPT.match(code)]
EXCERPTS = [(readme, line, code) for readme, line, code in blocks(README) if EXCERPT.match(code)]


def test_the_readme_has_blocks_to_run_and_excerpts_to_check() -> None:
    assert len([block for block in RUN if block[0] == README]) >= 5, RUN
    named_examples = [EXCERPT.match(code) for _, _, code in EXCERPTS]
    assert sorted(match.group(1) for match in named_examples if match) == [
        "examples/langchain_refund.py", "examples/openai_agents_refund.py", "examples/pydantic_ai_refund.py",
    ]


def test_the_repository_readme_has_its_first_agent_to_run() -> None:
    if not REPOSITORY_README.exists():
        return  # a copy of the package alone: there is no repository README to run
    assert [code for _, _, code in REPOSITORY if not EXCERPT.match(code)], f"{REPOSITORY_README} has no python block"


@pytest.mark.parametrize("readme, line, code", RUN, ids=[named(readme, line) for readme, line, _ in RUN])
def test_a_readme_block_runs(
    readme: Path, line: int, code: str, database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EFFECTWATCH_DATABASE_URL", database_url)
    namespace = {"__name__": f"readme_{line}", "payments": FakePayments()}
    exec(compile(code, f"{readme}:{line}", "exec"), namespace)


@pytest.mark.parametrize("readme, line, code", EXCERPTS, ids=[named(readme, line) for readme, line, _ in EXCERPTS])
def test_a_readme_excerpt_is_its_example_verbatim(readme: Path, line: int, code: str) -> None:
    header, *lines = code.splitlines()
    example = (PACKAGE / header.removeprefix("# ")).read_text().splitlines()
    position = 0
    for wanted in (written.strip() for written in lines):
        if wanted in ("", "..."):
            continue
        found = next((at for at in range(position, len(example)) if example[at].strip() == wanted), None)
        assert found is not None, f"{named(readme, line)}: {wanted!r} is not in {header[2:]} (after line {position})"
        position = found + 1
