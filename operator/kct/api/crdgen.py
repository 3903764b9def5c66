"""Generate CustomResourceDefinitions from pydantic models.

Why our own generator: the API server needs a *structural* schema (every node typed, no `$ref`, no
`anyOf` with `null`, no `additionalProperties: false` next to `properties`) while pydantic emits JSON
Schema with shared `$defs` and `X | None` as `anyOf [..., {type: null}]`. `structural_schema` walks
`model_json_schema()` and rewrites it: references inlined, optional fields collapsed to their
non-null branch (absent = unset, Kubernetes drops nulls anyway), titles dropped, field docstrings kept
as descriptions so `kubectl explain` is useful. CEL rules ride along as `x-kubernetes-validations`
from the models' `json_schema_extra`. Nothing here knows about a particular kind: a `CrdDefinition`
names the models and the presentation (names, printer columns, root-level rules).
"""

from __future__ import annotations

import copy
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pydantic import BaseModel

__all__ = ["CrdDefinition", "PrinterColumn", "render_all", "render_crd", "render_crd_yaml", "structural_schema"]

_DROPPED_KEYS = frozenset({"title"})


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry of `kubectl get`."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str = ""
    priority: int = 0

    def to_kube(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class CrdDefinition:
    """Everything needed to render one namespaced or cluster-scoped CRD with one served version."""

    group: str
    version: str
    kind: str
    plural: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel] | None = None
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    printer_columns: tuple[PrinterColumn, ...] = ()
    root_validations: tuple[Mapping[str, Any], ...] = ()
    description: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def file_name(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


def _clean_description(text: str) -> str:
    paragraphs = textwrap.dedent(text).strip().split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines() if line.strip()) for p in paragraphs)


def _inline_ref(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """`{"$ref": ...}` replaced by the referenced definition; keys next to the reference (the field's own
    description, default) win over the model's."""
    if "$ref" not in node:
        return node
    rest = dict(node)
    target: dict[str, Any] = copy.deepcopy(defs[rest.pop("$ref").rsplit("/", 1)[-1]])
    target.update(rest)
    return target


def _collapse_optional(node: dict[str, Any], path: str) -> dict[str, Any]:
    """`anyOf: [X, null]` (pydantic's `X | None`) collapsed into X: structural schemas have no unions."""
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in node and not node.get("x-kubernetes-int-or-string"):
            rest = dict(node)
            branches = [b for b in rest.pop(combinator) if b != {"type": "null"}]
            if len(branches) != 1:
                raise ValueError(f"{path}: {combinator} with {len(branches)} non-null branches is not structural")
            node = dict(branches[0])
            node.update(rest)
            if "$ref" in node:  # the caller resolves the reference, then what is left of the node
                return node
    return node


def _resolve(node: Any, defs: Mapping[str, Any], path: str) -> Any:
    """A pydantic JSON schema node as an OpenAPI v3.0 structural schema node (references inlined)."""
    if isinstance(node, list):
        return [_resolve(item, defs, f"{path}[{i}]") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    node = _collapse_optional(_inline_ref(dict(node), defs), path)
    if "$ref" in node:  # the one branch left was a reference
        return _resolve(node, defs, path)
    out: dict[str, Any] = {}
    for key, value in node.items():
        _convert_key(out, key, value, defs, path)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "type" not in out and not {"x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string"} & set(out):
        raise ValueError(f"{path}: schema node has no type, which a structural schema requires")
    return {key: out[key] for key in sorted(out, key=_key_rank)}


def _convert_key(out: dict[str, Any], key: str, value: Any, defs: Mapping[str, Any], path: str) -> None:
    """Put one JSON Schema keyword into `out` as the API server wants it (or leave it out)."""
    if key in _DROPPED_KEYS:
        return
    if key == "default" and (value is None or isinstance(value, dict)):
        # No object defaults: the API server would freeze today's defaults (nulls included) into
        # every stored object; absent objects are defaulted by the models when parsed instead.
        return
    if key == "additionalProperties" and value is False:
        return  # unknown fields are pruned, or refused by strict field validation
    if key == "description" and isinstance(value, str):
        out[key] = _clean_description(value)
    elif key == "properties":
        out[key] = {name: _resolve(sub, defs, f"{path}.{name}") for name, sub in value.items()}
    elif key in ("items", "additionalProperties") and isinstance(value, dict):
        out[key] = _resolve(value, defs, f"{path}.{key}")
    elif key == "const":
        out["enum"] = [value]
    elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
        # JSON Schema 2020-12 (pydantic's `gt`/`lt`) -> OpenAPI v3.0 (a bound plus a boolean).
        out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
        out[key] = True
    else:
        out[key] = copy.deepcopy(value)


# Keys in the order a reader wants them: what it is, then constraints, then children, then CEL.
_KEY_ORDER = ("type", "description", "default", "enum", "format")


def _key_rank(key: str) -> tuple[int, str]:
    if key in _KEY_ORDER:
        return (_KEY_ORDER.index(key), key)
    if key in ("items", "properties", "additionalProperties", "required"):
        return (len(_KEY_ORDER) + 1, key)
    if key.startswith("x-kubernetes-"):
        return (len(_KEY_ORDER) + 2, key)
    return (len(_KEY_ORDER), key)


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema rewritten into a Kubernetes structural schema."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})
    resolved: dict[str, Any] = _resolve(schema, defs, model.__name__)
    return resolved


def render_crd(definition: CrdDefinition) -> dict[str, Any]:
    """The CustomResourceDefinition manifest as a dict."""
    spec_schema = structural_schema(definition.spec_model)
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec_schema,
    }
    version: dict[str, Any] = {"name": definition.version, "served": True, "storage": True}
    if definition.status_model is not None:
        status_schema = structural_schema(definition.status_model)
        status_schema.pop("required", None)  # the operator writes status piecemeal
        properties["status"] = status_schema
        version["subresources"] = {"status": {}}
    root: dict[str, Any] = {"type": "object"}
    if definition.description:
        root["description"] = _clean_description(definition.description)
    root["required"] = ["spec"]
    root["properties"] = properties
    if definition.root_validations:
        root["x-kubernetes-validations"] = [dict(rule) for rule in definition.root_validations]
    version["schema"] = {"openAPIV3Schema": root}
    if definition.printer_columns:
        version["additionalPrinterColumns"] = [c.to_kube() for c in definition.printer_columns]
    names: dict[str, Any] = {
        "kind": definition.kind,
        "listKind": f"{definition.kind}List",
        "plural": definition.plural,
        "singular": definition.kind.lower(),
    }
    if definition.short_names:
        names["shortNames"] = list(definition.short_names)
    if definition.categories:
        names["categories"] = list(definition.categories)
    metadata: dict[str, Any] = {"name": definition.name}
    if definition.labels:
        metadata["labels"] = dict(definition.labels)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": definition.group,
            "names": names,
            "scope": definition.scope,
            "versions": [version],
        },
    }


_HEADER = "# Generated by `kct crds generate` from the models in operator/kct/api/. Do not edit.\n"


def render_crd_yaml(definition: CrdDefinition) -> str:
    return _HEADER + yaml.safe_dump(render_crd(definition), sort_keys=False, width=100, allow_unicode=True)


def render_all(definitions: Sequence[CrdDefinition]) -> dict[str, str]:
    """File name -> YAML text for every definition."""
    return {d.file_name: render_crd_yaml(d) for d in definitions}
