"""The README stays a five-minute read that starts with the two commands, its links resolve,
and no file cites documents a user's clone does not have.

The pages in docs/ are checked by `make docs` (mkdocs in strict mode: links, anchors, nav).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

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
