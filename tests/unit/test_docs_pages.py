"""README.md and docs/ stay a set a newcomer can follow (issue 41): a README of at most 200
lines that links every page of docs/, a contents list at the top of every page naming each of
its sections, and no relative link (file or #section) that leads nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(text: str, *, deepest: int = 3) -> list[tuple[int, str]]:
    """The ``##`` .. ``###`` headings outside code blocks: (depth from 0, title)."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = re.match(r"(#{2,6}) (.*)$", line)
        if m and not fenced and len(m.group(1)) <= deepest:
            found.append((len(m.group(1)) - 2, m.group(2)))
    return found


def anchor(title: str) -> str:
    """The #anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(title) for _, title in headings(path.read_text(), deepest=6)}


def test_the_readme_is_at_most_200_lines_and_links_every_page_of_docs() -> None:
    """issue 41: README.md holds at most 200 lines; every page of docs/ is one link away from it."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200, len(text.splitlines())
    linked = {target.split("#")[0] for target in LINK.findall(text)}
    assert [p.name for p in PAGES if f"docs/{p.name}" not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_opens_with_its_contents(page: Path) -> None:
    """issue 41: each page of docs/ has a **Contents** list before its first section that names
    every ``##`` and ``###`` section, in order, with its anchor (add a new section to it too)."""
    text = page.read_text()
    assert "\n**Contents**\n\n" in text, f"{page.name} has no **Contents** list"
    start = text.index("\n**Contents**\n\n") + len("\n**Contents**\n\n")
    listed = text[start:text.index("\n\n", start)].splitlines()
    body = text[text.index("\n## "):]
    want = [f"{'  ' * depth}- [{title}](#{anchor(title)})" for depth, title in headings(body)]
    assert listed == want


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_section_that_exist(page: Path) -> None:
    """issue 41: a relative link of README.md or docs/ names a file of the repository, and its
    #section (if any) is a heading of that file: nothing moved out of the README is lost behind
    a dead link."""
    dead = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, section = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (section and linked.suffix == ".md" and section not in anchors(linked)):
            dead.append(target)
    assert dead == []
