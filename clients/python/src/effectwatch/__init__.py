"""Record an agent's side effects in the effectwatch ledger.

    ledger = Ledger(database_url, requested_by="refund-agent")
    with ledger.effect("refund:INV-402:AP-91", action="refund", target="invoice:INV-402",
                       params={"amount_minor": 1500, "currency": "EUR"}) as e:
        e.dispatched()
        refund = provider.refund(...)
        e.succeeded(refund["id"], refund)
"""

from ._core import Beat, Begun, Completed, Dispatch, Intent
from .aio import AsyncEffect, AsyncLedger
from .errors import (
    BadArgument,
    BusinessRejection,
    EffectError,
    Held,
    InFlight,
    LedgerRefused,
    Misuse,
    NotPerformed,
    NotYours,
    Overlap,
    ProviderError,
    RateLimited,
    Rejected,
    Stop,
    Wait,
)
from .ledger import Effect, Ledger

__all__ = [
    "AsyncEffect",
    "AsyncLedger",
    "BadArgument",
    "Beat",
    "Begun",
    "BusinessRejection",
    "Completed",
    "Dispatch",
    "Effect",
    "EffectError",
    "Held",
    "InFlight",
    "Intent",
    "Ledger",
    "LedgerRefused",
    "Misuse",
    "NotPerformed",
    "NotYours",
    "Overlap",
    "ProviderError",
    "RateLimited",
    "Rejected",
    "Stop",
    "Wait",
]
