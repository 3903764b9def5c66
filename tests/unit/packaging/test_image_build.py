"""How `make images` decides what to build: the Dockerfile's stages, the context files, the keys.

Pure logic of dev/images (no buildah, no network): a key must change exactly when something that goes
into the image changes, and the staged build context must hold what the stages COPY and nothing else.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from chart_support import REPO
from image_support import dev_images, images_module

images = images_module()
dockerfile = dev_images("dockerfile")
debian_base = dev_images("debian_base")

SAMPLE = """\
# syntax=docker/dockerfile:1
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
ARG TOOL_IMAGE=maven:3.9.11-eclipse-temurin-17

FROM ${TOOL_IMAGE} AS tool
WORKDIR /src
COPY tool/ ./
RUN --mount=type=cache,target=/root/.m2 \\
    make tool

FROM ${TOOL_IMAGE} AS unrelated
COPY docs/ /docs/
RUN make docs

FROM ${BASE_IMAGE} AS build
COPY ["app/", "app/"]
COPY setup.cfg *.toml ./
RUN build

FROM build AS runtime
COPY --from=tool /tool /opt/tool
USER 10001:10001
ENTRYPOINT ["app"]
"""


def make_context(root: Path) -> Path:
    files = {
        "tool/Makefile": "tool:\n", "tool/target/out.bin": "built", "docs/index.md": "docs",
        "app/main.py": "print()", "app/__pycache__/main.cpython-311.pyc": "pyc", "setup.cfg": "[x]",
        "pyproject.toml": "[project]", "extra.toml": "x = 1", "README.md": "readme",
        ".dockerignore": "**/__pycache__\ntool/target\n*.md\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_parser_follows_stages_flags_and_continuations() -> None:
    """Given a Dockerfile with global ARGs, RUN flags, a continuation and JSON COPY, then the parser reads
    them as Docker does."""
    parsed = dockerfile.parse_dockerfile(SAMPLE)
    assert parsed.global_args == {"BASE_IMAGE": "python:3.11.14-slim-bookworm",
                                  "TOOL_IMAGE": "maven:3.9.11-eclipse-temurin-17"}
    assert [stage.name for stage in parsed.stages] == ["tool", "unrelated", "build", "runtime"]
    (run,) = parsed.stage("tool").of("RUN")
    assert run.flag("mount") == "type=cache,target=/root/.m2"
    assert run.arguments == "make tool"
    assert parsed.stage("tool").workdir == "/src"
    assert parsed.stage("runtime").users == ["10001:10001"]


def test_closure_is_the_stages_a_target_needs() -> None:
    """Given the target `runtime`, then its stages are itself, its FROM stage and its COPY --from stage, and
    its external bases follow the build args."""
    parsed = dockerfile.parse_dockerfile(SAMPLE)
    assert [stage.name for stage in parsed.closure("runtime")] == ["tool", "build", "runtime"]
    assert parsed.external_bases("runtime") == ["maven:3.9.11-eclipse-temurin-17", "python:3.11.14-slim-bookworm"]
    local = {"BASE_IMAGE": "kct.dev/base/python-bookworm:1", "TOOL_IMAGE": "kct.dev/base/maven-bookworm:2"}
    assert parsed.external_bases("runtime", local) == ["kct.dev/base/maven-bookworm:2",
                                                       "kct.dev/base/python-bookworm:1"]
    with pytest.raises(dockerfile.DockerfileError, match="no such stage"):
        parsed.closure("nope")


@pytest.mark.parametrize(("path", "excluded"), [
    ("build", True), ("build/stack/x.log", True), ("operator/kct/__pycache__/a.pyc", True),
    ("plugin/target/classes/A.class", True), ("plugin/src/A.java", False), ("operator/x.egg-info/PKG-INFO", True),
    ("README.md", False), ("tests/unit/test_x.py", True), (".venv/bin/python", True), ("pyproject.toml", False),
    # built in place by the editable install; its bytes differ per checkout, so it would re-key every clone
    ("operator/kct/receiver/_otlpscan.cpython-311-x86_64-linux-gnu.so", True),
    ("operator/kct/receiver/_otlpscan.c", False),
])
def test_the_repositorys_dockerignore_is_applied_as_docker_does(path: str, excluded: bool) -> None:
    """Given the repository's .dockerignore, then build output, caches and folders no stage needs are out."""
    assert dockerfile.Ignore.read(REPO).excluded(path) is excluded


def test_ignore_rules_last_match_wins_and_exceptions_reinclude() -> None:
    """Given `*.md` then `!README.md`, then README.md is in and other top-level .md files are out."""
    rules = dockerfile.Ignore(["# comment", "*.md", "!README.md", "docs/**/draft*"])
    assert rules.excluded("NOTES.md")
    assert not rules.excluded("README.md")
    assert not rules.excluded("docs/guide.md")   # `*` does not cross a folder
    assert rules.excluded("docs/a/b/draft-1.txt")


def test_context_files_are_what_the_targets_stages_copy(tmp_path: Path) -> None:
    """Given a context, then the files of `runtime` are those its stages COPY (globs expanded), minus
    .dockerignore, and not the files only an unrelated stage copies."""
    context = make_context(tmp_path / "ctx")
    parsed = dockerfile.parse_dockerfile(SAMPLE)
    files = [item.relative for item in dockerfile.context_files(parsed, "runtime", context)]
    assert files == ["app/main.py", "extra.toml", "pyproject.toml", "setup.cfg", "tool/Makefile"]


def test_a_copy_source_missing_from_the_context_is_an_error_naming_it(tmp_path: Path) -> None:
    """Given a COPY of a file the context lacks, then the error names the line and the source."""
    context = make_context(tmp_path / "ctx")
    (context / "setup.cfg").unlink()
    parsed = dockerfile.parse_dockerfile(SAMPLE)
    with pytest.raises(dockerfile.DockerfileError, match=r"line 17: COPY source 'setup.cfg' is not in the build"):
        dockerfile.context_files(parsed, "runtime", context)


def test_content_changes_change_the_digests_and_staging_copies_exactly_those_files(tmp_path: Path) -> None:
    """Given a copied file edited and an unrelated one edited, then only the first changes the file list's
    digests; the staged context holds the listed files and the Dockerfile only."""
    context = make_context(tmp_path / "ctx")
    parsed = dockerfile.parse_dockerfile(SAMPLE)
    before = [item.line() for item in dockerfile.context_files(parsed, "runtime", context)]
    (context / "docs" / "index.md").write_text("changed")
    (context / "tool" / "target" / "out.bin").write_text("changed")
    assert [item.line() for item in dockerfile.context_files(parsed, "runtime", context)] == before
    (context / "app" / "main.py").write_text("print('changed')")
    after = dockerfile.context_files(parsed, "runtime", context)
    assert [item.line() for item in after] != before

    staged = dockerfile.stage_context(after, context, SAMPLE, tmp_path / "staged")
    listed = sorted(p.relative_to(tmp_path / "staged").as_posix()
                    for p in (tmp_path / "staged").rglob("*") if p.is_file())
    assert listed == sorted([item.relative for item in after] + ["Dockerfile"])
    assert staged.read_text() == SAMPLE


def test_base_keys_follow_their_recipe() -> None:
    """Given the local bases, then each key is a hash of its recipe: another package list gives another key,
    the shipped Python base carries no host CA, the build-only Maven base lists the host's extra CAs."""
    python, maven = debian_base.PYTHON_BASE, debian_base.MAVEN_BASE
    assert re.fullmatch(r"kct\.dev/base/python-bookworm:[0-9a-f]{16}", python.reference())
    assert python.key() == dataclasses.replace(python).key()
    assert dataclasses.replace(python, packages=(*python.packages, "curl")).key() != python.key()
    assert python.recipe()["extra_cas"] == {}
    assert set(maven.recipe()["extra_cas"]) == {p.name for p in debian_base.host_extra_cas()}
    assert {"python3", "python3-venv", "python-is-python3", "ca-certificates"} <= set(python.packages)


def test_debian_sources_can_be_overridden_and_a_missing_suite_is_named(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Given KCT_DEBIAN_SOURCES, then the bases use that file; given a suite no host source names, then the
    error names the suite and the override."""
    sources = tmp_path / "x.sources"
    sources.write_text("Types: deb\nSuites: bookworm\n")
    monkeypatch.setenv("KCT_DEBIAN_SOURCES", str(sources))
    assert debian_base.debian_sources("bookworm") == [sources]
    monkeypatch.delenv("KCT_DEBIAN_SOURCES")
    with pytest.raises(debian_base.BootstrapError, match=r"names the suite 'no-such-suite'.*KCT_DEBIAN_SOURCES"):
        debian_base.debian_sources("no-such-suite")


def test_plan_names_the_archive_and_reference_by_one_key(capsys: pytest.CaptureFixture[str]) -> None:
    """Given the repository, when `images.py plan` runs, then it prints ARCHIVE<TAB>REFERENCE for the runtime
    image, both carrying the same key, under the images cache, without building anything."""
    image = images.plan("kct")
    assert image.reference == f"kct.dev/kct:{image.key}"
    assert image.archive == images.cache_root() / f"kct-{image.key}.tar"
    assert images.plan("kct") == image
    assert images.main(["plan", "kct"]) == 0
    assert capsys.readouterr().out == f"{image.archive}\t{image.reference}\n"
    with pytest.raises(images.ImageError, match="unknown image 'nope'"):
        images.plan("nope")


def test_pruning_keeps_the_newest_archives_and_any_built_recently(tmp_path: Path) -> None:
    """Given a test run's archive built 20 min ago, three newer ones built since by other clones and two from
    last week, When a build prunes, Then the three newest, the one being kept and the test run's stay (it is
    read ~20 min after it was built), and last week's go with their metadata."""
    import os
    import time

    folder = tmp_path / "images"
    folder.mkdir()
    now = time.time()
    ages_s = {"kct-00000000000000a1": 60, "kct-00000000000000a2": 120, "kct-00000000000000a3": 180,
              "kct-00000000000000c1": 1200, "kct-00000000000000b1": 7 * 86400, "kct-00000000000000b2": 8 * 86400}
    for stem, age in ages_s.items():
        for suffix in (".tar", ".json"):
            path = folder / f"{stem}{suffix}"
            path.write_text("x")
            os.utime(path, (now - age, now - age))
    keep = folder / "kct-00000000000000a1.tar"
    images._prune(folder, "kct-", keep={keep})
    left = sorted(p.stem for p in folder.glob("*.tar"))
    assert left == ["kct-00000000000000a1", "kct-00000000000000a2", "kct-00000000000000a3", "kct-00000000000000c1"]
    assert not (folder / "kct-00000000000000b1.json").exists()
