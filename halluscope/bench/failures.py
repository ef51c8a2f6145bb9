"""Items a benchmark could not score because their model calls failed for good (a provider that gave up
after its retries, a server whose log-probs are wrong): each is recorded with its reason and the run
goes on, as ``detect_many`` does; the metrics rest on the items scored, and say so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halluscope.errors import ModelUnavailableError, redact_credentials


class Failures:
    """The failed items of one benchmark run, in the order met."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, item: str, error: str | None) -> None:
        self.items.append({"item": item, "error": None if error is None else redact_credentials(error)})

    def __len__(self) -> int:
        return len(self.items)

    def report_paragraph(self, scored: int, what: str) -> str:
        return failure_paragraph(self.items, scored, what)

    def check_some_scored(self, scored: int, what: str) -> None:
        """No metric exists when every item failed: one error with the first reason."""
        if scored == 0 and self.items:
            raise ModelUnavailableError(f"no {what} could be scored; the first failed with: {self.items[0]['error']}")


def failure_paragraph(failed: Sequence[dict[str, Any]], scored: int, what: str) -> str:
    """A report's paragraph on the failed items, blank lines around it ('' when none)."""
    if not failed:
        return ""
    first = failed[0]
    return (
        f"\n**{len(failed)} {what} failed** and are left out (the metrics rest on the {scored} scored; "
        f"results.json lists each with its reason). First: {first['item']}: {first['error']}\n"
    )
