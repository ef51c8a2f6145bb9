"""A stand-in for tqdm's bar as the benches use it, keeping what each bar was told: swap it in with
``monkeypatch.setattr("tqdm.tqdm", CountingBar)``."""

from __future__ import annotations

from typing import Any

BARS: list[CountingBar] = []  # every bar opened since the last BARS.clear()


class CountingBar:
    """tqdm's interface as the runner uses it: its count, its total, and its total at each postfix."""

    def __init__(self, total: int | None = None, **_kwargs: Any) -> None:
        self.total, self.n = total, 0
        self.totals: list[int | None] = []  # the total each time an item finished (set_postfix)

    def __enter__(self) -> CountingBar:
        BARS.append(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, **_kwargs: Any) -> None:
        self.totals.append(self.total)

    def refresh(self) -> None:
        return None
