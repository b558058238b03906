"""Push notifications: a task's events POSTed to the webhooks its caller registered, retried.

Registration is the SDK's (``CreateTaskPushNotificationConfig``, or a message's
``configuration.taskPushNotificationConfig``); ``PushSender`` takes over the delivery,
where the SDK's own sender logs a failed POST and drops it. Each event goes as the SDK
sends it: a ``StreamResponse`` as JSON, ``X-A2A-Notification-Token`` with the config's
token, ``Authorization: <scheme> <credentials>`` with its authentication. Deliveries run
off the task's path, in order for each webhook: one that fails (no connection, a timeout,
HTTP 408, 429 or 5xx) is tried again after a pause that doubles from ``backoff`` up to
``max_pause`` (less a random part of up to half: webhooks that failed together are not
retried together; at least the ``Retry-After`` seconds of a 429 or 503), ``attempts``
times in all; another 4xx is final. A webhook keeps ``pending`` events waiting at most:
over that, the oldest waiting goes.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx
from a2a.server.tasks import (
    PushNotificationConfigStore,
    PushNotificationEvent,
    PushNotificationSender,
)
from a2a.types import a2a_pb2 as a2a
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict

from agentbus._logging import get_logger

__all__ = ["PushSender", "Pushes"]

Screen = Callable[[str], Awaitable[bool]]
"""Whether a webhook URL may be called (the SDK's ``validate_push_notification_url``)."""

_RETRIED: Final = frozenset({408, 429})
_log = get_logger("agentbus.gateway.push")


@dataclass(frozen=True, slots=True)
class Pushes:
    """Push notifications as the gateway serves them: where webhooks are registered, what
    delivers to them, and what screens their URLs (None: every URL is taken)."""

    configs: PushNotificationConfigStore
    sender: PushSender
    screen: Screen | None


@dataclass(frozen=True, slots=True)
class _Delivery:
    task_id: str
    url: str
    body: dict[str, Any]
    headers: dict[str, str]


class PushSender(PushNotificationSender):
    """Delivers each event of a task to its registered webhooks, retrying with backoff.

    Args:
        configs: The registered webhooks (the SDK's push notification config store).
        attempts: Tries of each event, the first included.
        backoff: Seconds before the second try; each pause after doubles.
        max_pause: The longest pause between two tries.
        pending: Events one webhook keeps waiting, at most.
        screen: Refuses webhook URLs (private addresses), checked before each event.
        http: The client to POST with (default: one of its own, closed by ``aclose``).
    """

    def __init__(
        self,
        configs: PushNotificationConfigStore,
        *,
        attempts: int,
        backoff: float,
        max_pause: float = 60.0,
        pending: int = 256,
        screen: Screen | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._configs = configs
        self._attempts = attempts
        self._backoff = backoff
        self._max_pause = max_pause
        self._pending = pending
        self._screen = screen
        self._own_http = http is None
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(10.0))
        self._queues: dict[tuple[str, str], deque[_Delivery]] = {}
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}

    def __repr__(self) -> str:
        return f"<PushSender webhooks={len(self._workers)} attempts={self._attempts}>"

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        """Queue ``event`` for each webhook of ``task_id``; return without waiting."""
        configs = await self._configs.get_info_for_dispatch(task_id)
        if not configs:
            return
        body = MessageToDict(to_stream_response(event))
        for config in configs:
            key = (task_id, config.id or config.url)
            queue = self._queues.setdefault(key, deque())
            if len(queue) >= self._pending:
                dropped = queue.popleft()
                _log.warning("push notification dropped", task_id=task_id, url=dropped.url)
            queue.append(_Delivery(task_id, config.url, body, _headers(config)))
            if key not in self._workers:
                self._workers[key] = asyncio.create_task(self._deliver(key))

    async def _deliver(self, key: tuple[str, str]) -> None:
        queue = self._queues[key]
        try:
            while queue:
                await self._post(queue.popleft())
        finally:
            # No await since the loop's last check: nothing was queued meanwhile.
            del self._workers[key]
            if not queue:
                del self._queues[key]

    async def _post(self, delivery: _Delivery) -> None:
        if self._screen is not None and not await self._screen(delivery.url):
            _log.warning("push webhook refused", task_id=delivery.task_id, url=delivery.url)
            return
        pause = self._backoff
        for attempt in range(1, self._attempts + 1):
            wait = await self._try(delivery, attempt)
            if wait is None:
                return
            if attempt < self._attempts:
                jittered = pause * random.uniform(0.5, 1.0)
                await asyncio.sleep(min(max(wait, jittered), self._max_pause))
                pause = min(pause * 2, self._max_pause)
        _log.warning(
            "push notification not delivered",
            task_id=delivery.task_id,
            url=delivery.url,
            attempts=self._attempts,
        )

    async def _try(self, delivery: _Delivery, attempt: int) -> float | None:
        # None: nothing more to do (delivered, or refused for good); else the seconds the
        # webhook asked to wait (0: none) before the next try.
        try:
            response = await self._http.post(
                delivery.url, json=delivery.body, headers=delivery.headers
            )
        except httpx.HTTPError as exc:
            _log.info("push failed", url=delivery.url, attempt=attempt, error=repr(exc))
            return 0.0
        status = response.status_code
        if status < 400:
            return None
        if status in _RETRIED or status >= 500:
            _log.info("push failed", url=delivery.url, attempt=attempt, status=status)
            return _retry_after(response)
        _log.warning("push refused", task_id=delivery.task_id, url=delivery.url, status=status)
        return None

    async def aclose(self) -> None:
        """Stop delivering (what waits is dropped); close the client if it is ours."""
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if self._own_http:
            await self._http.aclose()


def _headers(config: a2a.TaskPushNotificationConfig) -> dict[str, str]:
    headers: dict[str, str] = {}
    if config.token:
        headers["X-A2A-Notification-Token"] = config.token
    auth = config.authentication
    if config.HasField("authentication") and auth.scheme and auth.credentials:
        headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
    return headers


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0  # an HTTP date: the backoff's own pause instead
