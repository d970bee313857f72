"""The synchronous ledger's heartbeats: one daemon thread per ledger (and
process) sends the beats of all its provider calls in progress. Written by
hand: the asyncio ledger's (`_beats_aio`) are timers and tasks on the
caller's event loop instead, and `tools/async_to_sync.py` maps the one
module's names to the other's."""

from __future__ import annotations

import heapq
import itertools
import math
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING

from . import _core

if TYPE_CHECKING:
    from .ledger import Ledger


class Heartbeats:
    """The beats of one provider call in progress, whose claim started its
    lease: one every third of the lease, the first a third of a lease after
    the claim (a call shorter than that sends none), each one statement
    sent by the ledger's `Metronome`. `lease` is the lease in force, as the
    claim answered it, then as each beat answers it (the action's policy
    may set it): a beat answered another goes by it from the next beat.
    Nothing a beat meets is raised into the call: a beat that fails is
    logged and tried again at the next tick; one told the call is no
    longer in flight is the last (logged once if the ledger declared the
    call lost, silent if it was completed)."""

    def __init__(self, metronome: Metronome, op_key: str, lease: float, due: float) -> None:
        self.op_key = op_key
        self.lease = lease
        self._metronome = metronome
        self._due = due  # when the next beat is due (time.monotonic)
        self._stopped = False
        self._in_flight = False

    def stop(self) -> None:
        """Stops the beats; returns once none is left in flight. With no
        beat in flight (the usual case) it sends nothing and waits for
        nothing."""
        self._metronome.stop(self)


class Metronome:
    """The one daemon thread that sends a ledger's heartbeats, for every
    provider call of it in progress, one statement at a time, each on a
    connection of the ledger's pool, given back after. It sleeps until the
    earliest beat is due: starting and stopping a call's beats takes a
    lock, and sends nothing. Its thread starts with the first call that
    beats, and ends once no call has had beats due for a lease; in a forked
    child it starts afresh, its parent's calls not the child's to beat for."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._reset()
        _METRONOMES.add(self)

    def _reset(self) -> None:
        self._condition = threading.Condition()
        # (due, order, beats): the calls' next beats, earliest first; a
        # stopped call's entry is dropped when it comes up.
        self._due: list[tuple[float, int, Heartbeats]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf

    def start(self, op_key: str, lease: float, first_in: float | None = None) -> Heartbeats:
        """Beats every third of `lease`, the first `first_in` seconds from
        now (default: a third of `lease`)."""
        first = _core.beat_interval(lease) if first_in is None else first_in
        beats = Heartbeats(self, op_key, lease, time.monotonic() + first)
        with self._condition:
            self._schedule(beats)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="effectwatch heartbeats", daemon=True)
                self._thread.start()
        return beats

    def stop(self, beats: Heartbeats) -> None:
        with self._condition:
            beats._stopped = True
            while beats._in_flight:
                self._condition.wait()

    def _schedule(self, beats: Heartbeats) -> None:
        # Under the lock.
        heapq.heappush(self._due, (beats._due, next(self._order), beats))
        if beats._due < self._wakes_at:
            self._condition.notify_all()

    def _next(self) -> Heartbeats | None:
        """The call whose beat is due, marked in flight, once one is; None
        once none has been in flight for a lease (the thread then ends)."""
        with self._condition:
            idle_since: float | None = None
            while True:
                while self._due and self._due[0][2]._stopped:
                    heapq.heappop(self._due)
                now = time.monotonic()
                if not self._due:
                    lease = self.ledger.heartbeat_lease or 15.0
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= lease:
                        self._thread = None
                        self._wakes_at = math.inf
                        return None
                    self._wakes_at = math.inf
                    self._condition.wait(idle_since + lease - now)
                    continue
                idle_since = None
                due, _, beats = self._due[0]
                if due > now:
                    self._wakes_at = due
                    self._condition.wait(due - now)
                    continue
                heapq.heappop(self._due)
                beats._in_flight = True
                self._wakes_at = -math.inf  # busy: nobody need wake it
                return beats

    def _run(self) -> None:
        while (beats := self._next()) is not None:
            lease = beats.lease
            try:
                beat = self.ledger.heartbeat(beats.op_key, lease=lease)
                going_on = _core.beats_go_on(beats.op_key, beat)
                lease = _core.lease_told(beat, lease)
            except Exception as error:
                _core.beat_failed(beats.op_key, beats.lease, error)
                going_on = True
            with self._condition:
                beats._in_flight = False
                self._condition.notify_all()  # a stop waiting for this beat
                if going_on and not beats._stopped:
                    # The next tick from this one's by the lease in force it
                    # was answered (from the claim's, while that stays the
                    # same), ticks missed meanwhile skipped.
                    beats.lease = lease
                    now = time.monotonic()
                    while beats._due <= now:
                        beats._due += _core.beat_interval(beats.lease)
                    self._schedule(beats)


# Every metronome of this process, so that a forked child starts each
# afresh: its parent's thread is not in the child, its lock may have been
# held when the process forked, and its calls are not the child's.
_METRONOMES: weakref.WeakSet[Metronome] = weakref.WeakSet()


def _forked() -> None:
    for metronome in list(_METRONOMES):
        metronome._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
