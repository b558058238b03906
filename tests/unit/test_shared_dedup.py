"""A de-duplication store shared by processes (any host): the bus's side of it.

Two dispatchers stand for two processes that share nothing but the store (a fake with
Redis's semantics here; ``tests/dedup`` runs the real one). A copy of a request another
process runs waits for that run and is answered with its reply; a copy of an abandoned
run serves the request; a store that fails is passed over (fail open), counted, and the
process's own window still answers its own duplicates.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

import pytest

from agentbus import ConfigurationError, Settings
from agentbus.bus import DedupUnavailable, DedupWindow, RedisDedupStore, SqliteDedupStore
from agentbus.bus import _serving as serving
from agentbus.bus._stores._dedup import Reply, Seen, is_shared
from agentbus.bus._stores._sqlite_dedup import dedup_store
from agentbus.envelopes import BROADCAST, ResponseEnvelope
from support.serving_fakes import Delivery, Work, request, serving_process
from support.waiting import wait_until


class _Server:
    """What the processes share: Redis's keys, as the store uses them."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[str, object, str | None]] = {}
        self.down = False
        self.calls = 0


class _Shared:
    """One process's ``SharedDedupStore`` on the shared ``_Server``."""

    def __init__(self, server: _Server, owner: str) -> None:
        self.server = server
        self.owner = owner
        self.answer: asyncio.Event | None = None  # set: check_in's answer is held until then

    def _ask(self) -> None:
        self.server.calls += 1
        if self.server.down:
            raise DedupUnavailable("the server is down")

    async def check_in(self, key: str) -> Seen | None:
        self._ask()
        held = self.server.keys.get(key)
        if held is None:
            self.server.keys[key] = ("running", self.owner, None)
            if self.answer is not None:
                await self.answer.wait()  # taken on the server, the answer not back yet
            return None
        kind, value, reply_to = held
        if kind == "running":
            return Seen(at=0.0, elsewhere=value != self.owner)
        assert value is None or isinstance(value, ResponseEnvelope)
        return Seen(at=0.0, reply=value, reply_to=reply_to)

    async def complete(
        self, key: str, reply: Reply | None, reply_to: str | None, body: bytes | None
    ) -> None:
        self._ask()
        self.server.keys[key] = ("done", reply, reply_to)

    async def forget(self, key: str) -> None:
        self._ask()
        if self.server.keys.get(key) == ("running", self.owner, None):
            del self.server.keys[key]

    async def aclose(self) -> None:
        pass


def test_a_shared_store_is_told_from_a_local_one() -> None:
    assert is_shared(_Shared(_Server(), "a"))
    assert not is_shared(DedupWindow(60, 10))


async def test_a_copy_taken_by_another_process_while_the_first_runs_waits_for_its_reply() -> None:
    server, work = _Server(), Work()
    a, b = (
        serving_process("svc-a", work, _Shared(server, "a")),
        serving_process("svc-b", work, _Shared(server, "b")),
    )
    first = Delivery(request())
    running = asyncio.create_task(a.dispatcher.on_service_message(first))
    await work.started.wait()
    copy = Delivery(first.request, redelivered=True)  # a's channel closed: b got it
    waiting = asyncio.create_task(b.dispatcher.on_service_message(copy))
    await wait_until(lambda: b.stats.dedup_waits == 1)
    assert not waiting.done()
    work.finish.set()
    await asyncio.gather(running, waiting)

    assert work.runs == 1
    assert a.replies.results() == b.replies.results()
    assert len(b.replies.sent) == 1, "the copy is answered with the first run's reply"
    assert (first.settled, copy.settled) == (["ack"], ["ack"])
    assert b.stats.duplicates == 1


async def test_a_copy_of_a_run_abandoned_in_another_process_serves_the_request() -> None:
    server, work = _Server(), Work()
    a, b = (
        serving_process("svc-a", work, _Shared(server, "a")),
        serving_process("svc-b", work, _Shared(server, "b")),
    )
    first = Delivery(request())
    running = asyncio.create_task(a.dispatcher.on_service_message(first))
    await work.started.wait()
    copy = Delivery(first.request, redelivered=True)
    waiting = asyncio.create_task(b.dispatcher.on_service_message(copy))
    await wait_until(lambda: b.stats.dedup_waits == 1)
    running.cancel()  # a drains past its grace: the run is abandoned, its marker let go
    await asyncio.gather(running, return_exceptions=True)
    await waiting

    assert work.runs == 2
    assert first.settled == ["requeue"]
    assert copy.settled == ["ack"]
    assert b.replies.results() == ["run 2"]
    assert server.keys[first.request.message_id][0] == "done"


async def test_a_copy_of_a_finished_run_is_answered_by_another_process_without_running() -> None:
    server, work = _Server(), Work()
    work.finish.set()
    a, b = (
        serving_process("svc-a", work, _Shared(server, "a")),
        serving_process("svc-b", work, _Shared(server, "b")),
    )
    first = Delivery(request())
    await a.dispatcher.on_service_message(first)
    copy = Delivery(first.request, redelivered=True)  # a died before its ack
    await b.dispatcher.on_service_message(copy)

    assert work.runs == 1
    assert b.replies.sent == a.replies.sent
    assert b.stats.duplicates == 1
    assert b.stats.dedup_waits == 0


async def test_a_copy_that_comes_back_to_its_own_process_does_not_ask_the_store() -> None:
    server, work = _Server(), Work()
    work.finish.set()
    a = serving_process("svc-a", work, _Shared(server, "a"))
    first = Delivery(request())
    await a.dispatcher.on_service_message(first)
    calls = server.calls
    await a.dispatcher.on_service_message(Delivery(first.request, redelivered=True))

    assert server.calls == calls, "the process's window answered the copy"
    assert work.runs == 1
    assert a.stats.duplicates == 1


async def test_a_delivery_cancelled_while_its_check_in_is_out_leaves_nothing_taken() -> None:
    """The channel closes while the store's answer is on its way: the key the store took
    for this process is let go, and the redelivered copy runs here (or anywhere)."""
    server, work = _Server(), Work()
    work.finish.set()
    store = _Shared(server, "a")
    store.answer = asyncio.Event()
    a = serving_process("svc-a", work, store)
    first = Delivery(request())
    asking = asyncio.create_task(a.dispatcher.on_service_message(first))
    await wait_until(lambda: first.request.message_id in server.keys)
    asking.cancel()  # aiormq cancels the delivery's task with its channel
    await asyncio.gather(asking, return_exceptions=True)

    assert first.settled == ["requeue"]
    assert first.request.message_id not in server.keys, "the store's key was let go"
    store.answer = None
    copy = Delivery(first.request, redelivered=True)
    await a.dispatcher.on_service_message(copy)

    assert work.runs == 1, "the copy ran: it was not taken for a run still going here"
    assert copy.settled == ["ack"]
    assert a.replies.results() == ["run 1"]


async def test_a_delivery_cancelled_while_its_completion_is_out_still_completes() -> None:
    """The channel closes just after the effect, while the store takes its record: the
    record still goes in (a copy elsewhere is answered with it instead of running again
    once the running marker would have lapsed)."""
    server, work = _Server(), Work()
    work.finish.set()
    store = _Shared(server, "a")
    recording = asyncio.Event()
    let_go = asyncio.Event()
    complete = store.complete

    async def slow_complete(key: str, reply: Reply | None, *args: object) -> None:
        recording.set()
        await let_go.wait()
        await complete(key, reply, *args)  # type: ignore[arg-type]

    store.complete = slow_complete  # type: ignore[method-assign]
    a = serving_process("svc-a", work, store)
    first = Delivery(request())
    serving = asyncio.create_task(a.dispatcher.on_service_message(first))
    await recording.wait()
    serving.cancel()  # aiormq cancels the delivery's task with its channel
    await asyncio.gather(serving, return_exceptions=True)
    let_go.set()
    await wait_until(lambda: server.keys[first.request.message_id][0] == "done")

    assert work.runs == 1
    b = serving_process("svc-b", work, _Shared(server, "b"))
    await b.dispatcher.on_service_message(Delivery(first.request, redelivered=True))
    assert work.runs == 1, "the copy elsewhere was answered from the record"
    assert b.replies.results() == ["run 1"]


class _Said:
    """The serving module's logger, as a test reads it: the events, by level."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, event: str, **fields: object) -> None:
        self.warnings.append(event)

    def __getattr__(self, level: str) -> Callable[..., None]:
        return lambda event, **fields: None


async def test_an_unreachable_store_is_passed_over_counted_and_the_window_still_serves_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said = _Said()
    monkeypatch.setattr(serving, "_log", said)
    server, work = _Server(), Work()
    work.finish.set()
    server.down = True
    a = serving_process("svc-a", work, _Shared(server, "a"))
    first = Delivery(request())
    await a.dispatcher.on_service_message(first)
    await a.dispatcher.on_service_message(Delivery(first.request, redelivered=True))
    second = Delivery(request())
    await a.dispatcher.on_service_message(second)

    assert first.settled == ["ack"], "served: fail open"
    assert second.settled == ["ack"]
    assert work.runs == 2, "the copy of the first was answered by the window"
    assert a.stats.duplicates == 1
    assert a.stats.dedup_unavailable == 4  # check and complete of each request run
    assert said.warnings == ["shared dedup store unavailable: serving on this process's window"]
    server.down = False
    third = Delivery(request())
    await a.dispatcher.on_service_message(third)

    assert server.keys[third.request.message_id][0] == "done"
    assert a.stats.dedup_unavailable == 4
    assert said.warnings[1:] == ["shared dedup store available again"]


async def test_the_store_failing_while_a_copy_waits_lets_the_copy_serve() -> None:
    server, work = _Server(), Work()
    a, b = (
        serving_process("svc-a", work, _Shared(server, "a")),
        serving_process("svc-b", work, _Shared(server, "b")),
    )
    first = Delivery(request())
    running = asyncio.create_task(a.dispatcher.on_service_message(first))
    await work.started.wait()
    copy = Delivery(first.request, redelivered=True)
    waiting = asyncio.create_task(b.dispatcher.on_service_message(copy))
    await wait_until(lambda: b.stats.dedup_waits == 1)
    server.down = True
    await waiting  # at-least-once: served rather than held while nobody can say
    work.finish.set()
    await running

    assert work.runs == 2
    assert copy.settled == ["ack"]
    assert b.stats.dedup_unavailable >= 1


async def test_a_broadcast_request_runs_once_in_each_instance_sharing_a_store() -> None:
    server, work = _Server(), Work()
    work.finish.set()
    a, b = (
        serving_process("svc-a", work, _Shared(server, "a")),
        serving_process("svc-b", work, _Shared(server, "b")),
    )
    broadcast = request(BROADCAST)
    await a.dispatcher.on_message(Delivery(broadcast))
    await b.dispatcher.on_message(Delivery(broadcast))

    assert work.runs == 2
    assert (a.stats.duplicates, b.stats.duplicates) == (0, 0)
    assert sorted(server.keys) == sorted(
        f"{agent}/{broadcast.message_id}" for agent in ("svc-a", "svc-b")
    )


def test_the_settings_choose_the_store() -> None:
    assert isinstance(dedup_store(Settings()), DedupWindow)
    assert isinstance(dedup_store(Settings(dedup_path="/tmp/x.db")), SqliteDedupStore)
    store = dedup_store(Settings(dedup_url="redis://127.0.0.1:1/0", exchange="team"))
    assert isinstance(store, RedisDedupStore)
    assert "team:dedup:" in store._prefix
    # a window of 0 turns de-duplication off, shared or not
    assert isinstance(dedup_store(Settings(dedup_url="redis://h/0", dedup_window=0)), DedupWindow)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"dedup_url": "redis://h/0", "dedup_path": "/tmp/x.db"}, "one of"),
        ({"dedup_url": "postgresql://h/db"}, "redis, rediss, unix"),
        ({"dedup_url": "redis://user:secret@h/0x"}, None),
    ],
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, str], says: str | None) -> None:
    if says is None:  # a Redis URL is taken as it is; its errors come when it is used
        assert isinstance(dedup_store(Settings(**settings)), RedisDedupStore)
        return
    with pytest.raises(ConfigurationError, match=says):
        dedup_store(Settings(**settings))


def test_a_refused_url_is_not_shown_with_its_password() -> None:
    with pytest.raises(ConfigurationError) as raised:
        dedup_store(Settings(dedup_url="memcached://user:secret@h/0"))
    assert "secret" not in str(raised.value)


_WITHOUT_REDIS = """
import sys
sys.modules["redis"] = None
import agentbus, agentbus.bus
from agentbus import Settings
from agentbus.bus._stores._sqlite_dedup import dedup_store
try:
    dedup_store(Settings(dedup_url="redis://127.0.0.1:1/0"))
except agentbus.ConfigurationError as exc:
    print(exc)
"""


def test_without_the_redis_client_the_library_imports_and_the_setting_names_the_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_REDIS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "agentbus[redis]" in done.stdout
