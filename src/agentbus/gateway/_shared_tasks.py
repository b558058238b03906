"""Tasks shared by every gateway process, on Redis: the a2a-sdk's cluster seams.

``AGENTBUS_GATEWAY_TASK_STORE=redis://host:6379/0`` (the ``redis`` extra) gives the
gateway ``RedisTaskStore`` and ``RedisTaskEvents``, the SDK's ``VersionedTaskStore`` and
``TaskEventStream``: the request handler then serves ``GetTask``, ``ListTasks``,
``CancelTask`` and ``SubscribeToTask`` for a task another process runs, from Redis.

- A task is a hash, ``<prefix>:task:<owner>:<id>``: its version (a write count), the task
  (protobuf bytes) and whether it is over. A write is one script: it compares the version
  it was derived from with the stored one (the SDK's compare-and-swap: a stale write
  raises ``ConcurrentTaskModificationError``; a cancel overwrites any task not yet over),
  stores the task, and appends the event that made it, with the new version, to the
  task's event stream ``<prefix>:events:<id>`` (a Redis stream): one round trip.
- ``RedisTaskEvents.subscribe`` reads that stream from its start, so an event written
  between a subscriber's snapshot and its first read is not lost; ``publish`` has nothing
  left to do (as the SDK's own database stream). A subscription ends with the task's end
  (the SDK stops at it), or when the stream has expired.
- Each owner's tasks are indexed by their last write in ``<prefix>:index:<owner>`` (a
  sorted set) for ``ListTasks``, which filters and pages as the SDK's in-memory store does.
- A task id this process made (``new_id``, the handler's task id generator) names no task
  in Redis before this process writes it: until then, reading it is not asked of Redis (a
  new task is read three times before its first write).
- A finished task and its events expire ``retention`` seconds after its last write; one
  waiting for input, ``waiting_expiry`` seconds after; one still running after
  ``open_expiry`` seconds (its process died) too. An owner keeps ``size``
  tasks at most: over it, its oldest finished tasks go first.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Final

from a2a.server.cluster import (
    ConcurrentTaskModificationError,
    StoredTask,
    TaskEventStream,
    TaskVersion,
    VersionedEvent,
    VersionedTaskStore,
)
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2 as a2a
from a2a.utils.proto_utils import to_stream_response

from agentbus._config import mask_url
from agentbus._exceptions import ConfigurationError
from agentbus.gateway._tasks import TERMINAL, WAITING

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = ["NewTaskIds", "RedisTaskEvents", "RedisTaskStore", "connect", "reachable"]

# KEYS: the task, its events, its owner's index. ARGV: the version the task was derived
# from (0: none, a first write), 1 for a cancel, the task, 1 if it is over, the event
# ('' for none), seconds to keep it, its index score (ms), its id, the most tasks an owner
# keeps, the prefix of the owner's task keys, the prefix of event keys.
# Returns the new version, or -1 for a stale write (a cancel: the task is absent or over).
# Over the bound, the owner's oldest finished tasks go (open ones stay, as in memory).
_SAVE: Final = """
local stored = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
local version
if ARGV[2] == '1' then
  if stored == 0 or redis.call('HGET', KEYS[1], 'x') == '1' then return -1 end
  version = stored + 1
elseif ARGV[1] == '0' then
  if stored ~= 0 then return -1 end
  version = 1
else
  if stored ~= tonumber(ARGV[1]) then return -1 end
  version = stored + 1
end
redis.call('HSET', KEYS[1], 'v', version, 't', ARGV[3], 'x', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[6])
if ARGV[5] ~= '' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', '10000', '*', 'v', version, 'e', ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
end
redis.call('ZADD', KEYS[3], ARGV[7], ARGV[8])
redis.call('EXPIRE', KEYS[3], ARGV[6])
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[9])
if excess > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, excess + 255)) do
    if excess == 0 then break end
    if redis.call('HGET', ARGV[10] .. id, 'x') ~= '0' then
      redis.call('DEL', ARGV[10] .. id, ARGV[11] .. id)
      redis.call('ZREM', KEYS[3], id)
      excess = excess - 1
    end
  end
end
return version
"""
_BLOCK_MS: Final = 5000  # a subscriber's wait for its next event, a read at a time
_UNBORN: Final = 4096  # new task ids remembered until written (older ones: asked of Redis)


def connect(url: str) -> Redis:
    """Return a Redis client for ``url`` (``redis://``, ``rediss://``, ``unix://``).

    Raises:
        ImportError: redis-py is not installed (the ``redis`` extra).
    """
    from redis.asyncio import Redis

    client: Redis = Redis.from_url(url)
    return client


async def reachable(redis: Redis, url: str) -> None:
    """Return once ``redis`` (at ``url``) answers.

    Raises:
        ConfigurationError: it does not (the message names the URL, its password masked).
    """
    from redis.exceptions import RedisError

    try:
        await redis.ping()
    except (OSError, RedisError) as exc:
        raise ConfigurationError(
            f"the task store {mask_url(url)} cannot be reached: {exc}"
        ) from exc


class RedisTaskStore(VersionedTaskStore):
    """The SDK's versioned task store on Redis, shared by every gateway process.

    Args:
        redis: The client (its connection pool is shared with ``RedisTaskEvents``).
        prefix: The keys' prefix (the gateway uses ``<exchange>:a2a``).
        size: The most tasks kept for one owner (caller identity); the oldest finished
            ones go first.
        retention: Seconds a finished task can still be read back.
        open_expiry: Seconds a running task is kept after its last write.
        waiting_expiry: Seconds a task waiting for input is kept after its last write.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str,
        size: int,
        retention: float,
        open_expiry: float,
        waiting_expiry: float,
        owner_resolver: OwnerResolver = resolve_user_scope,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._size = size
        self._retention = max(1, round(retention))
        self._open_expiry = max(1, round(open_expiry))
        self._waiting_expiry = max(1, round(waiting_expiry))
        self._owner = owner_resolver
        self._save: AsyncScript = redis.register_script(_SAVE)
        self._unborn: OrderedDict[str, None] = OrderedDict()

    def __repr__(self) -> str:
        return f"<RedisTaskStore {self._prefix}>"

    async def save(
        self,
        task: a2a.Task,
        *,
        event: Event | None,
        prev: a2a.Task | None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        """Store ``task`` if the stored version is still ``prev_version``, with ``event``.

        Raises:
            ConcurrentTaskModificationError: another write came first.
        """
        del prev
        owner = self._owner(context)
        over = task.status.state in TERMINAL
        cancel = task.status.state == a2a.TaskState.TASK_STATE_CANCELED
        data = to_stream_response(event).SerializeToString() if event is not None else b""
        keys = [self._task_key(owner, task.id), self.events_key(task.id), self._index(owner)]
        args: list[bytes | int | str] = [
            _version(prev_version),
            int(cancel),
            task.SerializeToString(),
            int(over),
            data,
            self._expiry(task.status.state),
            int(time.time() * 1000),
            task.id,
            self._size,
            self._task_key(owner, ""),
            self.events_key(""),
        ]
        self._unborn.pop(task.id, None)
        version = int(await self._save(keys=keys, args=args))
        if version < 0:
            raise ConcurrentTaskModificationError(task.id)
        return TaskVersion(version)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        """Return the caller's task ``task_id`` with its version, or None."""
        if task_id in self._unborn:
            return None  # made here, not written yet: Redis has none
        row: list[Any] = await self._redis.hmget(
            self._task_key(self._owner(context), task_id), ["v", "t"]
        )
        version, data = row
        if version is None or data is None:
            return None
        return StoredTask(a2a.Task.FromString(data), TaskVersion(int(version)))

    async def list(
        self, params: a2a.ListTasksRequest, context: ServerCallContext
    ) -> a2a.ListTasksResponse:
        """List the caller's tasks: filtered, ordered and paged as the SDK's in-memory store."""
        owner = self._owner(context)
        index = self._index(owner)
        members: list[Any] = await self._redis.zrange(index, 0, -1)
        ids = [member.decode() for member in members]
        found = InMemoryTaskStore()
        gone = []
        if ids:
            async with self._redis.pipeline(transaction=False) as pipe:
                for task_id in ids:
                    pipe.hget(self._task_key(owner, task_id), "t")
                rows: list[Any] = await pipe.execute()
            for task_id, data in zip(ids, rows, strict=True):
                if data is None:
                    gone.append(task_id)
                else:
                    await found.save(a2a.Task.FromString(data), context)
        if gone:
            await self._redis.zrem(index, *gone)  # expired: no longer listed
        return await found.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the caller's task ``task_id`` and its events."""
        owner = self._owner(context)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(self._task_key(owner, task_id), self.events_key(task_id))
            pipe.zrem(self._index(owner), task_id)
            await pipe.execute()

    def new_id(self) -> str:
        """Return a new task id, known to name no stored task until it is written here."""
        task_id = str(uuid.uuid4())
        self._unborn[task_id] = None
        if len(self._unborn) > _UNBORN:
            self._unborn.popitem(last=False)
        return task_id

    def _expiry(self, state: a2a.TaskState) -> int:
        if state in TERMINAL:
            return self._retention
        return self._waiting_expiry if state in WAITING else self._open_expiry

    def events_key(self, task_id: str) -> str:
        """Return the key of the event stream of task ``task_id``."""
        return f"{self._prefix}:events:{task_id}"

    def _task_key(self, owner: str, task_id: str) -> str:
        return f"{self._prefix}:task:{owner}:{task_id}"

    def _index(self, owner: str) -> str:
        return f"{self._prefix}:index:{owner}"


class NewTaskIds(IDGenerator):
    """The request handler's task ids: ``store``'s new ones."""

    def __init__(self, store: RedisTaskStore) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"<NewTaskIds {self._store!r}>"

    def generate(self, context: IDGeneratorContext) -> str:
        """Return a new task id."""
        return self._store.new_id()


class RedisTaskEvents(TaskEventStream):
    """The SDK's task event stream, read from what ``RedisTaskStore`` writes."""

    def __init__(self, redis: Redis, store: RedisTaskStore) -> None:
        self._redis = redis
        self._store = store

    def __repr__(self) -> str:
        return f"<RedisTaskEvents {self._store!r}>"

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Nothing to do: the store appended the event with the write that it made."""
        del task_id, event

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        """Yield the events of task ``task_id`` newer than ``after``, as they come."""
        key = self._store.events_key(task_id)
        last = "0-0"
        while True:
            answer: Any = await self._redis.xread({key: last}, count=100, block=_BLOCK_MS)
            if not answer and not await self._redis.exists(key):
                return  # the task and its events expired: its process died long ago
            for _, entries in answer or ():
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    version = TaskVersion(int(fields[b"v"]))
                    if not version.is_after(after):
                        continue
                    response = a2a.StreamResponse.FromString(fields[b"e"])
                    yield VersionedEvent(event=_event(response), version=version)

    async def destroy(self, task_id: str) -> None:
        """Nothing to do: a task's events expire with it."""
        del task_id


def _version(version: TaskVersion) -> int:
    if version.is_missing:
        return 0
    value = version._value  # the SDK keeps it private; the store made it an int
    if not isinstance(value, int):
        raise TypeError(f"a version of another store: {version!r}")
    return value


def _event(response: a2a.StreamResponse) -> Event:
    which = response.WhichOneof("payload")
    if which == "task":
        return response.task
    if which == "message":
        return response.message
    if which == "status_update":
        return response.status_update
    if which == "artifact_update":
        return response.artifact_update
    raise ValueError(f"an event of no known kind: {which!r}")
