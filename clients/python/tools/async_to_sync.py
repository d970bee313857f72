"""Writes the synchronous client, src/effectwatch/ledger.py, from the asyncio
one, src/effectwatch/aio.py, the way psycopg makes its sync code from its
async code (psycopg's tools/async_to_sync.py): one source, so the two faces
cannot drift. In clients/python:

    python tools/async_to_sync.py           # writes src/effectwatch/ledger.py
    python tools/async_to_sync.py --check   # exits 1, saying what differs, if it is not what aio.py makes

The transform works on the source's tokens, so comments, docstrings and
layout stay as written:
- `async def`, `async with` and `async for` lose `async`; `await` goes;
- names map to their synchronous twins (NAMES), in code, comments and
  strings alike, and `asyncio.sleep` is `time.sleep`;
- `Awaitable[X]` is `X`;
- an `if True:  # ASYNC` block is the asyncio face's alone: the synchronous
  face gets its `else:` block in its place (or nothing, without one);
- an import the synchronous code no longer uses is dropped;
- the module docstring is the synchronous face's own (DOCSTRING), under a
  header saying where the file comes from.
What differs by nature is written by hand in a module of each face's own
(the heartbeats: _beats_aio.py and _beats.py), whose names are mapped here.
Only the standard library: it runs wherever the package's tests run."""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import re
import sys
import tokenize
from pathlib import Path
from typing import Mapping

PACKAGE = Path(__file__).resolve().parent.parent
SOURCE = PACKAGE / "src" / "effectwatch" / "aio.py"
TARGET = PACKAGE / "src" / "effectwatch" / "ledger.py"
COMMAND = "python tools/async_to_sync.py (in clients/python)"

# Each asyncio name and its synchronous twin.
NAMES = {
    "AsyncLedger": "Ledger",
    "AsyncEffect": "Effect",
    "AsyncHeartbeats": "Heartbeats",
    "AsyncMetronome": "Metronome",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "_beats_aio": "_beats",
}
# Attribute calls that change module too.
DOTTED = {("asyncio", "sleep"): "time.sleep"}

HEADER = f"""# Generated from aio.py by tools/async_to_sync.py: do not edit.
# Change aio.py (or the heartbeats' own _beats.py), then run
# {COMMAND}.
"""

DOCSTRING = '''"""The synchronous client: `Ledger.effect(...)` and `@Ledger.tool(...)`.
`effectwatch.AsyncLedger` is the same, awaited: this module is made from
its module, aio.py, which documents both."""
'''

ASYNC_BLOCK = re.compile(r"^(\s*)if True:\s*# ASYNC\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Where the block that starts at `start`, deeper than `indent`, ends
    (blank lines at its end left to what follows)."""
    end = start
    for at in range(start, len(lines)):
        if lines[at].strip() == "":
            continue
        if _indent(lines[at]) <= indent:
            break
        end = at + 1
    return end


def sync_blocks(lines: list[str]) -> list[str]:
    """Each `if True:  # ASYNC` block replaced by its `else:` block, one
    level less deep (or by nothing)."""
    out: list[str] = []
    at = 0
    while at < len(lines):
        found = ASYNC_BLOCK.match(lines[at])
        if found is None:
            out.append(lines[at])
            at += 1
            continue
        indent = len(found.group(1))
        at = _block_end(lines, at + 1, indent)
        if at < len(lines) and lines[at].strip() == "else:" and _indent(lines[at]) == indent:
            end = _block_end(lines, at + 1, indent)
            body = lines[at + 1:end]
            depth = min(_indent(line) for line in body if line.strip()) - indent
            out.extend(line[depth:] if line.strip() else line for line in body)
            at = end
    return out


def _offsets(text: str) -> list[int]:
    """Where each line (1-based, as tokenize counts) starts in `text`."""
    starts = [0, 0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def sync_tokens(text: str, names: Mapping[str, str] = NAMES) -> str:
    """The token-level transform: `async`, `await`, names, `Awaitable[...]`."""
    in_text = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b")
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    starts = _offsets(text)

    def at(position: tuple[int, int]) -> int:
        return starts[position[0]] + position[1]

    edits: list[tuple[int, int, str]] = []
    skip_to = 0
    for index, token in enumerate(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else token
        if index < skip_to:
            continue
        if token.type == tokenize.NAME:
            if token.string == "async" and following.string in ("def", "with", "for"):
                edits.append((at(token.start), at(following.start), ""))
            elif token.string == "await":
                until = following.start if following.start[0] == token.end[0] else token.end
                edits.append((at(token.start), at(until), ""))
            elif token.string in names:
                edits.append((at(token.start), at(token.end), names[token.string]))
            elif (
                index + 2 < len(tokens)
                and following.string == "."
                and (token.string, tokens[index + 2].string) in DOTTED
            ):
                edits.append((at(token.start), at(tokens[index + 2].end), DOTTED[token.string, tokens[index + 2].string]))
                skip_to = index + 3
            elif token.string == "Awaitable" and following.string == "[":
                depth = 0
                for closing in tokens[index + 1:]:
                    if closing.type == tokenize.OP and closing.string == "[":
                        depth += 1
                    elif closing.type == tokenize.OP and closing.string == "]":
                        depth -= 1
                        if depth == 0:
                            break
                else:
                    raise SyntaxError(f"line {token.start[0]}: Awaitable[ is never closed")
                edits.append((at(token.start), at(following.end), ""))
                edits.append((at(closing.start), at(closing.end), ""))
        elif token.type in (tokenize.STRING, tokenize.COMMENT) or tokenize.tok_name[token.type] == "FSTRING_MIDDLE":
            changed = in_text.sub(lambda name: names[name.group(1)], token.string)
            if changed != token.string:
                edits.append((at(token.start), at(token.end), changed))
    for first, last, replacement in sorted(edits, reverse=True):
        text = text[:first] + replacement + text[last:]
    return text


def _used_names(tree: ast.Module) -> set[str]:
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            base: ast.expr = node
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name):
                used.add(base.id)
    return used


def without_unused_imports(text: str) -> str:
    """Drops what the module's top-level imports bring in and nothing uses
    now, keeping each import's layout (one line, or one name a line)."""
    tree = ast.parse(text)
    used = _used_names(tree)
    lines = text.splitlines(keepends=True)
    for node in sorted(
        (
            node for node in tree.body
            if isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and node.module != "__future__")
        ),
        key=lambda node: node.lineno,
        reverse=True,
    ):
        kept = [alias for alias in node.names if (alias.asname or alias.name).split(".")[0] in used]
        if len(kept) == len(node.names):
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if not kept:
            del lines[first:last + 1]
            continue
        if first == last:
            names = ", ".join(alias.name if alias.asname is None else f"{alias.name} as {alias.asname}" for alias in kept)
            head = lines[first].split(" import ")[0]
            lines[first] = f"{head} import {names}\n"
        else:
            names_kept = {alias.asname or alias.name for alias in kept}
            lines[first + 1:last] = [
                line for line in lines[first + 1:last]
                if line.strip().rstrip(",").split(" as ")[-1] in names_kept
            ]
    return "".join(lines)


def with_header(text: str) -> str:
    """The module docstring replaced by the synchronous one, under HEADER."""
    tree = ast.parse(text)
    first = tree.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)):
        raise SyntaxError("aio.py begins with its docstring")
    lines = text.splitlines(keepends=True)
    return HEADER + DOCSTRING + "".join(lines[(first.end_lineno or first.lineno):])


def checked(text: str) -> str:
    """Refuses output that is not Python, or still asyncio."""
    ast.parse(text)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NAME and (
            token.string in ("async", "await", "asyncio", "Awaitable") or token.string.startswith("Async")
        ):
            raise SyntaxError(f"line {token.start[0]}: {token.string!r} is left in the synchronous face")
    return text


def generate(source: str, names: Mapping[str, str] = NAMES) -> str:
    """The synchronous module made from the asyncio one's text."""
    text = "".join(sync_blocks(source.splitlines(keepends=True)))
    return checked(with_header(without_unused_imports(sync_tokens(text, names))))


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="say whether the target is up to date; write nothing")
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--target", type=Path, default=TARGET)
    options = parser.parse_args(arguments)
    made = generate(options.source.read_text())
    now = options.target.read_text() if options.target.exists() else ""
    if not options.check:
        if made != now:
            options.target.write_text(made)
            print(f"wrote {options.target} from {options.source}")
        return 0
    if made == now:
        return 0
    diff = difflib.unified_diff(
        now.splitlines(keepends=True), made.splitlines(keepends=True),
        f"{options.target.name} (checked in)", f"{options.target.name} (made from {options.source.name})",
    )
    sys.stdout.writelines(list(diff)[:80])
    print(f"\n{options.target} is not what {options.source.name} makes: run {COMMAND}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
