"""The replay set for your own wrapper: before an agent gets write authority,
run its decorated tool against deliberate duplicates on a staging ledger and
assert the provider's state, not only local logs.

    report = replay_set(refund, same={"order_id": "T-1", "amount_minor": 100},
                        changed={"order_id": "T-1", "amount_minor": 200},
                        distinct=[{"order_id": "T-2", ...}, {"order_id": "T-3", ...}],
                        provider_calls=lambda args: staging.count(args["order_id"]))
    assert report.all_held, report

Each line says whether it held and what the provider showed. A lost reply
and a crash after dispatch need your provider to fail on request; this
module's lines cover what any wrapper can be driven through."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .errors import EffectError, InFlight, Rejected


@dataclass(frozen=True)
class Line:
    check: str
    held: bool
    provider_state: Any
    detail: str = ""


@dataclass
class Report:
    lines: list[Line] = field(default_factory=list)

    @property
    def all_held(self) -> bool:
        return all(line.held for line in self.lines)

    def __str__(self) -> str:
        return "\n".join(
            f"[{'held' if line.held else 'NOT HELD'}] {line.check}: provider {line.provider_state!r}"
            + (f" ({line.detail})" if line.detail else "")
            for line in self.lines
        )


def replay_set(
    tool: Callable[..., Any],
    *,
    same: Mapping[str, Any],
    changed: Mapping[str, Any],
    distinct: Sequence[Mapping[str, Any]],
    provider_calls: Callable[[Mapping[str, Any]], int],
    concurrent: Mapping[str, Any] | None = None,
    deliveries: int = 8,
) -> Report:
    """Drives `tool` (a `Ledger.tool`-decorated function) with keyword
    arguments: `same` twice, `changed` (same key, a material parameter
    changed), each of `distinct` (two genuinely different actions), and
    `concurrent` delivered `deliveries` times at once. `provider_calls`
    answers how many times the provider acted for a set of arguments."""
    report = Report()

    first = tool(**same)
    second = tool(**same)
    calls = provider_calls(same)
    report.lines.append(
        Line("the same call twice acts once and answers the same", calls == 1 and first == second, calls)
    )

    try:
        tool(**changed)
        report.lines.append(Line("a material change under the old key is refused", False, provider_calls(same),
                                 "the changed call ran"))
    except Rejected as rejected:
        calls = provider_calls(same)
        report.lines.append(Line("a material change under the old key is refused", calls == 1, calls,
                                 ", ".join(rejected.differences)))

    results = [tool(**arguments) for arguments in distinct]
    counts = [provider_calls(arguments) for arguments in distinct]
    report.lines.append(
        Line("distinct actions do not collapse", counts == [1] * len(distinct) and len(set(map(repr, results))) == len(results),
             counts)
    )

    if concurrent is not None:
        errors: list[BaseException] = []
        barrier = threading.Barrier(deliveries)

        def deliver() -> None:
            barrier.wait()
            try:
                tool(**concurrent)
            except InFlight:
                pass  # the expected answer while another delivery is at the provider
            except EffectError as error:
                errors.append(error)

        threads = [threading.Thread(target=deliver) for _ in range(deliveries)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        calls = provider_calls(concurrent)
        report.lines.append(Line(f"{deliveries} deliveries at once act once", calls == 1 and not errors, calls,
                                 "; ".join(map(str, errors))))
    return report
