"""Every (apiGroup, resource, verb) a rendered chart grants, with the reason written next to its rule.

The convention (helm/kct/templates): each RBAC rule starts with a comment block whose first line is
`# why: <reason>` (more `#` lines may continue it), right above its `- apiGroups:` line. helm keeps template
comments in its output, so the reason is read from the rendered manifests, after every `if` and `include`
has been applied: a rule that only some values render is checked exactly when it is rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["WHY", "Grant", "grants", "unjustified"]

WHY = "# why:"
_RULE_START = re.compile(r"^\s*- apiGroups:")
_DOCUMENT = re.compile(r"^---\s*$", re.MULTILINE)
_ROLE_KINDS = frozenset({"Role", "ClusterRole"})


@dataclass(frozen=True)
class Grant:
    """One verb on one resource of one API group, granted by the role `where` (kind/namespace/name)."""

    where: str
    api_group: str
    resource: str
    verb: str
    resource_names: tuple[str, ...]
    why: str  # empty: no `# why:` comment above the rule


def _reason(lines: list[str], rule_line: int) -> str:
    """The `# why:` text of the comment block right above `rule_line` ("" when there is none)."""
    block: list[str] = []
    index = rule_line - 1
    while index >= 0 and lines[index].strip().startswith("#"):
        block.insert(0, lines[index].strip())
        index -= 1
    for position, line in enumerate(block):
        if line.startswith(WHY):
            continuation = [rest.lstrip("#").strip() for rest in block[position + 1:]]
            return " ".join([line.removeprefix(WHY).strip(), *continuation]).strip()
    return ""


def _document_grants(text: str) -> list[Grant]:
    body: Any = yaml.safe_load(text)
    if not isinstance(body, dict) or body.get("kind") not in _ROLE_KINDS:
        return []
    metadata = body.get("metadata") or {}
    where = f"{body['kind']}/{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    rules: list[dict[str, Any]] = body.get("rules") or []
    lines = text.splitlines()
    starts = [number for number, line in enumerate(lines) if _RULE_START.match(line)]
    # A rule written with another first key has no line to hang its reason on: none counts as given.
    reasons = [_reason(lines, start) for start in starts] if len(starts) == len(rules) else [""] * len(rules)
    return [
        Grant(where, group, resource, verb, tuple(rule.get("resourceNames") or ()), why)
        for rule, why in zip(rules, reasons, strict=True)
        for group in rule.get("apiGroups") or [""]
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    ]


def grants(rendered: str) -> list[Grant]:
    """Every grant of every Role and ClusterRole in `helm template` output, in order."""
    return [grant for document in _DOCUMENT.split(rendered) for grant in _document_grants(document)]


def unjustified(rendered: str) -> list[Grant]:
    """The grants whose rule has no `# why:` reason."""
    return [grant for grant in grants(rendered) if not grant.why]
