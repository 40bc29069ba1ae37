"""Spending caps held before the call: reserve the estimated cost, settle the real one.

The persona training budget used to be checked against the call accounting, which is
written in batches (and drops rows under pressure): every call started before a check saw
the spend went through, so a cap was overshot by up to one batch of calls in flight. Now a
call on a capped key first reserves its estimated cost (prompt tokens + the output
allowance, at the model's prices); a reservation that would pass the cap is refused with
``BudgetExceeded`` before anything is sent, and the settled cost replaces the estimate when
the call returns (nothing when it failed). Spend by other processes shows through the
``spent`` the owner refreshes from the accounting (``set_cap``).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmjudge.providers.base import ProviderError

__all__ = ["BudgetExceeded", "Budgets", "Reservation"]


class BudgetExceeded(ProviderError):
    def __init__(self, key: str, cap: float, committed: float, estimate: float) -> None:
        super().__init__(
            "budget",
            "budget",
            f"budget of ${cap:.4f} for {key} would be passed: ${committed:.4f} spent or "
            f"reserved, this call is estimated at ${estimate:.4f}",
        )
        self.key = key


@dataclass
class _Cap:
    cap: float
    spent: float = 0.0  # settled (accounting at the last refresh + settled here since)
    reserved: float = 0.0  # estimates of calls in flight
    refused: bool = False  # a call was refused: the cap is reached for practical purposes


@dataclass(frozen=True, slots=True)
class Reservation:
    key: str
    amount: float


class Budgets:
    """Caps by key (e.g. ``persona:3``); keys without a cap are never limited."""

    def __init__(self) -> None:
        self._caps: dict[str, _Cap] = {}

    def set_cap(self, key: str, cap: float | None, spent: float) -> None:
        """(Re)arm ``key`` with its cap and the spend recorded so far (None: no cap)."""
        if cap is None:
            self._caps.pop(key, None)
            return
        entry = self._caps.get(key)
        if entry is None:
            self._caps[key] = _Cap(cap, spent)
        else:
            # The accounting lags: never forget what was settled here and not written yet.
            if cap > entry.cap:
                entry.refused = False  # a raised cap: try again
            entry.cap, entry.spent = cap, max(entry.spent, spent)

    def exhausted(self, key: str) -> bool:
        """True once a call on ``key`` was refused (until the cap is raised)."""
        entry = self._caps.get(key)
        return entry is not None and entry.refused

    def committed(self, key: str) -> float:
        entry = self._caps.get(key)
        return 0.0 if entry is None else entry.spent + entry.reserved

    def reserve(self, key: str, estimate: float) -> Reservation | None:
        """Hold ``estimate`` on ``key`` or raise ``BudgetExceeded`` (None: no cap)."""
        entry = self._caps.get(key)
        if entry is None:
            return None
        if entry.spent + entry.reserved + estimate > entry.cap:
            entry.refused = True
            raise BudgetExceeded(key, entry.cap, entry.spent + entry.reserved, estimate)
        entry.reserved += estimate
        return Reservation(key, estimate)

    def settle(self, reservation: Reservation | None, actual: float) -> None:
        """The call ended: its estimate goes, its real cost (0 when it failed) stays."""
        if reservation is None:
            return
        entry = self._caps.get(reservation.key)
        if entry is None:
            return
        entry.reserved = max(0.0, entry.reserved - reservation.amount)
        entry.spent += actual
