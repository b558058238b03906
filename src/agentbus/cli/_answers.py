"""Answering the questions skills ask: at a prompt, from ``--answer``, or ``agentbus answer``."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final

import click
import orjson

from agentbus._exceptions import InputRequired, QuestionDeclined, RemoteError
from agentbus.cli._context import client_bus, client_id_option, print_json, run_async
from agentbus.envelopes import Question, ResponseEnvelope

__all__ = ["ASKED_EXIT", "answer", "answerer", "converse", "loose_json", "show_question"]

ASKED_EXIT: Final = 5
"""The exit status of a command left with a question nobody here answered."""

_YES: Final = frozenset({"y", "yes", "true", "1"})
_NO: Final = frozenset({"n", "no", "false", "0"})
_DECLINE: Final = "!decline"


def answerer(given: tuple[str, ...]) -> Callable[[Question], Awaitable[Any]] | None:
    """Answers for ``request``'s questions: the ``--answer`` values in order, then a prompt
    while standard input is a terminal; None when neither can answer (no answers given,
    no terminal): the question is then printed and the command ends ``ASKED_EXIT``."""
    pending = list(given)
    if not pending and not sys.stdin.isatty():
        return None

    async def answer_it(question: Question) -> Any:
        if question.rejected is not None:
            errors = "; ".join(f"{e['field']}: {e['error']}" for e in question.rejected["errors"])
            click.echo(
                f"the answer {question.rejected['answer']!r} was refused: {errors}", err=True
            )
        if pending:
            return _parsed(pending.pop(0), question)
        if not sys.stdin.isatty():
            raise _Unanswered(question)
        click.echo(f"{question.asker} asks: {question.text}", err=True)
        click.echo(f"  (an answer of {_schema_hint(question)}; {_DECLINE} declines)", err=True)
        return _parsed(click.prompt("answer", err=True), question)

    return answer_it


class _Unanswered(Exception):
    def __init__(self, question: Question) -> None:
        super().__init__(question.text)
        self.question = question


def _parsed(text: str, question: Question) -> Any:
    # Text for a string answer, yes/no for a boolean, JSON for the rest; what does not
    # parse goes as text, and the agent says why it does not fit.
    if text.strip() == _DECLINE:
        raise QuestionDeclined(f"declined: {question.text}")
    kind = question.answer_schema.get("type")
    if kind == "string":
        return text
    if kind == "boolean" and text.strip().lower() in _YES | _NO:
        return text.strip().lower() in _YES
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _schema_hint(question: Question) -> str:
    schema = question.answer_schema
    if "enum" in schema:
        return "one of " + ", ".join(orjson.dumps(v).decode() for v in schema["enum"])
    if schema.get("type") in ("string", "boolean", "integer", "number"):
        return f"type {schema['type']}"
    return f"JSON fitting {orjson.dumps(schema).decode()}"


def show_question(ctx: click.Context, question: Question) -> None:
    """Print the question left open, how to answer it, and end with ``ASKED_EXIT``."""
    print_json({"input_required": question.model_dump(mode="json")})
    click.echo(
        f"{question.asker} asks: {question.text}\n"
        f"  answer it: agentbus answer {question.question_id} 'ANSWER'",
        err=True,
    )
    ctx.exit(ASKED_EXIT)


async def converse(
    ctx: click.Context,
    ask: Callable[[Callable[[Question], Awaitable[Any]] | None], Awaitable[ResponseEnvelope]],
    given: tuple[str, ...],
) -> ResponseEnvelope | None:
    """Run ``ask`` with the answerer of ``given``; print an error envelope (exit 1) or an
    unanswered question (exit ``ASKED_EXIT``) and return None."""
    try:
        return await ask(answerer(given))
    except (InputRequired, _Unanswered) as left:
        show_question(ctx, left.question)
    except RemoteError as exc:
        print_json(exc.envelope.model_dump(mode="json"))
        ctx.exit(1)
    return None


@click.command()
@click.argument("question_id")
@click.argument("value", metavar="ANSWER", required=False)
@click.option("--decline", is_flag=True, help="Decline to answer: the skill's ask raises.")
@click.option("--answer", "answers", multiple=True, metavar="JSON", help="Answers to what follows.")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=30.0, show_default=True)
@click.option("--result", "result_only", is_flag=True, help="Print only the result.")
@client_id_option
@click.pass_context
@run_async
async def answer(
    ctx: click.Context,
    question_id: str,
    value: str | None,
    decline: bool,
    answers: tuple[str, ...],
    timeout: float,
    result_only: bool,
) -> None:
    """Answer the question QUESTION_ID a skill asked, and print what the work does next.

    ANSWER is JSON (text that is not JSON goes as a string). The work's result is
    printed as `agentbus request` prints it; a further question is answered from
    --answer, or at a prompt on a terminal, or printed, and the exit status is then 5.
    An answer to a question that is not open (unknown, expired, answered) says why.
    """
    if (value is None) == (not decline):
        raise click.UsageError("give either ANSWER or --decline")
    async with client_bus(ctx) as bus:

        async def ask(
            on_question: Callable[[Question], Awaitable[Any]] | None,
        ) -> ResponseEnvelope:
            parsed = None if value is None else loose_json(value)
            return await bus.answer(
                question_id, parsed, decline=decline, timeout=timeout, on_question=on_question
            )

        reply = await converse(ctx, ask, answers)
    if reply is not None:
        print_json(reply.result if result_only else reply.model_dump(mode="json"))


def loose_json(text: str) -> Any:
    """``text`` as JSON, or as the string it is when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
