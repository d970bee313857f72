"""The two faces of the client are one: the synchronous `Ledger` is
generated from the asyncio `AsyncLedger` (tools/async_to_sync.py writes
src/effectwatch/ledger.py from src/effectwatch/aio.py), the checked-in file
is what the generator makes, and the public surface of each class and its
twin is the same — names, parameters, defaults, annotations and what is
awaited — but for the short list of differences meant (INTENDED)."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from effectwatch import AsyncEffect, AsyncLedger, Effect, Ledger
from effectwatch._beats import Heartbeats
from effectwatch._beats_aio import AsyncHeartbeats

PACKAGE = Path(__file__).parent.parent
TOOL = PACKAGE / "tools" / "async_to_sync.py"
SOURCE = PACKAGE / "src" / "effectwatch" / "aio.py"


def the_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sync_client_is_what_the_generator_makes_of_the_asyncio_one() -> None:
    checked = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, cwd=PACKAGE)
    assert checked.returncode == 0, (
        "src/effectwatch/ledger.py is not what tools/async_to_sync.py makes of src/effectwatch/aio.py; "
        f"regenerate it: cd clients/python && python tools/async_to_sync.py\n{checked.stdout}{checked.stderr}"
    )


def test_the_check_fails_once_the_asyncio_client_changes(tmp_path: Path) -> None:
    changed = tmp_path / "aio.py"
    changed.write_text(SOURCE.read_text().replace("class AsyncEffect:", "class AsyncEffect:  # changed", 1))
    checked = subprocess.run(
        [sys.executable, str(TOOL), "--check", "--source", str(changed)], capture_output=True, text=True, cwd=PACKAGE
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "+class Effect:  # changed" in checked.stdout
    assert "run python tools/async_to_sync.py" in checked.stdout


SAMPLE = '''"""The asyncio face."""

from __future__ import annotations

import asyncio
import inspect
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

from psycopg import AsyncConnection


class AsyncThing:
    """Made by an `AsyncLedger`."""

    async def __aenter__(self) -> AsyncThing:
        await asyncio.sleep(0.1)  # an AsyncThing waits
        return self

    @asynccontextmanager
    async def opened(self, check: Callable[[], Awaitable[int]]) -> AsyncIterator[AsyncConnection[Any]]:
        async with await AsyncConnection.connect("") as connection:
            if True:  # ASYNC
                checked = check()
                if inspect.isawaitable(checked):
                    await checked
            else:
                check()
            yield connection
'''

SAMPLE_MADE = '''"""The synchronous client: `Ledger.effect(...)` and `@Ledger.tool(...)`.
`effectwatch.AsyncLedger` is the same, awaited: this module is made from
its module, aio.py, which documents both."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Callable

from psycopg import Connection


class AsyncThing:
    """Made by an `Ledger`."""

    def __enter__(self) -> AsyncThing:
        time.sleep(0.1)  # an AsyncThing waits
        return self

    @contextmanager
    def opened(self, check: Callable[[], int]) -> Iterator[Connection[Any]]:
        with Connection.connect("") as connection:
            check()
            yield connection
'''


def test_the_generator_makes_the_synchronous_face_by_its_rules() -> None:
    tool = the_tool()
    # An asyncio name it does not know is refused rather than left behind.
    try:
        tool.generate(SAMPLE)
    except SyntaxError as refused:
        assert "AsyncThing" in str(refused)
    else:
        raise AssertionError("a name with no synchronous twin was left in the synchronous face")
    made = tool.generate(SAMPLE, {**tool.NAMES, "AsyncThing": "Thing"})
    assert made == tool.HEADER + SAMPLE_MADE.replace("AsyncThing", "Thing"), made


# What differs between a class and its twin on purpose, and why.
INTENDED = {
    # Made by each face's own metronome (_beats.py, _beats_aio.py, written
    # by hand): from its thread's schedule, or on the running event loop.
    ("Heartbeats", "__init__"),
}

# What each asyncio class awaits; all else of its surface is called as is.
AWAITED = {
    "AsyncLedger": {
        "begin", "mark_dispatched", "complete", "heartbeat", "state_of", "close",
    },
    "AsyncEffect": {"__aenter__", "__aexit__", "dispatched", "succeeded"},
    "AsyncHeartbeats": {"stop"},
}
TWIN_NAMES = {"__aenter__": "__enter__", "__aexit__": "__exit__"}


def instances() -> list[tuple[object, object]]:
    """An instance of each class and of its twin, for the attributes an
    instance has (`__init__` sets them)."""
    url = "postgresql://nobody@127.0.0.1:1/none"
    sync_ledger = Ledger(url, requested_by="surface")
    async_ledger = AsyncLedger(url, requested_by="surface")
    sync_beats = sync_ledger.beat_for("surface:key")

    async def async_beats() -> AsyncHeartbeats | None:
        beats = async_ledger.beat_for("surface:key")
        if beats is not None:
            await beats.stop()
        return beats

    made = asyncio.run(async_beats())
    assert sync_beats is not None and made is not None
    sync_beats.stop()
    effect: dict[str, Any] = {"action": "refund", "target": "invoice:S", "params": {}}
    return [
        (sync_ledger, async_ledger),
        (sync_ledger.effect("surface:key", **effect), async_ledger.effect("surface:key", **effect)),
        (sync_beats, made),
    ]


def surface(cls: type, instance: object) -> dict[str, str]:
    """Each public name of the class and its instances, and what it is:
    its kind, and for a function whether it is awaited and its signature
    (parameters, their kinds and defaults, annotations), asyncio names
    mapped to their twins by the generator's own rules."""
    tool = the_tool()

    def sync(text: str) -> str:
        return str(tool.sync_tokens(text)).strip()

    shown: dict[str, str] = {}
    names = {name for name in dir(cls) if not name.startswith("_")}
    names |= {name for name in ("__init__", "__enter__", "__exit__", "__aenter__", "__aexit__") if name in vars(cls)}
    names |= {name for name in vars(instance) if not name.startswith("_")}
    for name in sorted(names):
        member = inspect.getattr_static(cls, name, None)
        twin = TWIN_NAMES.get(name, name)
        if member is None:
            shown[twin] = "attribute"
        elif isinstance(member, property):
            shown[twin] = "property"
        elif inspect.isfunction(member):
            signature = inspect.signature(member)
            parameters = ", ".join(
                f"{parameter.kind.name} {parameter.name}: {sync(str(parameter.annotation))} = {parameter.default!r}"
                for parameter in signature.parameters.values()
            )
            awaited = "awaited " if inspect.iscoroutinefunction(member) else ""
            shown[twin] = f"{awaited}def ({parameters}) -> {sync(str(signature.return_annotation))}"
        else:
            shown[twin] = type(member).__name__
    return shown


def test_each_class_and_its_twin_have_the_same_surface() -> None:
    pairs: list[tuple[type, type]] = [(Ledger, AsyncLedger), (Effect, AsyncEffect), (Heartbeats, AsyncHeartbeats)]
    for (sync_class, async_class), (sync_instance, async_instance) in zip(pairs, instances()):
        sync_surface = surface(sync_class, sync_instance)
        async_surface = surface(async_class, async_instance)
        awaited = {TWIN_NAMES.get(name, name) for name in AWAITED[async_class.__name__]}
        for name in list(async_surface):
            if name in awaited:
                assert async_surface[name].startswith("awaited "), f"{async_class.__name__}.{name} is not awaited"
                async_surface[name] = async_surface[name].removeprefix("awaited ")
            else:
                assert not async_surface[name].startswith("awaited "), f"{async_class.__name__}.{name} is awaited"
        assert not any(shown.startswith("awaited ") for shown in sync_surface.values()), sync_surface
        for name in [name for name in sync_surface if (sync_class.__name__, name) in INTENDED]:
            sync_surface.pop(name)
            async_surface.pop(name)
        assert sync_surface == async_surface, "\n".join(
            f"{name}: {sync_class.__name__} {sync_surface.get(name)!r}, {async_class.__name__} {async_surface.get(name)!r}"
            for name in sorted(set(sync_surface) | set(async_surface))
            if sync_surface.get(name) != async_surface.get(name)
        )
        assert len(sync_surface) >= 3, sync_surface


def test_the_surface_covers_what_the_issue_found_missing() -> None:
    # intent_of (a decorated tool's key, target and params) and close, on both.
    for cls in (Ledger, AsyncLedger):
        assert callable(getattr(cls, "intent_of")) and callable(getattr(cls, "close"))
    parameters: dict[str, Any] = dict(inspect.signature(AsyncLedger.__init__).parameters)
    assert "pool" in parameters and list(parameters) == list(inspect.signature(Ledger.__init__).parameters)
