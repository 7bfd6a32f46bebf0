"""classify(): the failure-kind table, most specific match first, unknown -> SYSTEM."""

from __future__ import annotations

import pytest

from tether.errors import StoreUnavailable
from tether.runtime import Classifier, DataError, FailureKind, LogicError, PermissionDenied, Rule, classify


class CommandFailed(Exception):
    def __init__(self, msg: str, exit_code: int) -> None:
        super().__init__(msg)
        self.exit_code = exit_code


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TimeoutError("slow"), FailureKind.TRANSIENT),
        (TimeoutError(), FailureKind.TRANSIENT),
        (ConnectionRefusedError(), FailureKind.TRANSIENT),
        (StoreUnavailable("db down"), FailureKind.TRANSIENT),
        (RuntimeError("HTTP 503 Service Unavailable"), FailureKind.TRANSIENT),
        (RuntimeError("429 Too Many Requests"), FailureKind.TRANSIENT),
        (FileNotFoundError("no such file: data.csv"), FailureKind.DATA),
        (KeyError("dataset"), FailureKind.DATA),
        (ValueError("validation failed: port"), FailureKind.DATA),
        (DataError("missing"), FailureKind.DATA),
        (LogicError("build must run first"), FailureKind.LOGIC),
        (RuntimeError("precondition failed: image not built"), FailureKind.LOGIC),
        (PermissionError("denied"), FailureKind.PERMISSION),
        (PermissionDenied("no"), FailureKind.PERMISSION),
        (RuntimeError("403 Forbidden"), FailureKind.PERMISSION),
        (CommandFailed("sh failed", 126), FailureKind.PERMISSION),
        (CommandFailed("sh failed", 124), FailureKind.TRANSIENT),
        (MemoryError(), FailureKind.SYSTEM),
        (RuntimeError("segfault in worker"), FailureKind.SYSTEM),
        (ZeroDivisionError(), FailureKind.SYSTEM),
        (Exception("???"), FailureKind.SYSTEM),
    ],
)
def test_default_table(exc, kind):
    assert classify(exc) is kind


def test_user_rules_take_precedence_and_most_specific_type_wins():
    class QuotaExceeded(RuntimeError):
        pass

    class HardQuota(QuotaExceeded):
        pass

    c = Classifier().add(Rule(kind=FailureKind.TRANSIENT, types=(QuotaExceeded,)))
    c.add(Rule(kind=FailureKind.PERMISSION, types=(HardQuota,)))
    assert c.classify(QuotaExceeded("x")) is FailureKind.TRANSIENT
    assert c.classify(HardQuota("x")) is FailureKind.PERMISSION
    assert classify(QuotaExceeded("x")) is FailureKind.SYSTEM  # the default table is untouched
    c.add(Rule(kind=FailureKind.DATA, pattern=r"bucket .* missing"))
    assert c.classify(RuntimeError("bucket logs missing")) is FailureKind.DATA


def test_tether_errors_of_the_edges_are_classified():
    from tether.errors import CommandRefused, ModelUnavailable, SessionError

    assert classify(ModelUnavailable("gave up after 5 attempts")) is FailureKind.TRANSIENT
    assert classify(SessionError("connection lost")) is FailureKind.TRANSIENT
    assert classify(CommandRefused("rm -rf /", "wipes the root")) is FailureKind.PERMISSION
