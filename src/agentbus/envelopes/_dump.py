"""The seam onto pydantic's internals: an envelope as the dict ``model_dump()`` gives, made fast.

``model_dump()`` copies every value deeply (a 1 MB payload is copied before orjson
writes it) and runs pydantic's serializer per field. The wire models need none of
that: they have no aliases, no custom serializers and no computed fields, only
``exclude_if`` on optional metadata. So this module reads ``__dict__`` (the field
values by name) and ``__pydantic_extra__`` (the unknown fields kept) directly and
lets orjson walk the values by reference. ``tests/unit/test_codec_contract.py``
fails the day this stops equalling ``model_dump`` or a wire model gains what the
shortcut would miss; ``bench/suite.py --only seams`` measures the gain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from agentbus.envelopes._models import _WireModel

__all__ = ["unserializable", "wire_dict"]

_Plan = tuple[tuple[tuple[str, Callable[[Any], bool]], ...], tuple[str, ...]]
_PLANS: dict[type[BaseModel], _Plan] = {}


def unserializable(value: object) -> Any:
    # orjson writes what it knows natively; a pydantic model in a payload (a handler's
    # result, say) is written as its model_dump, as model_dump of the envelope would.
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, tuple):  # a named tuple: orjson writes only plain tuples
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _plan(cls: type[BaseModel]) -> _Plan:
    # Per model class: the fields left out when their exclude_if says so, and the fields
    # holding a nested wire model (metadata, payload).
    excluded = tuple(
        (name, info.exclude_if)
        for name, info in cls.model_fields.items()
        if info.exclude_if is not None
    )
    nested = tuple(
        name
        for name, info in cls.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, _WireModel)
    )
    plan = _PLANS[cls] = (excluded, nested)
    return plan


def wire_dict(model: _WireModel) -> dict[str, Any]:
    # What model_dump() gives, but shallow: field values go in by reference (orjson walks
    # them), so a 1 MB payload is not copied first. Nested wire models (metadata, payload)
    # become dicts the same way; unknown fields the model kept go last, as model_dump does.
    fields = model.__dict__.copy()
    excluded, nested = _PLANS.get(type(model)) or _plan(type(model))
    for name, exclude_if in excluded:
        if exclude_if(fields[name]):
            del fields[name]
    for name in nested:
        value = fields[name]
        if isinstance(value, _WireModel):
            fields[name] = wire_dict(value)
    extra = model.__pydantic_extra__
    if extra:
        fields.update(extra)
    return fields
