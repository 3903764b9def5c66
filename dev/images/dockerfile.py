"""What goes into one target of the Dockerfile: its stages, the build-context files they COPY, and a key.

`make images` builds from a staged copy of the build context that holds exactly the files the target's
stages COPY (after `.dockerignore`), and keys the result by a hash of those files, the Dockerfile and the
bases. So a warm run compares one hash and builds nothing, and an edit to a file the image does not
contain (tests, docs, the Spark job for the operator image) does not rebuild it.

The parser understands the Dockerfile syntax this project uses: line continuations, global `ARG`s,
`FROM image [AS name]`, `COPY`/`ADD` with flags (`--from=`, `--chown=`, ...) in shell or JSON form, `RUN`
with flags, `USER`, `WORKDIR`, `ENTRYPOINT`/`CMD`/`ENV`/`EXPOSE` (kept as written). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ContextFile",
    "Dockerfile",
    "DockerfileError",
    "Ignore",
    "Instruction",
    "Stage",
    "context_files",
    "parse_dockerfile",
    "stage_context",
]


class DockerfileError(ValueError):
    """The Dockerfile (or a target named for it) is not one this parser can follow; the message says where."""


@dataclass(frozen=True)
class Instruction:
    keyword: str           # upper case: RUN, COPY, ...
    flags: tuple[str, ...]  # `--from=build`, `--mount=type=cache,target=/x` (without the leading `--`)
    arguments: str         # the rest of the logical line, continuations joined
    line: int              # 1-based line of the instruction's first physical line

    def flag(self, name: str) -> str | None:
        """The value of `--name=value`, or None."""
        for item in self.flags:
            key, _, value = item.partition("=")
            if key == name:
                return value
        return None


@dataclass
class Stage:
    index: int
    base: str                # as written (may hold ${ARG}s)
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    @property
    def runs(self) -> list[str]:
        return [i.arguments for i in self.of("RUN")]

    @property
    def users(self) -> list[str]:
        return [i.arguments for i in self.of("USER")]

    @property
    def workdir(self) -> str:
        """The last WORKDIR (absolute, as this project writes them), or `/`."""
        workdirs = self.of("WORKDIR")
        return workdirs[-1].arguments if workdirs else "/"

    @property
    def label(self) -> str:
        return self.name or str(self.index)


@dataclass(frozen=True)
class Dockerfile:
    text: str
    global_args: Mapping[str, str]   # ARG defaults declared before the first FROM
    stages: tuple[Stage, ...]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if name in {stage.name, str(stage.index)}:
                return stage
        known = ", ".join(s.label for s in self.stages)
        raise DockerfileError(f"target {name!r}: no such stage (stages: {known})")

    def expand(self, text: str, build_args: Mapping[str, str] | None = None) -> str:
        """`${NAME}` / `$NAME` replaced by the build argument or the global ARG default."""
        values = {**self.global_args, **(build_args or {})}
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m[1] or m[2], m[0]), text)

    def dependencies(self, stage: Stage) -> list[Stage]:
        """Stages `stage` builds on: its FROM when that names a stage, and every `COPY --from=<stage>`."""
        names = [self.expand(stage.base)]
        names += [flag for i in stage.of("COPY") + stage.of("ADD") if (flag := i.flag("from")) is not None]
        found: list[Stage] = []
        for name in names:
            for other in self.stages[: stage.index]:
                if name in {other.name, str(other.index)} and other not in found:
                    found.append(other)
        return found

    def closure(self, target: str) -> list[Stage]:
        """The stages a build of `target` runs, in Dockerfile order (BuildKit and buildah skip the others)."""
        wanted: dict[int, Stage] = {}
        pending = [self.stage(target)]
        while pending:
            stage = pending.pop()
            if stage.index not in wanted:
                wanted[stage.index] = stage
                pending.extend(self.dependencies(stage))
        return [wanted[i] for i in sorted(wanted)]

    def external_bases(self, target: str, build_args: Mapping[str, str] | None = None) -> list[str]:
        """The images (not stages, not scratch) the stages of `target` start FROM, expanded."""
        bases: list[str] = []
        for stage in self.closure(target):
            base = self.expand(stage.base, build_args)
            if base != "scratch" and not any(base in {s.name, str(s.index)} for s in self.stages) \
                    and base not in bases:
                bases.append(base)
        return bases


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, logical line): continuations joined, comments and blank lines dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as Docker does
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        yield start, " ".join(part for part in pending if part)
        pending = []
    if pending:
        yield start, " ".join(part for part in pending if part)


def parse_dockerfile(text: str) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, logical in _logical_lines(text):
        keyword, _, rest = logical.partition(" ")
        keyword = keyword.upper()
        flags: list[str] = []
        rest = rest.strip()
        while rest.startswith("--"):
            item, _, rest = rest[2:].partition(" ")
            flags.append(item)
            rest = rest.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, flags=re.IGNORECASE)
            if match is None:
                raise DockerfileError(f"line {line}: FROM {rest!r} is not `FROM image [AS name]`")
            stages.append(Stage(index=len(stages), base=match[1], name=match[2]))
        elif not stages:
            if keyword == "ARG":
                name, _, default = rest.partition("=")
                global_args[name.strip()] = default.strip()
            else:
                raise DockerfileError(f"line {line}: {keyword} before the first FROM")
        else:
            stages[-1].instructions.append(Instruction(keyword, tuple(flags), rest, line))
    if not stages:
        raise DockerfileError("no FROM: the Dockerfile has no stage")
    return Dockerfile(text=text, global_args=global_args, stages=tuple(stages))


def copy_sources(instruction: Instruction) -> list[str]:
    """The build-context sources of a COPY/ADD without `--from` (JSON or shell form)."""
    arguments = instruction.arguments
    parts = json.loads(arguments) if arguments.startswith("[") else arguments.split()
    if len(parts) < 2:
        raise DockerfileError(f"line {instruction.line}: {instruction.keyword} needs a source and a destination")
    return [str(part) for part in parts[:-1]]


# ---------------------------------------------------------------------------------------- .dockerignore


class Ignore:
    """`.dockerignore` rules as Docker applies them: the last matching pattern wins, `!` re-includes, a
    pattern that matches a directory excludes everything under it, `**` spans directories."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._rules: list[tuple[bool, re.Pattern[str]]] = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            pattern = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
            self._rules.append((keep, re.compile(self._translate(pattern))))

    @classmethod
    def read(cls, context: Path) -> Ignore:
        path = context / ".dockerignore"
        return cls(path.read_text().splitlines() if path.is_file() else [])

    @staticmethod
    def _translate(pattern: str) -> str:
        out, i = [], 0
        while i < len(pattern):
            char = pattern[i]
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
                continue
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            if char == "*":
                out.append("[^/]*")
            elif char == "?":
                out.append("[^/]")
            elif char == "[":
                end = pattern.find("]", i + 1)
                if end == -1:
                    out.append(re.escape(char))
                else:
                    out.append("[" + pattern[i + 1:end].replace("\\", "\\\\") + "]")
                    i = end
            else:
                out.append(re.escape(char))
            i += 1
        return "".join(out)

    def excluded(self, relative: str) -> bool:
        """Whether `relative` (a POSIX path inside the context) is left out of the build context."""
        parts = relative.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        verdict = False
        for keep, rule in self._rules:
            if any(rule.fullmatch(prefix) for prefix in prefixes):
                verdict = not keep
        return verdict


# ---------------------------------------------------------------------------------- build context files


@dataclass(frozen=True)
class ContextFile:
    relative: str   # POSIX path inside the context
    digest: str     # sha256 of the content (of the link target for a symlink)
    executable: bool
    symlink: bool

    def line(self) -> str:
        kind = "l" if self.symlink else ("x" if self.executable else "f")
        return f"{kind} {self.digest} {self.relative}"


def _describe(context: Path, path: Path) -> ContextFile:
    relative = path.relative_to(context).as_posix()
    if path.is_symlink():
        digest = hashlib.sha256(os.readlink(path).encode()).hexdigest()
        return ContextFile(relative, digest, executable=False, symlink=True)
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    executable = bool(path.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    return ContextFile(relative, hasher.hexdigest(), executable=executable, symlink=False)


def context_files(dockerfile: Dockerfile, target: str, context: Path,
                  build_args: Mapping[str, str] | None = None) -> list[ContextFile]:
    """Every context file that a COPY/ADD (without `--from`) of `target`'s stages reads, after .dockerignore."""
    ignore = Ignore.read(context)
    found: dict[str, ContextFile] = {}
    for stage in dockerfile.closure(target):
        for instruction in stage.of("COPY") + stage.of("ADD"):
            if instruction.flag("from") is not None:
                continue
            for source in copy_sources(instruction):
                pattern = dockerfile.expand(source, build_args).strip("/") or "."
                matches = sorted(context.glob(pattern)) if any(c in pattern for c in "*?[") \
                    else [context / pattern]
                matches = [m for m in matches if m.exists() or m.is_symlink()]
                if not matches:
                    raise DockerfileError(f"line {instruction.line}: {instruction.keyword} source {source!r} "
                                          f"is not in the build context {context}")
                for match in matches:
                    candidates = [match] if not match.is_dir() or match.is_symlink() \
                        else sorted(p for p in match.rglob("*") if not p.is_dir() or p.is_symlink())
                    for path in candidates:
                        relative = path.relative_to(context).as_posix()
                        if relative not in found and not ignore.excluded(relative):
                            found[relative] = _describe(context, path)
    return [found[key] for key in sorted(found)]


def stage_context(files: Iterable[ContextFile], context: Path, dockerfile_text: str, dest: Path) -> Path:
    """A build context at `dest` holding exactly `files` and the Dockerfile; returns the Dockerfile's path."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for item in files:
        target = dest / item.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(context / item.relative, target, follow_symlinks=False)
    dockerfile = dest / "Dockerfile"
    dockerfile.write_text(dockerfile_text)
    return dockerfile
