from __future__ import annotations

import pytest

from tether.context import TiktokenTokenizer


class CountingTokenizer:
    """Wraps the real tokenizer and records every text it is asked to count."""

    def __init__(self) -> None:
        self.base = TiktokenTokenizer()
        self.calls: list[str] = []

    @property
    def name(self) -> str:
        return self.base.name

    def count(self, text: str) -> int:
        self.calls.append(text)
        return self.base.count(text)


@pytest.fixture
def counting() -> CountingTokenizer:
    return CountingTokenizer()


@pytest.fixture(scope="session")
def tok() -> TiktokenTokenizer:
    return TiktokenTokenizer()
