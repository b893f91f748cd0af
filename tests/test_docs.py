"""The README stays a five-minute read that starts with the two commands, its links resolve,
and no file cites documents a user's clone does not have.

The pages in docs/ are checked by `make docs` (mkdocs in strict mode: links, anchors, nav).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML, a dependency of mkdocs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 200
COMMANDS = [
    "```sh",
    "make demo    # simulate 4 weeks of a 128-GPU Slurm fleet, import, load, build, report, "
    "emails, notices",
    "make test    # lint, type-check and run every test (creates .venv, installs what it needs)",
    "```",
]
# Citations of the design documents the project was built from, which are not in the
# repository. The patterns are split so that this file does not cite them itself.
CITATIONS = re.compile(
    "|".join(
        (
            r"\bCON" r"TRACT\b",  # "... section 6", "... §6", ".../CON" "TRACT.md"
            r"\bNVML" r"\.md\b",
            r"\.\./" r"shared\b",
        )
    )
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Folders of generated files, skipped where git cannot say what is ignored.
GENERATED = {"build", "dist", "data", "site", "__pycache__"}


def readme_lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def test_readme_is_short() -> None:
    lines = readme_lines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines; keep it under {MAX_README_LINES} and move the "
        "rest to a page in docs/"
    )


def test_readme_starts_with_the_two_commands() -> None:
    lines = readme_lines()
    if lines and lines[0].startswith("# "):  # the title
        lines = lines[1:]
    while lines and not lines[0].strip():
        lines = lines[1:]
    assert lines[: len(COMMANDS)] == COMMANDS


def slug(heading: str) -> str:
    """The anchor of a Markdown heading, as mkdocs and GitHub write it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, re.M)}


def test_readme_links_resolve() -> None:
    for target in LINK.findall(README.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else README
        assert page.is_file(), f"README.md links to {path}, which does not exist"
        if anchor:
            assert anchor in anchors(page), f"README.md links to {target}: no such heading"


def repository_files() -> list[Path]:
    """The files of the repository: tracked or not ignored, as git lists them; without git,
    every file outside hidden and generated folders."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        found: list[Path] = []
        for directory, folders, files in os.walk(ROOT):
            folders[:] = [
                name
                for name in folders
                if not name.startswith(".")
                and name not in GENERATED
                and not name.endswith(".egg-info")
            ]
            found += [Path(directory) / name for name in files]
        return found
    paths = (ROOT / name for name in listed.decode().split("\0") if name)
    return [path for path in paths if path.is_file() and not path.is_symlink()]


# For the lead: this test fails until every helper of issue #37 has replaced the citations
# in its own files (gpufleet/warehouse/, gpufleet/cli/, collectors/, docs/warehouse.md).
def test_no_file_cites_documents_outside_the_repository() -> None:
    citing: list[str] = []
    for path in repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # pictures and other binary files
        for number, line in enumerate(text.splitlines(), start=1):
            if CITATIONS.search(line):
                citing.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not citing, "cite docs/reference.md (or say the fact) instead:\n" + "\n".join(citing)


# The site (mkdocs.yml, docs/): a navigation in five groups that holds every page once, and
# a build that needs no network, whose pages fetch nothing from another host either.
MKDOCS_YML = ROOT / "mkdocs.yml"
DOCS = ROOT / "docs"
NAV_GROUPS = ["Get started", "Deploy", "Use", "Reference", "Internals"]
# Plugins that build from the repository alone: material's search indexes the pages here,
# mkdocstrings reads the source. Others (material's privacy, social or optimize plugins,
# mkdocstrings' inventories) download at build time.
OFFLINE_PLUGINS = {"search", "autorefs", "mkdocstrings"}
# A script, stylesheet, font or image a page loads from another host (links to read on
# are fine): the site must work where the pipeline host has no internet access.
REMOTE_ASSET = re.compile(
    r"<(?:script|img|iframe)\b[^>]*\bsrc=\"(?:https?:)?//"
    r"|<link\b[^>]*\bhref=\"(?:https?:)?//"
    r"|@import\s+url\([\"']?(?:https?:)?//"
    r"|fonts\.googleapis\.com|fonts\.gstatic\.com"
)


def mkdocs_config() -> dict[str, Any]:
    config = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def test_the_nav_has_five_groups_that_hold_every_page_once() -> None:
    nav = mkdocs_config()["nav"]
    assert [next(iter(group)) for group in nav] == NAV_GROUPS
    pages: list[str] = []
    for group in nav:
        [entries] = group.values()
        for entry in entries:
            [page] = entry.values()
            assert isinstance(page, str), f"{entry}: one level of pages in a group"
            pages.append(page)
    repeated = sorted({page for page in pages if pages.count(page) > 1})
    assert not repeated, f"in the nav more than once: {repeated}"
    on_disk = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk


def test_the_site_is_built_without_downloads() -> None:
    config = mkdocs_config()
    assert config["theme"]["name"] == "material"
    assert config["theme"]["font"] is False, "font: false, or the pages load Google Fonts"
    names = [next(iter(p)) if isinstance(p, dict) else p for p in config.get("plugins", [])]
    assert set(names) <= OFFLINE_PLUGINS, f"may download: {set(names) - OFFLINE_PLUGINS}"
    python = config["plugins"][names.index("mkdocstrings")]["mkdocstrings"]["handlers"]["python"]
    assert "inventories" not in python and "import" not in python


def offline(command: list[str]) -> list[str]:
    """`command` in a network namespace of its own (no network at all) where this machine
    allows one, else as it is."""
    try:
        subprocess.run(["unshare", "--net", "true"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return command
    return ["unshare", "--net", *command]


@pytest.mark.slow
def test_the_site_builds_offline_with_the_api_and_no_remote_assets(tmp_path: Path) -> None:
    site = tmp_path / "site"
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run(
        offline([str(mkdocs), "build", "--strict", "--site-dir", str(site)]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = [
        f"{path.relative_to(site)}: {match.group(0)}"
        for path in site.rglob("*")
        if path.suffix in {".html", ".css", ".js"}
        for match in REMOTE_ASSET.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not remote, "the pages load from other hosts:\n" + "\n".join(remote[:20])
    # Every public method of the analyst API is on the generated page.
    from gpufleet.analyst import ReadOnlyWarehouse

    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="gpufleet.open"' in api
    methods = [name for name in vars(ReadOnlyWarehouse) if not name.startswith("_")]
    missing = [m for m in methods if f'id="gpufleet.analyst.ReadOnlyWarehouse.{m}"' not in api]
    assert not missing, f"docs/api.md lacks {missing}"
