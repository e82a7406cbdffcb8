"""The documentation stays true: every Python example of README.md and docs/*.md runs, every relative link names an
existing file (and heading) as GitHub resolves it, headings get the same #anchor on GitHub and in the site, and the
site builds with `mkdocs build --strict` (when mkdocs is installed; CI installs it and also builds the site itself).

An example is skipped only when the line before its fence says so (docs/development.md): `<!-- docs-test: skip
(reason) -->`, or `<!-- docs-test: data -->` for one that needs the data root, run when the data root exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, data_root

DOCS = PROJECT_ROOT / "docs"
PAGES = [PROJECT_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCED = re.compile(r"^ *```.*?^ *```[ \t]*$", re.S | re.M)
PYTHON_BLOCK = re.compile(
    r"^(?:<!-- docs-test: (?P<marker>[^\n]*?) -->\n)?```python\n(?P<code>.*?)^```[ \t]*$", re.S | re.M
)
MARKER = re.compile(r"^<!-- docs-test: (?P<marker>[^\n]*?) -->$", re.M)  # a marker is a line of its own
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$", re.M)


def _relative(path: Path) -> str:
    return path.relative_to(PROJECT_ROOT).as_posix()


def _prose(text: str) -> str:
    """The markdown without its fenced code blocks (their lines kept empty, so that line numbers stay)."""
    return FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _examples() -> list:
    params = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in PYTHON_BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))  # the line of the opening fence
            marker = match.group("marker")
            marks = [pytest.mark.data] if marker == "data" else []
            if marker is not None and marker.startswith("skip"):
                marks.append(pytest.mark.skip(reason=f"{_relative(page)}:{line}: {marker}"))
            params.append(pytest.param(match.group("code"), marker, id=f"{_relative(page)}:{line}", marks=marks))
    return params


EXAMPLES = _examples()


def test_every_python_block_is_collected():
    """A python fence the pattern misses (indented, say) would silently go untested."""
    fences = sum(len(re.findall(r"```python\b", page.read_text(encoding="utf-8"))) for page in PAGES)
    assert fences == len(EXAMPLES) >= 10


def test_markers_are_known_and_precede_a_python_example():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in MARKER.finditer(text):
            where = f"{_relative(page)}:{text.count(chr(10), 0, match.start()) + 1}"
            marker = match.group("marker")
            assert marker == "data" or re.fullmatch(r"skip \(.+\)", marker), f"{where}: unknown marker {marker!r}"
            assert text.startswith("\n```python\n", match.end()), f"{where}: the marker must precede a ```python fence"


@pytest.mark.parametrize("code, marker", EXAMPLES)
def test_python_example_runs(code, marker):
    if marker == "data" and data_root() is None:
        pytest.skip("needs the data root (../shared/data or $RAISE_EVAL_DATA)")
    # The examples are tiny: one thread is as fast as two and cannot stall on a loaded machine (tests/conftest.py).
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"example failed:\n{code}\n{result.stderr[-4000:]}"


def github_anchor(heading: str) -> str:
    """The #anchor GitHub gives a heading: the text (code spans and links reduced to their text) lowercased,
    everything but letters, digits, spaces, hyphens and underscores removed, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def site_anchor(heading: str) -> str:
    """The #anchor of the site (Python-Markdown's toc.slugify, mkdocs' default)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(page: Path) -> list[str]:
    return [m.group(2) for m in HEADING.finditer(_prose(page.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_headings_have_one_anchor_on_github_and_in_the_site(page):
    anchors = [github_anchor(h) for h in headings(page)]
    assert [site_anchor(h) for h in headings(page)] == anchors, "a heading GitHub and mkdocs would link differently"
    duplicates = sorted({a for a in anchors if anchors.count(a) > 1})
    assert not duplicates, f"headings that share an anchor (numbered differently by GitHub and mkdocs): {duplicates}"


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_relative_links_name_existing_files_and_headings(page):
    """Links are relative to the file that holds them, as GitHub resolves them (the README's to docs/page.md)."""
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path_part, _, anchor = target.partition("#")
        if target.startswith("/"):
            broken.append(f"{target} (absolute: GitHub and the site resolve it differently)")
            continue
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in {github_anchor(h) for h in headings(path)}:
            broken.append(f"{target} (no heading with that anchor in {_relative(path)})")
    assert not broken, f"{_relative(page)}: broken links: {broken}"


def test_readme_links_to_every_docs_page():
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    linked = {m.split("#")[0] for m in LINK.findall(readme) if m.startswith("docs/")}
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md") if p.name != "index.md"}
    assert pages <= linked, f"docs pages the README does not link: {sorted(pages - linked)}"


def test_datasets_page_table_is_current():
    from raise_eval.io.datasets import dataset_table

    assert dataset_table() in (DOCS / "datasets.md").read_text(encoding="utf-8"), (
        "docs/datasets.md's table is stale: paste raise_eval.io.datasets.dataset_table()"
    )


def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()
    # The home page is the README: its quick start is there, with its links rewritten to the site's pages.
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Quick start: the embedded default" in home and 'href="methods.html#certified-evaluation"' in home
    _check_works_from_disk_offline(tmp_path / "site")


def _check_works_from_disk_offline(site: Path) -> None:
    """Issue 24: opened from disk (file://) every link lands on a page, not a directory listing; code is highlighted
    at build time (nothing fetched from a CDN); wide tables wrap (css/site.css)."""
    pages = sorted(site.rglob("*.html"))
    for page in pages:
        if page.name == "404.html":  # served by a web server only: its links are absolute on purpose
            continue
        html = page.read_text(encoding="utf-8")
        for target in re.findall(r'(?:href|src)="([^"]*)"', html):
            if ":" in target or target.startswith("#"):
                assert not re.match(r"https?://[^/]*(cdn|googleapis)", target), (page, target)
                continue
            path = target.split("#")[0].split("?")[0]
            if path:
                resolved = (page.parent / path).resolve()
                assert resolved.is_file(), f"{page.relative_to(site)} links to {target}, not a file"
        assert "highlight.js" not in html and "hljs" not in html, page
    api = (site / "api.html").read_text(encoding="utf-8")
    assert re.search(r'<div class="highlight"><pre><span></span><code><span class="kn">import</span>', api)
    assert ".highlight .kn" in (site / "css" / "pygments.css").read_text(encoding="utf-8")
    css = (site / "css" / "site.css").read_text(encoding="utf-8")
    assert re.search(r"table td,\s*\.wy-table-responsive table th \{\s*white-space: normal;", css)


def _option_rows(page: str, heading: str) -> dict[str, str]:
    """{flag: default cell} of the options table under `heading` in a docs page, a row's flags and its
    comma-separated defaults paired in order (a row's single default stands for all its flags)."""
    text = (PROJECT_ROOT / "docs" / page).read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`-"):
            continue
        flags = re.findall(r"`(--[a-z-]+)", cells[0])
        defaults = [d.strip().strip("`") for d in cells[1].split(", ")] if cells[1] else []
        for i, flag in enumerate(flags):
            if len(defaults) == len(flags):
                rows[flag] = defaults[i]
            elif len(defaults) == 1:
                rows[flag] = defaults[0]
            else:
                rows[flag] = ""
    return rows


@pytest.mark.parametrize("command, heading", [("evaluate", "## raise-eval evaluate"), ("bdmc", "## raise-eval bdmc")])
def test_the_command_reference_lists_every_option_with_its_declared_default(command, heading):
    """docs/cli.md's tables against the settings' declarations (where the defaults are stated once): every option
    of the command has a row, and a default the table states is the declared one (counts, numbers, choices)."""
    from raise_eval.cli import evaluate as evaluate_command
    from raise_eval.cli import bdmc as bdmc_command
    from raise_eval.settings import declarations

    module = {"evaluate": evaluate_command, "bdmc": bdmc_command}[command]
    rows = _option_rows("cli.md", heading)
    classes = [entry if isinstance(entry, tuple) else (entry, ()) for entry in module.SETTINGS]
    for cls, left_out in classes:
        for spec in declarations(cls):
            if spec.flag is None or not spec.flag.startswith("-") or spec.name in left_out:
                continue
            assert spec.flag in rows, f"docs/cli.md's {command} table has no row for {spec.flag}"
            stated = rows[spec.flag]
            if spec.default is None or spec.kind in ("flag", "threads", "any") or not stated:
                continue
            declared = " ".join(str(v) for v in spec.default) if spec.kind == "counts" else str(spec.default)
            declared = declared[:-2] if declared.endswith(".0") else declared
            assert stated == declared, f"docs/cli.md says {spec.flag} defaults to {stated!r}; it is {declared!r}"


def test_the_version_the_docs_show_is_the_packages():
    """docs/cli.md's `raise-eval --version` example names the version being documented (it showed 0.2.0 in 0.3)."""
    from raise_eval import __version__

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    shown = re.findall(r"`raise-eval (\d+\.\d+\.\d+\S*) \(torch ", text)
    assert shown, "docs/cli.md no longer shows the output of `raise-eval --version`: update this test"
    assert shown == [__version__] * len(shown), f"docs/cli.md shows raise-eval {shown}, the package is {__version__}"
