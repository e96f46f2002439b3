"""The repository explains itself and its documentation's links resolve.

1. No tracked text file (code, comments, help texts, docs, build files) points at material
   kept outside the repository: a design document or style guide next to the checkout, its
   section numbers, work sessions, a tracker's issues, or the instructions work was done
   from. Such a pointer means nothing to a reader of the repository alone; the text must say
   what it meant instead (e.g. "the simulator (docs/sim.md)", or the thesis by name:
   Madrid Rivera, GMU 2024, "Optimizing Intel Optane DC Persistent Memory Performance for
   Serverless Storage").
2. Every relative Markdown link in README.md and docs/*.md points at a file in the
   repository (and at a heading of it, when it carries a #anchor to a Markdown file).
3. Every `docs/NAME.md` a tracked text file names exists.

Failures list file:line for each hit. No nvmw import: this runs without the C++ module.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

TEXT_SUFFIXES = {".md", ".py", ".h", ".cc", ".sh", ".toml", ".txt", ".cfg"}
TEXT_NAMES = {"CMakeLists.txt"}
# Directories of a working tree that are not part of the repository (tree-walk fallback).
SKIP_DIRS = {".git", "build", "out", "dist", "__pycache__", ".pytest_cache", ".venv", "venv",
             "node_modules", ".eggs"}

_I = re.IGNORECASE
# (what it is, pattern). Patterns run on a file's whole text, so a phrase broken over two
# lines is still found; `\s+` stands for any run of blanks and line breaks.
OUTSIDE_REFERENCES: list[tuple[str, re.Pattern[str]]] = [
    ("path outside the repository (../shared)", re.compile(r"\.\./shared\b", _I)),
    ("path outside the repository (/work/shared)", re.compile(r"/work/shared\b", _I)),
    ("path outside the repository (shared/...)",
     re.compile(r"(?<![\w.-])shared/(?:DESIGN|STYLE|data|reference|hooks)\b", _I)),
    ("design document outside the repository", re.compile(r"\bDESIGN\.md\b", _I)),
    ("section of a design document outside the repository",
     re.compile(r"\bDESIGN(?:'s)?\s+(?:sections?|§)", _I)),
    # Upper-case DESIGN as a word is that document's name ("DESIGN's 13.8 us").
    ("design document outside the repository (DESIGN)", re.compile(r"\bDESIGN\b")),
    ("style guide outside the repository", re.compile(r"\bSTYLE\.md\b", _I)),
    ("reference copy outside the repository", re.compile(r"thesis-nvm-middleware", _I)),
    ("work session", re.compile(r"\bsessions?[\s-]+#?[0-9]+\b", _I)),
    ("work session",
     re.compile(r"\b(?:this|that|the\s+same|same|other|earlier|previous|later|next|first|"
                r"second|third|last)\s+sessions?\b", _I)),
    ("work session", re.compile(r"\bin\s+the\s+session\b", _I)),
    ("the instructions the work was done from", re.compile(r"\bthe\s+brief\b", _I)),
    ("the instructions the work was done from", re.compile(r"\bthe\s+checklist\b", _I)),
    # "the issue lag", "the issue time" (when a request was issued) are the replay's terms.
    ("issue tracker",
     re.compile(r"\bthe\s+issue\b(?!\s+(?:lag|time|times|order|rate|path|side|cost|queue)\b)",
                _I)),
    ("issue tracker", re.compile(r"\bissues?\s*#\s*[0-9]+", _I)),
    # "issue 2 requests" is prose; "issue 12" / "issue 12." is a tracker number.
    ("issue tracker",
     re.compile(r"\bissue\s+[0-9]+\b(?!\s+(?:\w+\s+)?(?:requests?|records?|ops|operations|"
                r"reads?|writes?|accesses|calls|gets|puts)\b)", _I)),
]

# [text](target) and ![alt](target); target up to whitespace or ')', optional "title".
MD_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target (reference-style definitions)
MD_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
DOCS_MD_MENTION = re.compile(r"(?<![\w/.-])docs/[\w.-]+\.md\b")


def _is_text_name(rel: str) -> bool:
    p = Path(rel)
    return p.name in TEXT_NAMES or p.suffix in TEXT_SUFFIXES


def _git_files() -> list[str] | None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                             capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]


def _walked_files() -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.startswith(".")
                       and not d.endswith(".egg-info")]
        for name in filenames:
            found.append(str((Path(dirpath) / name).relative_to(ROOT)))
    return found


def repo_text_files() -> list[Path]:
    """Tracked text files (git ls-files; a tree walk when git is not available), minus this
    test, which has to spell the patterns out."""
    names = _git_files()
    if names is None:
        names = _walked_files()
    files = []
    for rel in sorted(names):
        path = ROOT / rel
        if not _is_text_name(rel) or path.resolve() == THIS or not path.is_file():
            continue
        files.append(path)
    return files


def read_text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None  # binary
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def outside_references(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, matched text) for every reference to something outside the repository."""
    hits = []
    spans: list[tuple[int, int]] = []
    for kind, pattern in OUTSIDE_REFERENCES:  # specific patterns first: one report per spot
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in spans):
                continue
            spans.append(m.span())
            hits.append((line_of(text, m.start()), kind, " ".join(m.group(0).split())))
    return sorted(hits)


def _blank(m: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


def _strip_fences(markdown: str) -> str:
    """Blank out fenced code blocks, keeping line breaks."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", _blank, markdown, flags=re.M | re.S)


def _strip_code(markdown: str) -> str:
    """Blank out fenced code blocks and inline code spans (keeping line breaks), so that
    example text is not taken for links."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", _blank, _strip_fences(markdown), flags=re.S)


def github_anchor(heading: str) -> str:
    """The #anchor GitHub gives a heading."""
    h = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", _strip_fences(markdown), re.M):
        a = github_anchor(m.group(1))
        n = seen.get(a, 0)
        seen[a] = n + 1
        anchors.add(a if n == 0 else f"{a}-{n}")
    return anchors


def relative_links(markdown: str) -> list[tuple[int, str]]:
    text = _strip_code(markdown)
    links = [(line_of(text, m.start()), m.group(1)) for m in MD_LINK.finditer(text)]
    links += [(line_of(text, m.start()), m.group(1)) for m in MD_REF_DEF.finditer(text)]
    return [(n, t) for n, t in links
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]  # http:, mailto:, ...


def dead_links(md_path: Path, root: Path = ROOT) -> list[str]:
    markdown = md_path.read_text(encoding="utf-8")
    rel_md = md_path.relative_to(root)
    problems = []
    for line, target in relative_links(markdown):
        path_part, _, anchor = target.partition("#")
        if path_part:
            dest = (md_path.parent / path_part).resolve()
        else:
            dest = md_path.resolve()  # #anchor within the page
        where = f"{rel_md}:{line}: ({target})"
        if dest != root and root not in dest.parents:
            problems.append(f"{where} points outside the repository")
            continue
        if not dest.exists():
            problems.append(f"{where} -> {dest.relative_to(root)} does not exist")
            continue
        if anchor and dest.suffix == ".md" and dest.is_file():
            if anchor.lower() not in anchors_of(dest.read_text(encoding="utf-8")):
                problems.append(f"{where} -> no heading #{anchor} in {dest.relative_to(root)}")
    return problems


def doc_pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


# --- the scanner itself -----------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "see ../shared/DESIGN.md",
    "The simulator (DESIGN section 7) uses",
    "DESIGN sections 2, 3 and 11 fix the",
    "the 13.8 us of DESIGN's measurement",
    "Published statistics (`shared/data/azure-functions-blob-2020.md`)",
    "default since session 2",
    "### Session 1 (for the record)",
    "the session-2 long run",
    "earlier in the\n   session when the load was lower",
    "other sessions were building",
    "reference figures (from the brief)",
    "The issue's goals are not met.",
    "as the issue asks",
    "fixed in issue #12",
    "see issue 7.",
    "ticked off the checklist",
])
def test_scanner_flags_outside_references(text):
    assert outside_references(text), text


@pytest.mark.parametrize("text", [
    "the issue lag (issue minus due) shows where the time went",
    "From the issue time to completion",
    "clients issue 2 requests each",
    "there is an issue with small writes",
    "a shared_mutex per stripe; include/nvmw/engine.h",
    "The design of the engine is in docs/engine.md",
    "Helpers shared by the engine implementations",
    "a brief spin before parking",
])
def test_scanner_spares_prose(text):
    assert outside_references(text) == [], text


def test_link_checker_finds_dead_links(tmp_path):
    md = "\n".join([
        "# Title", "## A `code` heading", "",
        "[ok](#title) [ok2](#a-code-heading) [web](https://example.org)",
        "[dead](missing.md) ![img](gone.png)", "[bad anchor](#nowhere)",
        "```", "[not a link](inside-a-fence.md)", "```", "`[nor](this.md)`",
    ])
    links = relative_links(md)
    assert [t for _, t in links] == ["#title", "#a-code-heading", "missing.md", "gone.png",
                                     "#nowhere"]
    assert [n for n, t in links if t == "missing.md"] == [5]
    assert {"title", "a-code-heading"} <= anchors_of(md)
    assert "nowhere" not in anchors_of(md)

    root = tmp_path.resolve()
    (root / "docs").mkdir()
    (root / "docs" / "page.md").write_text(md + "\n[up](../README.md) [out](../../x.md)\n"
                                           "[there](other.md#a-part) [not there](other.md#b)\n")
    (root / "docs" / "other.md").write_text("# Other\n\n## A part\n")
    (root / "README.md").write_text("# R\n")
    problems = dead_links(root / "docs" / "page.md", root)
    assert [p.split(": ")[1].split(" ")[0] for p in problems] == [
        "(missing.md)", "(gone.png)", "(#nowhere)", "(../../x.md)", "(other.md#b)"], problems


# --- the repository -----------------------------------------------------------------------

def test_repository_text_files_are_found():
    files = {str(p.relative_to(ROOT)) for p in repo_text_files()}
    assert "README.md" in files and "CMakeLists.txt" in files
    assert any(f.startswith("docs/") for f in files)
    assert str(THIS.relative_to(ROOT)) not in files


def test_tree_walk_fallback_finds_the_docs(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)  # as if git were not installed
    files = {str(p.relative_to(ROOT)) for p in repo_text_files()}
    assert {"README.md", "CMakeLists.txt"} <= files
    assert {str(p.relative_to(ROOT)) for p in doc_pages()} <= files
    assert not any(f.startswith(("build/", ".git/")) for f in files)
    assert str(THIS.relative_to(ROOT)) not in files


def test_no_references_outside_the_repository():
    hits = []
    for path in repo_text_files():
        text = read_text(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT)
        hits += [f"{rel}:{line}: {kind}: {found!r}"
                 for line, kind, found in outside_references(text)]
    assert not hits, (f"{len(hits)} reference(s) to things outside the repository; say what "
                      "was meant instead:\n" + "\n".join(hits))


def test_markdown_links_resolve():
    pages = doc_pages()
    assert len(pages) > 1
    problems = [p for page in pages for p in dead_links(page)]
    assert not problems, "dead links:\n" + "\n".join(problems)


def test_named_docs_pages_exist():
    missing = []
    for path in repo_text_files():
        text = read_text(path)
        if text is None:
            continue
        for m in DOCS_MD_MENTION.finditer(text):
            if not (ROOT / m.group(0)).is_file():
                missing.append(f"{path.relative_to(ROOT)}:{line_of(text, m.start())}: "
                               f"{m.group(0)} does not exist")
    assert not missing, "\n".join(missing)
