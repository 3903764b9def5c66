"""The docs a user reads link to files that exist: every relative link in a Markdown file the repository
tracks (README.md, docs/**, the component READMEs) resolves to a file or folder of the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(REPO / name for name in subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True,
                                                     text=True, check=True).stdout.split())

# [text](target) and [text](target "title"); images too. Fenced code blocks are left out before matching.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def relative_links(markdown: str) -> list[str]:
    """Link targets that name a path (no scheme, not only an anchor), without their #fragment."""
    return [target.split("#", 1)[0] for target in _relative_targets(markdown) if not target.startswith("#")]


def _relative_targets(markdown: str) -> list[str]:
    text = _INLINE_CODE.sub("", _FENCE.sub("", markdown))
    return [t for t in _LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation but `-` and `_` dropped,
    spaces as `-`, a repeated heading suffixed `-1`, `-2`, ..."""
    counts: dict[str, int] = {}
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _FENCE.sub("", markdown), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        repeat = counts.get(slug, 0)
        found.add(slug if repeat == 0 else f"{slug}-{repeat}")
        counts[slug] = repeat + 1
    return found


def test_link_finder_sees_links_and_skips_code_urls_and_anchors() -> None:
    """Given links in prose, in code, to URLs and to anchors, Then only the prose paths are checked."""
    markdown = (
        "See [guide](docs/guide.md#install) and ![pic](img/a.png \"A\").\n"
        "`[not](code.md)` [site](https://example.org) [here](#top) [mail](mailto:a@b.c)\n"
        "```\n[fenced](fenced.md)\n```\n"
    )
    assert relative_links(markdown) == ["docs/guide.md", "img/a.png"]


def test_anchors_follow_github_headings() -> None:
    """Given headings with code, punctuation and a repeat, Then their anchors are GitHub's."""
    markdown = "# Two commands\n## ClientMetricsSubscription `spec`\n### Why kafka-python?\n## Status\n## Status\n"
    assert anchors(markdown) == {"two-commands", "clientmetricssubscription-spec", "why-kafka-python", "status",
                                 "status-1"}


def test_docs_exist() -> None:
    """Given the repository, Then the front door and the docs tree are there to be checked."""
    assert (REPO / "README.md") in DOCS
    assert any(path.parent.name == "docs" for path in DOCS)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_at_existing_files(doc: Path) -> None:
    """Given a doc, When each relative link is resolved from the doc's folder, Then it names an existing
    file or folder inside the repository."""
    broken = []
    for target in relative_links(doc.read_text()):
        resolved = (doc.parent / target).resolve()
        if not resolved.is_relative_to(REPO) or not resolved.exists():
            broken.append(target)
    assert broken == [], f"{doc.relative_to(REPO)}: broken links {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_anchors_point_at_headings(doc: Path) -> None:
    """Given a doc, When a link names a #fragment of a Markdown file (or of the doc itself), Then that file
    has a heading with that anchor."""
    broken = []
    for target in _relative_targets(doc.read_text()):
        path, _, fragment = target.partition("#")
        markdown = (doc.parent / path).resolve() if path else doc
        if not fragment or markdown.suffix != ".md" or not markdown.exists():
            continue
        if fragment not in anchors(markdown.read_text()):
            broken.append(target)
    assert broken == [], f"{doc.relative_to(REPO)}: links to missing headings {broken}"
