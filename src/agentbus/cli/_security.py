"""The CLI's security options: TLS files, the login mechanism and sender verification.

Each option overrides its ``AGENTBUS_*`` setting; ``security_options`` collects the given
ones for the command group, which applies them over the environment's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

import click

__all__ = ["security_options", "security_overrides"]

F = TypeVar("F", bound=Callable[..., Any])
_KEY: Final = "agentbus.security"


def _keep(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value is not None and param.name is not None:
        ctx.meta.setdefault(_KEY, {})[param.name] = value


def _option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    return click.option(*decls, expose_value=False, callback=_keep, **attrs)


_OPTIONS: Final = (
    _option(
        "--tls-ca-file",
        metavar="PEM",
        type=click.Path(dir_okay=False),
        help="CAs that sign the broker's certificate (amqps://) [env AGENTBUS_TLS_CA_FILE].",
    ),
    _option(
        "--tls-cert-file",
        metavar="PEM",
        type=click.Path(dir_okay=False),
        help="This client's certificate [env AGENTBUS_TLS_CERT_FILE].",
    ),
    _option(
        "--tls-key-file",
        metavar="PEM",
        type=click.Path(dir_okay=False),
        help="The certificate's private key [env AGENTBUS_TLS_KEY_FILE].",
    ),
    _option(
        "--auth-mechanism",
        type=click.Choice(["auto", "plain", "external"]),
        help="Login: URL user (plain) or certificate (external) [env AGENTBUS_AUTH_MECHANISM].",
    ),
    _option(
        "--verify-sender/--no-verify-sender",
        default=None,
        help="Check sender_id against the AMQP user_id [env AGENTBUS_VERIFY_SENDER; "
        "default: on unless the user is guest].",
    ),
)


def security_options(func: F) -> F:
    """Add the security options to a command; their values go to ``security_overrides``."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def security_overrides(ctx: click.Context) -> dict[str, Any]:
    """The settings the security options were given on the command line."""
    overrides: dict[str, Any] = ctx.meta.get(_KEY, {})
    return dict(overrides)
