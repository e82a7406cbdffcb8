"""mkdocs hooks (mkdocs.yml `hooks:`): the site's home page is the README, links from the pages to the
repository's other files work both on GitHub and in the built site, and the stylesheet of the code highlighting
(css/pygments.css, for the codehilite extension) is generated from the installed Pygments.

The pages are written for GitHub, where a link is a path relative to the file that holds it: the README links to
`docs/methods.md`, a page in docs/ to `../results/schedules/table.md`. mkdocs only knows docs/, so before the build
every repository file such a link names (and, for a markdown file, the files its own links name) is added to the
site at its repository path, and when a page is rendered each link is rewritten to that site path. A link to a
missing file is left as written, so that `mkdocs build --strict` fails on it (mkdocs.yml's `validation`).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Inline links and images, ](target) or ](target "title"); fenced code blocks are skipped (see `_outside_code`).
LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
FENCE = re.compile(r"^(```|~~~)", re.M)


def _outside_code(markdown: str) -> list[tuple[bool, str]]:
    """The markdown cut into (is_prose, text) pieces at its code fences."""
    pieces, prose, start = [], True, 0
    for match in FENCE.finditer(markdown):
        pieces.append((prose, markdown[start : match.start()]))
        prose, start = not prose, match.start()
    pieces.append((prose, markdown[start:]))
    return pieces


def _targets(markdown: str) -> list[str]:
    """The relative link targets of the prose (no scheme, no bare #anchor), without their #anchor or ?query."""
    out = []
    for prose, text in _outside_code(markdown):
        if prose:
            for match in LINK.finditer(text):
                target = re.split(r"[#?]", match.group(2), maxsplit=1)[0]
                if target and ":" not in target and not target.startswith("/"):
                    out.append(target)
    return out


def _site_path(repo_path: Path) -> str:
    """Where a repository file lives in the site: docs/x.md at x.md, the README as the home page, any other file at
    its repository path."""
    if repo_path == README:
        return "index.md"
    if DOCS in repo_path.parents:
        return repo_path.relative_to(DOCS).as_posix()
    return repo_path.relative_to(ROOT).as_posix()


def _resolve(source: Path, target: str) -> Path:
    return Path(posixpath.normpath((source.parent / target).as_posix()))


def on_files(files: Files, config) -> Files:
    """Add every repository file outside docs/ that the README or a page links to (recursively through markdown
    files) at its repository path, and css/pygments.css."""
    from pygments.formatters import HtmlFormatter  # the docs extra installs Pygments (codehilite needs it)

    css = HtmlFormatter(style="default").get_style_defs(".highlight")
    files.append(File.generated(config, "css/pygments.css", content=css))
    work = [README] + sorted(DOCS.glob("*.md"))
    seen = set(work)
    while work:
        source = work.pop()
        for target in _targets(source.read_text(encoding="utf-8")):
            path = _resolve(source, target)
            if path in seen or not path.is_file() or ROOT not in path.parents or DOCS in path.parents:
                continue
            seen.add(path)
            if path == README:
                continue
            files.append(File(_site_path(path), str(ROOT), config["site_dir"], config["use_directory_urls"]))
            if path.suffix == ".md":
                work.append(path)
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    """The home page gets the README's text; the links of the README and of docs/*.md are rewritten from
    repository paths to site paths."""
    if page.file.src_uri == "index.md":
        source, markdown = README, README.read_text(encoding="utf-8")
    elif Path(page.file.abs_src_path).resolve().parent == DOCS:
        source = DOCS / page.file.src_uri
    else:
        return markdown  # a repository file added by on_files: its links are relative within its own folder

    def rewrite(match: re.Match) -> str:
        target, suffix = re.match(r"([^#?]*)(.*)", match.group(2)).groups()  # suffix: the #anchor or ?query
        if not target or ":" in target or target.startswith("/"):
            return match.group(0)
        path = _resolve(source, target)
        if not path.is_file():
            return match.group(0)  # left as written: the strict build reports it
        site_dir = posixpath.dirname(page.file.src_uri)
        new = posixpath.relpath(_site_path(path), site_dir or ".")
        return f"{match.group(1)}{new}{suffix}{match.group(3)}"

    return "".join(LINK.sub(rewrite, text) if prose else text for prose, text in _outside_code(markdown))
