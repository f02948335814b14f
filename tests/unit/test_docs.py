"""The manual stays true: its generated reference matches the code, and its links lead
somewhere.

``docs/reference/`` is written by ``make docs`` from the Typer app, the network models,
the catalog's OpenAPI description and the settings classes; a changed option or setting
without ``make docs`` fails here. Every relative link of README.md and docs/**/*.md must
name an existing file and, with a ``#anchor``, a heading of that file (GitHub's slugs).
External links are not fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from medusa.settings import REPO_ROOT
from medusa_apps import reference_docs

pytestmark = pytest.mark.unit

LINK = re.compile(r"(?<!\\)!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)[^`]*?\1")


def manual_pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: inline markup dropped, lower case, punctuation
    other than hyphens and underscores removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, with GitHub's -1, -2 ... for repeated ones."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = github_slug(heading.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text()))
    return LINK.findall(text)


def test_the_generated_reference_is_what_the_code_gives_now() -> None:
    generated = reference_docs.render(REPO_ROOT)
    stale = [str(path) for path, text in generated.items()
             if not (REPO_ROOT / path).is_file() or (REPO_ROOT / path).read_text() != text]
    assert not stale, (f"out of date: {', '.join(stale)}; run `make docs` "
                       "(python -m medusa_apps.reference_docs) and commit the result")


def test_the_generated_reference_is_deterministic_and_machine_free() -> None:
    first, second = reference_docs.render(REPO_ROOT), reference_docs.render(REPO_ROOT)
    assert first == second
    for path, text in first.items():
        assert str(REPO_ROOT) not in text, f"{path} names the repository's absolute path"
        assert str(Path.home()) not in text, f"{path} names the home folder"


def test_every_relative_link_of_the_readme_and_the_manual_resolves() -> None:
    broken = []
    for page in manual_pages():
        for target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http(s), mailto: not fetched
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(REPO_ROOT)}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_is_a_front_door() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    assert "make demo" in readme and "make test" in readme
    assert "](docs/console.png)" in readme
    assert "](docs/index.md)" in readme


def test_the_slugs_follow_github() -> None:
    assert github_slug("DPC: answering through a failed input, then correcting") == \
        "dpc-answering-through-a-failed-input-then-correcting"
    assert github_slug("Write a `process` box") == "write-a-process-box"
    assert github_slug("GET /v1/nodes/{participant}/{name}") == "get-v1nodesparticipantname"
    assert github_slug("BPM: a load spike") == "bpm-a-load-spike"
