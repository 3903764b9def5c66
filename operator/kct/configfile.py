"""Config files of the programs `kct` runs (`kct receiver --config`, `kct aggregate --config`).

One error type for every config problem a user sees at start-up, and one way to read a YAML document and
validate it against a program's model: JSON semantics (arrays fill tuples, as in the ConfigMap the
operator renders), errors naming the file and the key (`kct.validation`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kct.validation import format_validation_error

__all__ = ["ConfigError", "read_yaml", "validate_document"]

ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration file, or the environment it names, is invalid; the message says where and why."""


def read_yaml(path: str | os.PathLike[str]) -> object:
    """The parsed YAML document at `path`; ConfigError when it cannot be read or parsed."""
    import yaml

    p = Path(path)
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None


def validate_document(model: type[ModelT], data: object, source: str, *, strict: bool | None = None) -> ModelT:
    """`data` (parsed YAML/JSON) as `model`; ConfigError naming `source` and each bad key. `strict=False`
    accepts scalars given as strings (for documents whose values come from `${ENV}` expansion)."""
    try:
        return model.model_validate_json(json.dumps(data), strict=strict)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
