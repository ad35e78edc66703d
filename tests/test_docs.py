"""The documentation points at things that exist: links between the pages resolve (file and
heading), a page named with a quoted section (``docs/training.md, "The loop"``) has that
section, wherever the pointer stands (the pages, code comments and docstrings, configs), and
every repository file a page names in backticks is there, as are the modules of
ARCHITECTURE.md's module map.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PAGES = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").glob("*.md")])

#: where a pointer into the docs may stand besides the pages themselves
POINTER_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".toml", ".js", ".html", ".md")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    # the Appium server's node_modules are someone else's documentation
    return [p for p in out if "node_modules/" not in p] or [str(p.relative_to(ROOT)) for p in PAGES]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower()).replace("_", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def headings(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.DOTALL)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # http(s), mailto
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


def test_quoted_sections_exist() -> None:
    """``docs/PAGE.md, "Section"`` and ``docs/PAGE.md ("Section")``, in pages and in code; a section
    may be named by the start of its heading up to a parenthesis, colon or comma."""
    bad = []
    for rel in _tracked():
        if not rel.endswith(POINTER_SUFFIXES) or rel == "tests/test_docs.py":  # its own examples
            continue
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        # a pointer may run over a line break, inside a comment or a docstring
        flat = re.sub(r"\s*\n\s*(?:#:?|\*|//)?\s*", " ", text)
        for m in re.finditer(r"((?:\.\./)?docs/|\b)([\w-]+)\.md[`']*,?\s*\(?\s*(?:\"|'')?\"([^\"]{3,80})\"", flat):
            prefix, name, section = m.groups()
            if not prefix and not rel.startswith("docs/"):  # a bare NAME.md outside docs/: not a page
                continue
            page = ROOT / "docs" / f"{name}.md"
            if not page.exists():
                bad.append(f"{rel}: docs/{name}.md does not exist")
            elif not any(h == section or h.startswith((f"{section} (", f"{section}:", f"{section},"))
                         for h in headings(page)):  # "Mixed fleets" names "Mixed fleets: emulators and ..."
                bad.append(f"{rel}: docs/{name}.md has no section {section!r}")
    assert not bad, "\n".join(bad)


def test_named_files_exist() -> None:
    """Repository files a page names in backticks (``rl/loop.py``, ``bench/critic_fit.py``)."""
    tracked = set(_tracked())
    pattern = re.compile(r"`((?:rl|guiagent|emulators|grounding|judge|webui|bench|scripts|tests|configs|docker|docs)"
                         r"/[\w./-]+\.(?:py|md|yaml|yml|sh|json|js|html|css|toml))`")
    bad = []
    for page in PAGES:
        for path in pattern.findall(page.read_text(encoding="utf-8")):
            if path not in tracked and not (ROOT / path).exists():
                bad.append(f"{page.relative_to(ROOT)}: {path}")
    assert not bad, "no such file: " + ", ".join(bad)


def test_module_map_names_existing_modules() -> None:
    """ARCHITECTURE.md's module map: each ``### package`` table's first column, relative to the package."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    bad = []
    for block in re.split(r"^### ", section, flags=re.MULTILINE)[1:]:
        package = block.split()[0]
        for row in re.findall(r"^\| (.+?) \|", block, flags=re.MULTILINE):
            if row in ("module", "---"):
                continue
            folder = ROOT / package  # `datasets/uis1.py`, `guiodyssey.py`: the later names share the folder
            for name in re.findall(r"`([^`]+)`", row):
                if "/" in name.rstrip("/"):
                    folder = ROOT / package / name.rsplit("/", 1)[0]
                target = ROOT / package / name if "/" in name else folder / name
                if not target.exists():
                    bad.append(f"{package}: {name}")
    assert not bad, "ARCHITECTURE.md names modules that do not exist: " + ", ".join(bad)


def test_reference_and_results_link_each_other() -> None:
    training = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert "(results.md" in training and "(training.md" in results


@pytest.mark.parametrize("page", [p for p in PAGES if "\nContents: " in p.read_text(encoding="utf-8")],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_contents_line_lists_every_section(page: Path) -> None:
    """A page's ``Contents:`` line links each of its ``##`` sections, in order (a new section goes there too)."""
    text = _without_code(page.read_text(encoding="utf-8"))
    contents = next(line for line in text.splitlines() if line.startswith("Contents: "))
    sections = [slug(line[3:]) for line in text.splitlines() if line.startswith("## ")]
    assert re.findall(r"\]\(#([^)]+)\)", contents) == sections
