"""Unit tests of the chaos kit's ledger report: sends judged against effects, no broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbus.testing.chaos import Ledger, SendOutcome


@pytest.fixture
def book(tmp_path: Path) -> Iterator[Ledger]:
    """An empty ledger in this test's directory."""
    with Ledger(tmp_path / "ledger.db") as ledger:
        yield ledger


def test_an_empty_ledger_is_clean(book: Ledger) -> None:
    """Nothing sent and nothing done is a clean report of zeros."""
    report = book.report()
    assert report.is_clean
    assert (report.sent, report.effects, report.confirmed, report.replays) == (0, 0, 0, 0)
    assert report.outcomes == {}
    assert report.endings == {}


def test_every_confirmed_send_done_once_is_clean(book: Ledger) -> None:
    """Confirmed sends with one effect each: nothing lost, duplicated or unexpected."""
    for message_id in ("m-1", "m-2"):
        book.record_send(message_id, SendOutcome.CONFIRMED, detail="response")
        book.record_effect(message_id, "worker-1")
    report = book.report()
    assert report.is_clean
    assert report.sent == report.confirmed == report.effects == 2
    assert report.endings == {"response": 2}


def test_a_confirmed_send_without_an_effect_is_lost(book: Ledger) -> None:
    """Confirmed without an effect is lost; failed or unknown without one is not."""
    book.record_send("m-lost", SendOutcome.CONFIRMED)
    book.record_send("m-failed", SendOutcome.FAILED)
    book.record_send("m-unknown", SendOutcome.UNKNOWN)
    report = book.report()
    assert report.lost == ["m-lost"]
    assert report.failed_with_effect == []
    assert report.unknown_done == 0
    assert not report.is_clean


def test_an_effect_run_twice_is_duplicated_with_its_count(book: Ledger) -> None:
    """Each execution is a row: a request run three times reports 3, and all are counted."""
    book.record_send("m-1", SendOutcome.CONFIRMED)
    for agent in ("a", "b", "c"):
        book.record_effect("m-1", agent)
    report = book.report()
    assert report.duplicated == {"m-1": 3}
    assert report.effects == 3
    assert report.lost == []
    assert not report.is_clean


def test_an_effect_no_producer_recorded_is_unexpected(book: Ledger) -> None:
    """An effect whose message id was never sent is reported, sorted."""
    book.record_effect("m-z", "worker-1")
    book.record_effect("m-a", "worker-1")
    report = book.report()
    assert report.unexpected == ["m-a", "m-z"]
    assert report.sent == 0
    assert not report.is_clean


def test_a_send_recorded_twice_counts_once_by_its_last_outcome(book: Ledger) -> None:
    """The last outcome decides; every recording is an ending; the id is recorded twice."""
    book.record_send("m-1", SendOutcome.UNKNOWN, detail="timeout")
    book.record_send("m-1", SendOutcome.CONFIRMED)
    report = book.report()
    assert report.sent == 1
    assert report.outcomes == {"confirmed": 1}
    assert report.endings == {"timeout": 1, "confirmed": 1}  # detail, else the outcome
    assert report.recorded_twice == ["m-1"]
    assert report.lost == ["m-1"]


def test_unknown_and_failed_sends_that_ran_are_reported(book: Ledger) -> None:
    """An unknown outcome that ran is counted; a failed one that ran is named."""
    book.record_send("m-unknown", SendOutcome.UNKNOWN)
    book.record_send("m-failed", SendOutcome.FAILED, detail="error:refused")
    book.record_effect("m-unknown", "worker-1")
    book.record_effect("m-failed", "worker-1")
    report = book.report()
    assert report.unknown_done == 1
    assert report.failed_with_effect == ["m-failed"]
    assert report.outcomes == {"unknown": 1, "failed": 1}
    assert report.is_clean  # neither is a loss nor a duplicate


def test_apply_once_records_a_second_execution_as_a_replay(book: Ledger) -> None:
    """apply_once applies the first execution only; the rest are replays, not duplicates."""
    book.record_send("m-1", SendOutcome.CONFIRMED)
    assert book.apply_once("m-1", "worker-1") is True
    assert book.apply_once("m-1", "worker-2") is False
    report = book.report()
    assert report.replays == 1
    assert report.effects == 1
    assert report.duplicated == {}
    assert book.effects("m-1") == [("m-1", "worker-1")]


def test_residue_left_in_a_queue_makes_the_report_unclean(book: Ledger) -> None:
    """Messages left in a queue are kept per queue; an empty queue keeps it clean."""
    assert book.report({"q-empty": 0}).is_clean
    report = book.report({"q-empty": 0, "q-left": 2})
    assert report.residue == {"q-empty": 0, "q-left": 2}
    assert not report.is_clean


def test_summary_is_one_line_of_the_figures(book: Ledger) -> None:
    """The summary names every figure on one line, outcomes and endings sorted."""
    book.record_send("m-1", SendOutcome.CONFIRMED, detail="response")
    book.record_send("m-2", SendOutcome.UNKNOWN, detail="timeout")
    book.record_effect("m-1", "worker-1")
    summary = book.report({"q": 1}).summary()
    assert summary == (
        "sent=2 [confirmed=1 unknown=1] endings [response=1 timeout=1] effects=1 "
        "lost=0 dup=0 unexpected=0 unknown_done=0 replays=0 residue=1"
    )
