"""Serve a request once: de-duplication, the handler's run, and the one answer it gets."""

from __future__ import annotations

import asyncio
import time
from typing import Final

from agentbus._exceptions import AgentBusError, BusClosed, ConnectionLost, EnvelopeError, Unroutable
from agentbus._faults import fault_point
from agentbus._logging import get_logger
from agentbus._tracing import child_trace, end_span, start_span
from agentbus.bus._artifacts import Artifacts
from agentbus.bus._by_reference import encoded_reply, is_by_reference, resolve_parameters
from agentbus.bus._delivery import IncomingMessage, Settle, settle
from agentbus.bus._redelivery import bind_ack_gates, held_written
from agentbus.bus._replies import Replier, Reply
from agentbus.bus._routes import RequestHandler, Routes
from agentbus.bus._stats import BusStats
from agentbus.bus._stores._dedup import DedupStore, Seen, SharedDedupStore, completer
from agentbus.bus._trace import bind_trace
from agentbus.envelopes import (
    BROADCAST,
    ErrorCode,
    ErrorEnvelope,
    RequestEnvelope,
    ResponseEnvelope,
    utcnow,
)
from agentbus.security import AuditSink, audit_record, envelope_fields

__all__ = ["Server"]

_log = get_logger("agentbus.bus")

# A copy of a request that another process runs asks the shared store again after these
# many seconds, doubling, up to the last: its reply, or the run's end without one.
_ASK_FIRST: Final = 0.02
_ASK_AT_MOST: Final = 0.5
_NOTE_EVERY: Final = 30.0  # s: how often a long wait for a run elsewhere is logged
# Raised out of a handler, these say this process lost the broker, not how the request went.
_LOST: Final = (ConnectionLost, BusClosed)


class Server:
    """Runs requests with the routes' handler, at most once per message id, and answers them.

    A request seen before is answered from the de-duplication store, not run again. Long
    work (the routes' ``acks_early``) is acknowledged as it starts, through ``ack_now``.
    With a ``shared`` store (another process, on any host, may hold the request), ``dedup``
    is this process's window in front of it: the shared store is asked about what the
    window has not seen, a copy that another process runs waits for that run's end, and a
    shared store that fails is passed over (counted, logged) and the window serves alone.
    """

    def __init__(
        self,
        *,
        agent_id: str,
        routes: Routes,
        replier: Replier,
        dedup: DedupStore,
        stats: BusStats,
        audit: AuditSink | None,
        max_size: int,
        shared: SharedDedupStore | None = None,
        artifacts: Artifacts | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._routes = routes
        self._replier = replier
        self._dedup = dedup
        self._complete = completer(dedup)
        self._shared = shared
        self._shared_down = False
        self._stats = stats
        self._audit = audit
        self._max_size = max_size
        self._artifacts = artifacts  # parameters and results by reference; None: never
        # Requests running here, by message id; the event (made when a copy waits on the
        # run) is set when the run ends, answered or not.
        self._running: dict[str, asyncio.Event | None] = {}
        self._acked_early: set[int] = set()  # id() of deliveries acked before their work

    def acked_early(self, message: IncomingMessage) -> bool:
        """Whether ``message`` was acknowledged as its work started (settle it no more)."""
        return id(message) in self._acked_early

    def forget(self, message: IncomingMessage) -> None:
        """Drop what was kept of ``message`` once the dispatcher is done with it."""
        self._acked_early.discard(id(message))

    async def serve(self, message: IncomingMessage, request: RequestEnvelope) -> Settle:
        """Run ``request`` (or answer it again, if it ran) and return how to settle it."""
        key = _key(request, self._agent_id)
        seen = self._dedup.check_in(key)
        if seen is None and self._shared is not None:
            seen = await self._check_in_shared(self._shared, key)
        if (
            seen is not None
            and seen.reply is None
            and message.redelivered
            and request.message_id in self._running
        ):
            # The same request is running here on a delivery whose channel closed: a
            # reconnect brought it back before that run ended. Wait for the run: its
            # reply answers this copy, or, abandoned (cancelled), this copy serves it.
            ended = self._running[request.message_id] or asyncio.Event()
            self._running[request.message_id] = ended
            await ended.wait()
            return await self.serve(message, request)
        if seen is not None:
            # At-least-once delivery: the effect ran already. Answer it again from memory.
            self._stats.duplicates += 1
            self._stats.consumed_by[("request", "duplicate")] += 1
            if seen.reply is not None:
                # To whoever asks this time: another leader taking a plan over asks again
                # under the same id, and a copy that crossed from another site has no
                # reply_to (its answer goes by its sender's routing key).
                await self._replier.try_send(_addressed(seen.reply, request), message.reply_to)
            self._record(request, message.user_id, "duplicate", None)
            return Settle.ACK
        if self._routes.acks_before_work(request):
            # Long work: the broker's consumer timeout would take the delivery back.
            await settle(message, Settle.ACK, self._stats)
            self._acked_early.add(id(message))
            bind_ack_gates(held=False)
        started = time.perf_counter()
        self._running[request.message_id] = None
        try:
            return await self._serve_once(message, request, key, started)
        finally:
            if (waited := self._running.pop(request.message_id)) is not None:
                waited.set()

    async def _serve_once(
        self, message: IncomingMessage, request: RequestEnvelope, key: str, started: float
    ) -> Settle:
        try:
            reply = await self._run(request)
        except asyncio.CancelledError:
            await self._abandon(key)
            raise
        except _LOST as exc:
            # This process lost the broker under the work (its delivery went back with its
            # channel, or is about to): that is no answer to the request. Left to be
            # delivered again, here or to another instance, as a cancelled run is, and
            # never kept by de-duplication as the request's reply.
            await self._abandon(key)
            _log.info("request left for redelivery: the broker was lost under it", error=str(exc))
            return Settle.REQUEUE
        outcome = reply.payload.code if isinstance(reply, ErrorEnvelope) else "success"
        self._stats.consumed_by[("request", "served")] += 1
        if isinstance(reply, ErrorEnvelope):
            self._stats.errors_sent[outcome] += 1
        seconds = time.perf_counter() - started
        if self._stats.observer is not None:
            self._stats.observer.observe_handler(request.payload.action, outcome, seconds)
        try:
            return await self._answer(message, request, key, reply)
        finally:
            # After the answer, so the record's write never goes ahead of the reply.
            self._record(request, message.user_id, outcome, seconds)

    async def _abandon(self, key: str) -> None:
        self._dedup.forget(key)
        if self._shared is not None:
            await asyncio.shield(self._forget_shared(self._shared, key))
        self._stats.consumed_by[("request", "requeued")] += 1

    async def _answer(
        self, message: IncomingMessage, request: RequestEnvelope, key: str, reply: Reply
    ) -> Settle:
        reply_to = message.reply_to
        # Encoded once: the store keeps these bytes and the publisher sends them.
        reply, body = await encoded_reply(
            request, reply, self._max_size, self._agent_id, self._artifacts, self._stats
        )
        # The work is done: remember its reply before sending it. If the channel closes
        # now (this task is cancelled) the redelivered request is answered with it, not
        # acked without an answer as if the work were still running.
        self._complete(key, reply, reply_to, body)
        if self._shared is not None:
            # Shielded: the effect is done, so its record goes in even if the channel closes
            # now (the task is cancelled); cut short, the marker would lapse with its lease
            # and a copy run again elsewhere.
            await asyncio.shield(self._complete_shared(self._shared, key, reply, reply_to, body))
        try:
            if body is None:
                # Not even the error fits under the cap: remembered all the same, so the
                # redelivered request meets it (and its failed send is counted) instead of
                # running the work again.
                raise EnvelopeError("the error reply is over the size cap too")
            await self._replier.publisher.publish_reply(reply, reply_to, body)
        except Unroutable:
            self._stats.replies_dropped += 1
            _log.info("reply dropped: the requester has gone", message_id=request.message_id)
        except AgentBusError as exc:
            # Not answered: leave it to be redelivered; the duplicate is answered from the store.
            _log.warning("reply not sent; request left for redelivery", error=str(exc))
            return Settle.REQUEUE
        if not await held_written():
            # What the answer stands on is not in (a plan's end, in its journal): the
            # request runs again from what is, not answered from the store.
            await self._abandon(key)
            return Settle.REQUEUE
        self._stats.requests_served += 1
        fault_point("bus.answered")  # a test's kill: answered, not yet acked
        return Settle.ACK

    async def _check_in_shared(self, shared: SharedDedupStore, key: str) -> Seen | None:
        """Ask the shared store about a request the window has just taken as running here."""
        try:
            return await self._ask_shared(shared, key)
        except asyncio.CancelledError:
            # The channel closed while asking (or waiting): nothing runs here, and the key
            # the store may have taken for this process is let go, so the copy can run.
            self._dedup.forget(key)
            await asyncio.shield(self._forget_shared(shared, key))
            raise

    async def _ask_shared(self, shared: SharedDedupStore, key: str) -> Seen | None:
        try:
            seen = await shared.check_in(key)
        except Exception as exc:  # fail open: served on what this process knows
            self._shared_failed("check", exc)
            return None
        self._shared_up()
        if seen is None:
            return None
        self._dedup.forget(key)  # held elsewhere, or served: not running here
        if not seen.elsewhere:
            return seen
        seen = await self._wait_elsewhere(shared, key, seen.holder)
        return seen if seen is not None else self._dedup.check_in(key)

    async def _wait_elsewhere(
        self, shared: SharedDedupStore, key: str, holder: str | None
    ) -> Seen | None:
        """Hold a copy of a request another process runs until that run ends.

        Returns its reply (answer the copy with it), or None: the run ended without one
        (abandoned, or its process died and its lease ran out) and this copy now holds the
        request, or the store failed meanwhile. Not requeued: on a classic queue every
        return counts towards the delivery limit, and the copy would come straight back.
        """
        self._stats.dedup_waits += 1
        _log.info(
            "request runs in another process; this copy waits for its end", key=key, holder=holder
        )
        began, noted = time.monotonic(), 0.0
        delay = _ASK_FIRST
        while True:
            await asyncio.sleep(delay)
            delay = min(2 * delay, _ASK_AT_MOST)
            try:
                seen = await shared.check_in(key)
            except Exception as exc:
                self._shared_failed("check", exc)
                return None
            if seen is None or not seen.elsewhere:
                waited = round(time.monotonic() - began, 3)
                _log.info("the run elsewhere ended", key=key, waited=waited, holder=holder)
                return seen
            holder = seen.holder
            if time.monotonic() - began > noted + _NOTE_EVERY:
                noted += _NOTE_EVERY  # a run held this long: say who holds it, now and then
                _log.info("request still runs in another process", key=key, holder=holder)

    async def _complete_shared(
        self,
        shared: SharedDedupStore,
        key: str,
        reply: Reply,
        reply_to: str | None,
        body: bytes | None,
    ) -> None:
        try:
            await shared.complete(key, reply, reply_to, body)
        except Exception as exc:  # a copy on another host runs again once the lease ends
            self._shared_failed("complete", exc)
        else:
            self._shared_up()

    async def _forget_shared(self, shared: SharedDedupStore, key: str) -> None:
        try:
            await shared.forget(key)
        except Exception as exc:  # the marker expires with its lease
            self._shared_failed("forget", exc)

    def _shared_failed(self, call: str, exc: Exception) -> None:
        self._stats.dedup_unavailable += 1
        if not self._shared_down:
            self._shared_down = True
            _log.warning(
                "shared dedup store unavailable: serving on this process's window",
                call=call,
                error=f"{type(exc).__name__}: {exc}",
            )

    def _shared_up(self) -> None:
        if self._shared_down:
            self._shared_down = False
            _log.warning("shared dedup store available again")

    async def _run(self, request: RequestEnvelope) -> Reply:
        deadline = request.metadata.deadline
        if deadline is not None and deadline <= utcnow():
            self._stats.expired_requests += 1
            return request.error(
                ErrorCode.TIMEOUT,
                "the request's deadline passed before it was served",
                sender_id=self._agent_id,
            )
        handler = self._routes.handler
        if handler is None:
            return request.error(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{self._agent_id} serves no requests",
                sender_id=self._agent_id,
            )
        trace = request.metadata.trace
        span = start_span(
            f"process {request.payload.action}",
            "consumer",
            trace,
            {"messaging.operation.type": "process", "messaging.message.id": request.message_id},
        )
        bind_trace(child_trace(span, trace))  # handed on to what the handler sends
        try:
            reply = await self._call(handler, request)
        except BaseException:
            end_span(span, "cancelled")
            raise
        end_span(span, reply.payload.code if isinstance(reply, ErrorEnvelope) else "success")
        return reply

    async def _call(self, handler: RequestHandler, request: RequestEnvelope) -> Reply:
        try:
            if self._artifacts is not None and is_by_reference(request):
                request = await resolve_parameters(self._artifacts, request)
            result = await handler(request)
        except _LOST:
            raise  # not an answer: see _serve_once
        except AgentBusError as exc:
            return request.error(
                exc.code, exc.message, sender_id=self._agent_id, details=exc.details
            )
        except Exception as exc:
            self._stats.handler_errors += 1
            _log.exception("request handler failed", action=request.payload.action)
            return request.error(
                ErrorCode.PROCESSING_FAILED,
                f"{type(exc).__name__}: {exc}",
                sender_id=self._agent_id,
            )
        if isinstance(result, ResponseEnvelope | ErrorEnvelope):
            return result
        return request.response(result, sender_id=self._agent_id)

    def _record(
        self, request: RequestEnvelope, user_id: str | None, outcome: str, seconds: float | None
    ) -> None:
        if self._audit is None or self._audit.off:  # no stream: do not build the record
            return
        self._audit.append(
            audit_record(
                kind="request",
                recorder=self._agent_id,
                user_id=user_id,
                outcome=outcome,
                seconds=seconds,
                **envelope_fields(request),
            )
        )


def _key(request: RequestEnvelope, agent_id: str) -> str:
    # A broadcast request runs once in each instance that takes it: the instance is part of
    # its key, so a store shared by instances does not take one's run for another's.
    if request.receiver_id == BROADCAST:
        return f"{agent_id}/{request.message_id}"
    return request.message_id


def _addressed(reply: Reply, request: RequestEnvelope) -> Reply:
    if reply.receiver_id == request.sender_id:
        return reply
    return reply.model_copy(update={"receiver_id": request.sender_id})
