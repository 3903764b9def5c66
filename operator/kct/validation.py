"""How a pydantic validation error reads to a user: the one formatter for specs, config files and flags.

A user fixes a problem by finding the field, so every problem becomes `where: what (got value)`, with
`where` a dotted path in the document's own (camelCase) names under a prefix that says which document
(`spec`, `spec.receiver`, a file path). pydantic's "Value error, " boilerplate is dropped, and the value is
shown only when it is a scalar the message does not already quote.
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["format_validation_error"]


def format_validation_error(error: ValidationError, prefix: str = "spec") -> str:
    """`spec.match.clientId: 'a(' is not a valid RE2 regular expression: missing ): a(` (problems joined by `; `)."""
    lines = []
    for problem in error.errors():
        location = ".".join([part for part in (prefix,) if part] + [str(part) for part in problem["loc"]])
        message = problem["msg"].removeprefix("Value error, ")
        value = problem.get("input")
        shown = "" if isinstance(value, dict | list) or value is None or repr(value) in message else f" (got {value!r})"
        lines.append(f"{location or '(top level)'}: {message}{shown}")
    return "; ".join(lines)
