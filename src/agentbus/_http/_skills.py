"""A skill known only by its JSON Schemas: a remote agent's skill, an MCP server's tool."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbus._exceptions import InvalidParameters
from agentbus.agents import SkillMark, SkillSpec

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["SchemaSkill"]


class SchemaSkill(SkillSpec):
    """A skill with JSON Schemas and no Python signature; ``run`` forwards the call.

    Built on a placeholder method without parameters: the schemas and ``bind`` come from
    the remote side instead. A subclass says where ``run`` forwards to.

    Args:
        mark: The skill's name (its action) and description.
        parameters: The JSON Schema of its parameters, which ``validator`` checks.
        result: The JSON Schema of its result ({}: anything).
        validator: A ``jsonschema`` validator of ``parameters``.
    """

    def __init__(
        self,
        mark: SkillMark,
        *,
        parameters: dict[str, Any],
        result: dict[str, Any],
        validator: Validator,
    ) -> None:
        super().__init__(_placeholder, mark)
        self._parameters = parameters
        self._result_schema = result
        self._validator = validator

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return self._parameters

    @property
    def result_schema(self) -> dict[str, Any]:
        return self._result_schema

    def bind(self, parameters: dict[str, Any]) -> dict[str, Any]:
        error = next(iter(self._validator.iter_errors(parameters)), None)
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path) or "parameters"
            raise InvalidParameters(
                f"invalid parameters for {self.name!r}: {where}: {error.message}",
                details={"skill": self.name, "errors": [{"field": where, "error": error.message}]},
            )
        return parameters


async def _placeholder(agent: Any) -> Any:  # pragma: no cover - a subclass's run forwards
    raise NotImplementedError
