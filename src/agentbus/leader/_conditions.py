"""A step's condition: a small JSON-logic expression over earlier results, never ``eval``.

``{"==": [{"var": "check.verdict"}, "ok"]}`` holds when the result of ``check`` has
``verdict`` ``"ok"``. The operators, as JSON-logic defines them (jsonlogic.com): ``var``
(a result, or a path into it: ``"check.items.0"``; a missing one is null, or the second
argument), ``==``, ``!=`` (strict: no JSON-logic type coercion), ``<``, ``<=``, ``>``,
``>=`` (numbers, or strings with strings), ``!``, ``!!``, ``and``, ``or`` (their last or
deciding argument, as JSON-logic's), ``in`` (a value in a list, or a string in a string),
``if`` (``[condition, then, else]``). Anything else is refused when the plan is validated:
the language is fixed, closed, and evaluates in time linear in its size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

__all__ = ["check_condition", "evaluate", "truthy"]

_MAX_NODES: Final = 1_000

Lookup = Callable[[str], Any]
"""The value a ``var`` names: a result, or a path into one (KeyError: missing)."""


def truthy(value: Any) -> bool:
    """JSON-logic's truth: false, null, 0, "" and [] are false; anything else is true."""
    return not (value is None or value is False or value == 0 or value in ("", []))


def check_condition(expression: Any) -> list[str]:
    """Return the references a condition reads (``var`` names).

    Raises:
        ValueError: not a condition: an unknown operator, a malformed one, too big.
    """
    seen = list(_walk(expression, [0]))
    return [name for name in seen if name]


def evaluate(expression: Any, lookup: Lookup) -> Any:
    """The value of a condition (checked by ``check_condition``) over ``lookup``."""
    if isinstance(expression, list):
        return [evaluate(item, lookup) for item in expression]
    if not isinstance(expression, dict):
        return expression
    ((operator, argument),) = expression.items()
    if operator == "var":
        return _var(argument, lookup)
    arguments = argument if isinstance(argument, list) else [argument]
    lazy = _LAZY.get(operator)
    if lazy is not None:
        return lazy(arguments, lookup)
    return _EAGER[operator](*(evaluate(item, lookup) for item in arguments))


def _var(argument: Any, lookup: Lookup) -> Any:
    name, default = (argument, None) if not isinstance(argument, list) else [*argument, None][:2]
    try:
        return lookup(str(name))
    except KeyError:
        return default


def _and(arguments: list[Any], lookup: Lookup) -> Any:
    value: Any = True
    for item in arguments:
        value = evaluate(item, lookup)
        if not truthy(value):
            return value
    return value


def _or(arguments: list[Any], lookup: Lookup) -> Any:
    value: Any = False
    for item in arguments:
        value = evaluate(item, lookup)
        if truthy(value):
            return value
    return value


def _if(arguments: list[Any], lookup: Lookup) -> Any:
    condition, then, otherwise = [*arguments, None, None, None][:3]
    return evaluate(then if truthy(evaluate(condition, lookup)) else otherwise, lookup)


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[..., bool]:
    def ordered(left: Any, right: Any, third: Any = None) -> bool:
        numbers = all(_is_number(v) for v in (left, right))
        strings = all(isinstance(v, str) for v in (left, right))
        if not (numbers or strings):
            return False
        if third is not None:  # JSON-logic's between: a < b < c
            return compare(left, right) and ordered(right, third)
        return compare(left, right)

    return ordered


def _same(left: Any, right: Any) -> bool:
    # Strict: 1 == 1.0, but "1" != 1 and true != 1 (JSON-logic's == would coerce).
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    return type(left) is type(right) and bool(left == right)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _contains(item: Any, container: Any) -> bool:
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    return isinstance(container, list) and item in container


_LAZY: Final[dict[str, Callable[[list[Any], Lookup], Any]]] = {
    "and": _and,
    "or": _or,
    "if": _if,
}
_EAGER: Final[dict[str, Callable[..., Any]]] = {
    "==": lambda a, b: _same(a, b),
    "!=": lambda a, b: not _same(a, b),
    "<": _ordered(lambda a, b: a < b),
    "<=": _ordered(lambda a, b: a <= b),
    ">": _ordered(lambda a, b: a > b),
    ">=": _ordered(lambda a, b: a >= b),
    "!": lambda a: not truthy(a),
    "!!": truthy,
    "in": _contains,
}
_ARITY: Final = {
    "==": (2, 2),
    "!=": (2, 2),
    "<": (2, 3),
    "<=": (2, 3),
    ">": (2, 2),
    ">=": (2, 2),
    "!": (1, 1),
    "!!": (1, 1),
    "in": (2, 2),
    "if": (1, 3),
}


def _walk(expression: Any, count: list[int]) -> Iterator[str]:
    count[0] += 1
    if count[0] > _MAX_NODES:
        raise ValueError(f"the condition has more than {_MAX_NODES} parts")
    if isinstance(expression, list):
        for item in expression:
            yield from _walk(item, count)
        return
    if not isinstance(expression, dict):
        return
    if len(expression) != 1:
        raise ValueError(f"a condition's operation has one operator, not {sorted(expression)}")
    ((operator, argument),) = expression.items()
    if operator == "var":
        yield _var_name(argument)
        return
    if operator not in _LAZY and operator not in _EAGER:
        raise ValueError(f"unknown operator {operator!r} in a condition")
    arguments = argument if isinstance(argument, list) else [argument]
    low, high = _ARITY.get(operator, (1, 1_000))
    if not low <= len(arguments) <= high:
        raise ValueError(f"{operator!r} takes {low} to {high} arguments, not {len(arguments)}")
    for item in arguments:
        yield from _walk(item, count)


def _var_name(argument: Any) -> str:
    name = argument[0] if isinstance(argument, list) and argument else argument
    if not isinstance(name, str) or not name:
        raise ValueError(f"a var names a result, not {name!r}")
    return name
