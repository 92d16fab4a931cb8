"""The `sieve` command: every sub-command module loads and `sieve list` shows every recipe."""
from __future__ import annotations

import importlib

from typer.testing import CliRunner

from sieve.cli import app
from sieve.registry import ATTACKS, DEFENSES

runner = CliRunner()


def test_every_command_module_registers_its_commands():
    expected = {"listing": {"list"}, "data": {"index", "search"}, "models": {"models"}, "attack": {"attack"},
                "audit": {"audit"}, "evaluate": {"eval", "report", "calibrate"}, "bench": {"bench"}}
    for m, commands in expected.items():
        mod = importlib.import_module(f"sieve.cli.{m}")
        registered = {c.name for c in app.registered_commands if c.callback.__module__ == mod.__name__}
        assert registered == commands, (m, registered)
    groups = {g.name for g in app.registered_groups}
    assert groups == {"ledger"}


def test_help_lists_commands():
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0
    for cmd in ("index", "search", "models", "attack", "audit", "eval", "report", "calibrate", "list", "bench"):
        assert cmd in res.output, cmd


def test_list_prints_one_line_per_recipe():
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    for name in DEFENSES.names() + ATTACKS.names():
        assert any(line.strip().startswith(name + " ") for line in lines), name
