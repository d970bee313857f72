"""The asyncio ledger's heartbeats: a timer per provider call in progress,
and a task for each beat, on the caller's event loop (a call that blocks
the loop holds its beats up too). Written by hand: the synchronous
ledger's (`_beats`) are one thread per ledger instead, and
`tools/async_to_sync.py` maps this module's names to that one's."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from . import _core

if TYPE_CHECKING:
    from .aio import AsyncLedger


class AsyncHeartbeats:
    """See `effectwatch.ledger.Heartbeats`: the beats of one provider call
    in progress, whose claim started its lease, on the caller's event loop.
    Between beats, only a timer: a beat is a task of its own, one statement
    on a connection of the ledger's pool, made when it is due. `lease` is
    the lease in force, as the claim answered it, then as each beat answers
    it."""

    def __init__(self, ledger: AsyncLedger, op_key: str, lease: float, first_in: float | None = None) -> None:
        self.op_key = op_key
        self.lease = lease
        self._ledger = ledger
        self._loop = asyncio.get_running_loop()
        self._stopped = False
        self._in_flight: asyncio.Task[None] | None = None
        self._due = self._loop.time() + (_core.beat_interval(lease) if first_in is None else first_in)
        self._timer: asyncio.TimerHandle | None = self._loop.call_at(self._due, self._tick)

    async def stop(self) -> None:
        """Stops the beats; returns once none is left in flight. With no
        beat in flight (the usual case) it sends nothing and waits for
        nothing. Cancelled while it waits, it cancels the beat too: none
        outlives its call."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._in_flight is not None:
            await self._in_flight

    def _tick(self) -> None:
        self._timer = None
        self._in_flight = self._loop.create_task(self._beat(), name=f"effectwatch heartbeat: {self.op_key}")

    async def _beat(self) -> None:
        if self._stopped:  # stopped between its tick and its start: not sent
            self._in_flight = None
            return
        lease = self.lease
        try:
            try:
                beat = await self._ledger.heartbeat(self.op_key, lease=lease)
                going_on = _core.beats_go_on(self.op_key, beat)
                lease = _core.lease_told(beat, lease)
            except Exception as error:
                _core.beat_failed(self.op_key, self.lease, error)
                going_on = True
        finally:
            self._in_flight = None
        if going_on and not self._stopped:
            # The next tick from this one's by the lease in force it was
            # answered (from the claim's, while that stays the same), ticks
            # missed meanwhile skipped.
            self.lease = lease
            now = self._loop.time()
            while self._due <= now:
                self._due += _core.beat_interval(self.lease)
            self._timer = self._loop.call_at(self._due, self._tick)


class AsyncMetronome:
    """What starts the beats of an asyncio ledger's provider calls, as
    `effectwatch.ledger.Metronome` does a synchronous one's: here each
    call's own timer on the running event loop, with no thread to start
    nor, in a forked child, to start again."""

    def __init__(self, ledger: AsyncLedger) -> None:
        self.ledger = ledger

    def start(self, op_key: str, lease: float, first_in: float | None = None) -> AsyncHeartbeats:
        """Beats every third of `lease`, the first `first_in` seconds from
        now (default: a third of `lease`)."""
        return AsyncHeartbeats(self.ledger, op_key, lease, first_in)
