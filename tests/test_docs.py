"""README.md stays true: it opens with the two set-up commands, and every
command and every option of the CLI appears in it."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from kernelmap.cli import COMMANDS, LazyGroup, cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _commands():
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        yield name, cli.get_command(ctx, name)


def test_readme_opens_with_the_two_setup_commands():
    first_block = re.search(r"```\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_ci_runs_the_readme_test_command():
    ci = (Path(__file__).resolve().parents[1] / ".ci/run").read_text()
    assert "make test" in ci


def test_every_command_is_loadable():
    for name in COMMANDS:
        assert isinstance(LazyGroup._load(name), click.Command), name
    assert LazyGroup._load("no-such-command") is None


@pytest.mark.parametrize("name, command", list(_commands()))
def test_every_command_and_option_is_in_the_readme(name, command):
    assert re.search(rf"kernelmap {name}\b", README), f"README shows no example of `kernelmap {name}`"
    commands = [(name, command)]
    if isinstance(command, click.Group):
        commands += [(f"{name} {sub}", c) for sub, c in command.commands.items()]
    for full, cmd in commands:
        assert re.search(rf"kernelmap {full}\b", README), f"README shows no example of `kernelmap {full}`"
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in README, f"README does not mention `{full} {opt}`"


def test_every_command_has_an_example_in_its_help():
    for name, command in _commands():
        assert "Example" in (command.help or ""), f"`kernelmap {name} --help` shows no example"
