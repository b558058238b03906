"""Serve a request once: de-duplication, the handler's run, and the one answer it gets."""

from __future__ import annotations

import asyncio
import time

from agentbus._exceptions import AgentBusError, EnvelopeError, Unroutable
from agentbus._logging import get_logger
from agentbus._tracing import child_trace, end_span, start_span
from agentbus.bus._dedup import DedupStore, completer
from agentbus.bus._delivery import IncomingMessage, Settle, settle
from agentbus.bus._replies import Replier, Reply
from agentbus.bus._routes import RequestHandler, Routes
from agentbus.bus._stats import BusStats
from agentbus.bus._trace import bind_trace
from agentbus.envelopes import (
    ErrorCode,
    ErrorEnvelope,
    RequestEnvelope,
    ResponseEnvelope,
    encode,
    utcnow,
)
from agentbus.security import AuditSink, audit_record, envelope_fields

__all__ = ["Server"]

_log = get_logger("agentbus.bus")


class Server:
    """Runs requests with the routes' handler, at most once per message id, and answers them.

    A request seen before is answered from the de-duplication store, not run again. Long
    work (the routes' ``acks_early``) is acknowledged as it starts, through ``ack_now``.
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
    ) -> None:
        self._agent_id = agent_id
        self._routes = routes
        self._replier = replier
        self._dedup = dedup
        self._complete = completer(dedup)
        self._stats = stats
        self._audit = audit
        self._max_size = max_size
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
        seen = self._dedup.check_in(request.message_id)
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
                await self._replier.try_send(seen.reply, seen.reply_to)
            self._record(request, message.user_id, "duplicate", None)
            return Settle.ACK
        if self._routes.acks_before_work(request):
            # Long work: the broker's consumer timeout would take the delivery back.
            await settle(message, Settle.ACK, self._stats)
            self._acked_early.add(id(message))
        started = time.perf_counter()
        self._running[request.message_id] = None
        try:
            return await self._serve_once(message, request, started)
        finally:
            if (waited := self._running.pop(request.message_id)) is not None:
                waited.set()

    async def _serve_once(
        self, message: IncomingMessage, request: RequestEnvelope, started: float
    ) -> Settle:
        try:
            reply = await self._run(request)
        except asyncio.CancelledError:
            self._dedup.forget(request.message_id)
            self._stats.consumed_by[("request", "requeued")] += 1
            raise
        outcome = reply.payload.code if isinstance(reply, ErrorEnvelope) else "success"
        self._stats.consumed_by[("request", "served")] += 1
        if isinstance(reply, ErrorEnvelope):
            self._stats.errors_sent[outcome] += 1
        seconds = time.perf_counter() - started
        if self._stats.observer is not None:
            self._stats.observer.observe_handler(request.payload.action, outcome, seconds)
        try:
            return await self._answer(message, request, reply)
        finally:
            # After the answer, so the record's write never goes ahead of the reply.
            self._record(request, message.user_id, outcome, seconds)

    async def _answer(
        self, message: IncomingMessage, request: RequestEnvelope, reply: Reply
    ) -> Settle:
        reply_to = message.reply_to
        try:
            # Encoded once: the store keeps these bytes and the publisher sends them.
            reply, body = self._encoded(request, reply, reply_to)
            # The work is done: remember its reply before sending it. If the channel closes
            # now (this task is cancelled) the redelivered request is answered with it, not
            # acked without an answer as if the work were still running.
            self._complete(request.message_id, reply, reply_to, body)
            await self._replier.publisher.publish_reply(reply, reply_to, body)
        except Unroutable:
            self._stats.replies_dropped += 1
            _log.info("reply dropped: the requester has gone", message_id=request.message_id)
        except AgentBusError as exc:
            # Not answered: leave it to be redelivered; the duplicate is answered from the store.
            _log.warning("reply not sent; request left for redelivery", error=str(exc))
            return Settle.REQUEUE
        self._stats.requests_served += 1
        return Settle.ACK

    def _encoded(
        self, request: RequestEnvelope, reply: Reply, reply_to: str | None
    ) -> tuple[Reply, bytes]:
        try:
            return reply, encode(reply, max_size=self._max_size)
        except EnvelopeError as exc:
            # The result cannot be sent (not JSON, or over the size cap): say so instead.
            # The request was fine, so this is a processing failure, not a bad envelope.
            self._stats.handler_errors += 1
            code = exc.code if exc.code == ErrorCode.PAYLOAD_TOO_LARGE else None
            error = request.error(
                code or ErrorCode.PROCESSING_FAILED,
                f"the result cannot be sent: {exc.message}",
                sender_id=self._agent_id,
            )
            try:
                return error, encode(error, max_size=self._max_size)
            except EnvelopeError:
                # Not even the error fits under the cap: remembered all the same, so the
                # redelivered request meets it (and its failed send is counted) instead of
                # running the work again.
                self._complete(request.message_id, error, reply_to, None)
                raise

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
            result = await handler(request)
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
