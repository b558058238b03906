"""Webhooks shared by every gateway process, on Redis: the SDK's push notification config store.

With a shared task store, the process that runs a task's next turn (a follow-up's answer,
say) is not always the one that took its webhook: each finds them here. A task's
webhooks are a hash ``<prefix>:push:<task id>``, one field ``<owner> NUL <config id>``
each (the config, protobuf bytes), kept ``expiry`` seconds after the last registration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks import PushNotificationConfigStore
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.types import a2a_pb2 as a2a

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisPushConfigs"]

_SEPARATOR = b"\x00"


class RedisPushConfigs(PushNotificationConfigStore):
    """The webhooks registered for tasks, read by every gateway process.

    Args:
        redis: The client (the task store's).
        prefix: The keys' prefix (the gateway uses ``<exchange>:a2a``).
        expiry: Seconds a task's webhooks are kept after the last one registered.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str,
        expiry: float,
        owner_resolver: OwnerResolver = resolve_user_scope,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._expiry = max(1, round(expiry))
        self._owner = owner_resolver

    def __repr__(self) -> str:
        return f"<RedisPushConfigs {self._prefix}>"

    async def set_info(
        self,
        task_id: str,
        notification_config: a2a.TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> a2a.TaskPushNotificationConfig:
        """Keep the caller's webhook for ``task_id`` (replacing one with the same id)."""
        stored = normalize_push_notification_config(task_id, notification_config)
        key = self._key(task_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, self._field(context, stored.id), stored.SerializeToString())
            pipe.expire(key, self._expiry)
            await pipe.execute()
        return stored

    async def get_info(
        self, task_id: str, context: ServerCallContext
    ) -> list[a2a.TaskPushNotificationConfig]:
        """Return the caller's webhooks for ``task_id``."""
        mine = self._field(context, "")
        rows: dict[Any, Any] = await self._redis.hgetall(self._key(task_id))
        return [
            a2a.TaskPushNotificationConfig.FromString(value)
            for field, value in sorted(rows.items())
            if field.startswith(mine)
        ]

    async def get_info_for_dispatch(self, task_id: str) -> list[a2a.TaskPushNotificationConfig]:
        """Return every webhook for ``task_id``, whoever registered it."""
        rows: dict[Any, Any] = await self._redis.hgetall(self._key(task_id))
        return [a2a.TaskPushNotificationConfig.FromString(rows[f]) for f in sorted(rows)]

    async def delete_info(
        self, task_id: str, context: ServerCallContext, config_id: str | None = None
    ) -> None:
        """Forget the caller's webhook ``config_id`` for ``task_id`` (None: all of them)."""
        key = self._key(task_id)
        if config_id is not None:
            await self._redis.hdel(key, self._field(context, config_id))
            return
        mine = self._field(context, "")
        fields: list[Any] = await self._redis.hkeys(key)
        gone = [field for field in fields if field.startswith(mine)]
        if gone:
            await self._redis.hdel(key, *gone)

    def _key(self, task_id: str) -> str:
        return f"{self._prefix}:push:{task_id}"

    def _field(self, context: ServerCallContext, config_id: str) -> bytes:
        return self._owner(context).encode() + _SEPARATOR + config_id.encode()
