"""The documentation stays true: the README is the front door (the two
set-up commands first, at most about 150 lines), every command has its page
in the docs site with every option in its prose and its reference generated
from the command itself, and the site builds with no warning (broken links
and anchors included)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from kernelmap.cli import COMMANDS, LazyGroup, cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def _commands():
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        yield name, cli.get_command(ctx, name)


def _nav_pages(nav) -> list[str]:
    """Every page file named in mkdocs.yml's nav, walked without recursion."""
    pages, stack = [], [nav]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            pages.append(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return pages


def _mkdocs_config() -> dict:
    # mkdocs.yml may hold !!python tags in general; this one holds plain YAML
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_readme_opens_with_the_two_setup_commands():
    first_block = re.search(r"```\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M) and re.search(r"^docs:", makefile, re.M)


def test_readme_is_the_front_door():
    """About 150 lines: what kernelmap is, the set-up and what it installs
    (Debian packages as root; torch 2.13 beside a 2.6.0 tree), the five questions."""
    assert len(README.splitlines()) <= 160
    assert "as root" in README.lower() and "apt-get" in README
    assert "torch==2.13.0" in README and "2.6.0" in README
    questions = re.findall(r"^\*\*(\d)\. ", README, re.M)
    assert questions == ["1", "2", "3", "4", "5"]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci/run").read_text()
    assert "make test" in ci


def test_every_command_is_loadable():
    for name in COMMANDS:
        assert isinstance(LazyGroup._load(name), click.Command), name
    assert LazyGroup._load("no-such-command") is None


def test_every_page_under_docs_is_in_the_nav():
    nav = set(_nav_pages(_mkdocs_config()["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav


@pytest.mark.parametrize("name, command", list(_commands()))
def test_every_command_and_option_is_on_its_page(name, command):
    page = DOCS / "commands" / f"{name}.md"
    assert page.is_file(), f"no docs/commands/{name}.md (see docs/contributing.md)"
    assert f"commands/{name}.md" in _nav_pages(_mkdocs_config()["nav"]), f"docs/commands/{name}.md is not in mkdocs.yml's nav"
    text = page.read_text()
    prose, _, reference = text.partition("\n## Reference\n")
    module, attr = COMMANDS[name].split(":")
    assert f":module: {module}\n" in reference and f":command: {attr}\n" in reference, f"{page.name}: no generated reference of {name}"
    commands = [(name, command)]
    if isinstance(command, click.Group):
        commands += [(f"{name} {sub}", c) for sub, c in command.commands.items()]
    shared = (DOCS / "options.md").read_text() if "(../options.md)" in prose else ""
    for full, cmd in commands:
        assert re.search(rf"kernelmap {full}\b", prose), f"{page.name} shows no example of `kernelmap {full}`"
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in prose or f"`{opt}" in shared, f"{page.name} does not mention `{full} {opt}`"


def test_every_command_has_an_example_in_its_help():
    for name, command in _commands():
        assert "Example" in (command.help or ""), f"`kernelmap {name} --help` shows no example"


def test_the_docs_build_with_no_warning(tmp_path):
    """`make docs`'s build: --strict turns every warning (a link to a missing
    page or anchor, a page not in nav, a reference mkdocs-click cannot
    generate) into a failure."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    where = (tmp_path / "site/commands/where/index.html").read_text()
    assert "--inference-mode" in where and "Show this message and exit." in where  # the generated reference
    questions = (tmp_path / "site/questions/index.html").read_text()
    assert "cudnnConvolutionForward" in questions  # the README's recipes, included


def test_readme_links_and_files_exist():
    """A path the README names (docs/..., scripts/..., examples/..., tests/...) exists."""
    for path in re.findall(r"`((?:docs|scripts|examples|tests)/[\w./-]+)`", README):
        assert (ROOT / path).exists(), path
    for target in re.findall(r"\]\(([^)#:]+)\)", README):
        assert (ROOT / target).exists(), target
