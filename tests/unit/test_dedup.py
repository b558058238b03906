"""The de-duplication stores: what a duplicate gets back, expiry, and the window's memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from agentbus.bus import DedupStore, DedupWindow, SqliteDedupStore
from agentbus.envelopes import ErrorCode, RequestEnvelope, RequestPayload


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _request(n: int = 0) -> RequestEnvelope:
    return RequestEnvelope(
        sender_id="client-1",
        receiver_id="svc",
        payload=RequestPayload(action="go", parameters={"n": n}),
    )


@pytest.fixture(params=["window", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> DedupStore:
    if request.param == "window":
        return DedupWindow(window=600, size=100)
    return SqliteDedupStore(tmp_path / "dedup.db", window=600)


def test_a_duplicate_gets_the_reply_that_was_sent(store: DedupStore) -> None:
    request = _request()
    reply = request.response({"n": 1, "unknown": ["kept"]}, sender_id="svc-1")

    assert store.check_in(request.message_id) is None
    running = store.check_in(request.message_id)
    store.complete(request.message_id, reply, "reply.queue")
    done = store.check_in(request.message_id)

    assert running is not None
    assert running.reply is None
    assert done is not None
    assert done.reply == reply
    assert done.reply_to == "reply.queue"


def test_an_error_reply_is_kept_too(store: DedupStore) -> None:
    request = _request()
    error = request.error(ErrorCode.INVALID_PARAMETERS, "n: bad", sender_id="svc-1")

    store.check_in(request.message_id)
    store.complete(request.message_id, error, None)
    seen = store.check_in(request.message_id)

    assert seen is not None
    assert seen.reply == error


def test_forget_lets_the_request_run_again(store: DedupStore) -> None:
    request = _request()
    store.check_in(request.message_id)
    store.forget(request.message_id)

    assert store.check_in(request.message_id) is None


def test_a_reply_that_is_not_json_is_kept_as_it_is() -> None:
    window = DedupWindow(window=600, size=10)
    request = _request()
    reply = request.response({"n": 1}, sender_id="svc-1")
    unserializable = reply.model_copy(update={"extra_field": object()})

    window.check_in(request.message_id)
    window.complete(request.message_id, unserializable, None)
    seen = window.check_in(request.message_id)

    assert seen is not None
    assert seen.reply is unserializable


def test_the_window_forgets_by_age_and_by_size() -> None:
    clock = Clock()
    window = DedupWindow(window=10, size=3, clock=clock)
    ids = [_request(n).message_id for n in range(5)]
    for message_id in ids[:4]:
        window.check_in(message_id)
    assert len(window) == 3  # the oldest went to make room
    assert window.check_in(ids[0]) is None  # ... so it is new again (and now the newest)

    clock.now = 11
    assert window.check_in(ids[4]) is None
    assert len(window) == 1


def test_a_full_window_holds_each_reply_in_under_a_kilobyte() -> None:
    # The window keeps up to dedup_size replies (100,000 by default): a few KiB of models
    # each would be hundreds of MiB; kept encoded, a small reply costs well under 1 KiB.
    count = 2_000
    requests = [_request(n) for n in range(count)]
    replies = [
        request.response(request.payload.parameters, sender_id="svc-1") for request in requests
    ]
    reply_to = "chaos-1.instance.client-1"
    window = DedupWindow(window=600, size=count)

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for request, reply in zip(requests, replies, strict=True):
        window.check_in(request.message_id)
        window.complete(request.message_id, reply, reply_to)
    per_reply = (tracemalloc.get_traced_memory()[0] - before) / count
    tracemalloc.stop()

    print(f"de-duplication window: {per_reply:.0f} B per reply")
    assert per_reply < 1024
