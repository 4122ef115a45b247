"""The root command line: lazy command loading, --version, and the error contract for whatever escapes."""

import json
import subprocess
import sys
import types

import pytest
import typer

from ragassay import __version__
from ragassay.cli import app as app_module
from ragassay.cli.app import COMMANDS, main
from ragassay.cli.common import console, esc

HEAVY = ("numpy", "scipy", "duckdb", "pyarrow", "rapidfuzz", "pandas", "numba", "bm25s", "pydantic")


def _run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter; it prints a JSON document."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_help_lists_every_command_without_importing_any_command_module():
    res = _fresh(
        "import io, json, sys, contextlib\n"
        "from ragassay.cli.app import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit as e:\n"
        "        code = e.code\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "cmds = sorted(m for m in sys.modules if m.startswith('ragassay.cli.') and m not in "
        "('ragassay.cli.app', 'ragassay.cli.common'))\n"
        "print(json.dumps({'code': code, 'help': buf.getvalue(), 'heavy': heavy, 'cmds': cmds}))\n"
    )
    assert res["code"] == 0
    assert res["heavy"] == [] and res["cmds"] == []
    text = " ".join(res["help"].split())
    for name, (_, help_text) in COMMANDS.items():
        assert f" {name} " in text
        assert " ".join(help_text.split()[:4]) in text, name


def test_running_a_command_imports_only_its_own_module():
    res = _fresh(
        "import json, sys\n"
        "from ragassay.cli.app import main\n"
        "try:\n"
        "    main(['power', '--sigma-d', '0.25', '--n', '60', '--json'])\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "cmds = sorted(m for m in sys.modules if m.startswith('ragassay.cli.') and m not in "
        "('ragassay.cli.app', 'ragassay.cli.common'))\n"
        "print(json.dumps({'code': code, 'cmds': cmds, 'duckdb': 'duckdb' in sys.modules}))\n"
    )
    assert res == {"code": 0, "cmds": ["ragassay.cli.power"], "duckdb": False}


@pytest.mark.parametrize("module", sorted({m for m, _ in COMMANDS.values()}))
def test_command_table_matches_what_each_module_registers(module):
    import importlib

    sub = typer.Typer()
    importlib.import_module(f"ragassay.cli.{module}").register(sub)
    registered = set(typer.main.get_group(sub).commands)
    assert registered == {name for name, (m, _) in COMMANDS.items() if m == module}


def test_command_help_is_the_full_help(capsys):
    code, out, _ = _run(["trec", "--help"], capsys)
    assert code == 0 and "--relevance-level" in out and "--per-query" in out


def test_version_prints_the_package_version(capsys):
    assert _run(["--version"], capsys) == (0, f"{__version__}\n", "")
    code, out, _ = _run(["--version", "power"], capsys)  # eager: wins over a command
    assert (code, out) == (0, f"{__version__}\n")


def test_unknown_command_and_typo(capsys):
    code, out, err = _run(["frobnicate"], capsys)
    assert code == 2 and out == ""
    assert err == "error: No such command 'frobnicate'; see 'ragassay --help'\n"
    code, _, err = _run(["rn"], capsys)
    assert code == 2 and "Did you mean 'run', 'runs'?" in err and err.startswith("error: ")


def test_no_command_shows_help_and_exits_2(capsys):
    code, out, err = _run([], capsys)
    assert code == 2 and "power" in out and err == "error: missing command; pick one of the commands listed above\n"


def test_bad_option_value_is_one_error_line(capsys):
    code, _, err = _run(["power", "--n", "many", "--sigma-d", "0.2"], capsys)
    assert code == 2 and err.startswith("error: Invalid value for '--n'") and err.count("\n") == 1
    assert "see 'ragassay power --help'" in err


def test_undecodable_argv_does_not_crash_the_error_printer(capsys):
    code, _, err = _run(["\udcff"], capsys)
    assert code == 2 and err == "error: No such command '\\udcff'; see 'ragassay --help'\n"


@pytest.fixture
def probe(monkeypatch):
    """A real command module, loaded through the lazy table like any other, that fails the way a command
    with a missed boundary would."""
    mod = types.ModuleType("ragassay.cli._probe")

    def register(app: typer.Typer) -> None:
        @app.command("probe")
        def probe_cmd(path: str, kind: str = "read") -> None:
            from pathlib import Path

            if kind == "read":
                Path(path).read_text(encoding="utf-8")
            elif kind == "bug":
                raise KeyError("a genuine bug")
            else:
                from ragassay.errors import InputError

                raise InputError(f"{path}: first [/bold] problem\nsecond :smile: problem")

    mod.register = register
    monkeypatch.setitem(sys.modules, "ragassay.cli._probe", mod)
    monkeypatch.setitem(COMMANDS, "probe", ("_probe", "Fail on purpose."))
    return mod


def test_os_error_escaping_a_command_becomes_one_error_line(probe, tmp_path, capsys):
    missing = tmp_path / "nope.txt"
    code, _, err = _run(["probe", str(missing)], capsys)
    assert (code, err) == (2, f"error: {missing}: No such file or directory\n")
    code, _, err = _run(["probe", str(tmp_path)], capsys)
    assert (code, err) == (2, f"error: {tmp_path}: Is a directory\n")
    with pytest.raises(FileNotFoundError):
        main(["probe", str(missing), "--debug"])


def test_decode_error_escaping_a_command_names_the_problem(probe, tmp_path, capsys):
    f = tmp_path / "latin1.txt"
    f.write_bytes(b"ok\ncaf\xe9\n")
    code, _, err = _run(["probe", str(f)], capsys)
    assert code == 2
    assert err == ("error: input is not valid utf-8 text: byte(s) e9 0a at byte offset 6 (invalid continuation "
                   "byte); save the file as UTF-8 (--debug shows which reader failed)\n")


def test_ragassay_errors_print_every_line_literally(probe, capsys):
    code, _, err = _run(["probe", "[bold]x", "--kind", "input"], capsys)
    assert code == 2
    assert err == "error: [bold]x: first [/bold] problem\nerror: second :smile: problem\n"


def test_a_genuine_bug_still_shows_its_traceback(probe):
    with pytest.raises(KeyError):
        main(["probe", "x", "--kind", "bug"])


@pytest.mark.parametrize("text", ["[/bold]", "[red]x[/red]", "a\\", ":smile:", "[link=http://x]y"])
def test_esc_makes_user_text_print_literally(text):
    with console.capture() as cap:
        console.print(f"[bold]{esc(text)}[/] ok")
    assert cap.get() == f"{text} ok\n"


def test_lazy_group_loads_each_module_once():
    group = typer.main.get_group(app_module.app)
    first = group.load("compare")
    assert group.load("gate") is group.commands["gate"] and group.load("compare") is first
    assert group.load("no-such-command") is None


def test_print_json_writes_undefined_as_null(capsys):
    import math

    import numpy as np

    from ragassay.cli.common import print_json

    class Row:
        def to_dict(self):
            return {"delta": math.nan, "ci": (0.1, float("nan"))}

    print_json({"mean": np.float64("nan"), "n": np.int64(3), "vals": np.array([1.0, np.nan]), "row": Row(),
                "ok": 0.5})
    out = capsys.readouterr().out
    assert "NaN" not in out
    assert json.loads(out) == {"mean": None, "n": 3, "vals": [1.0, None], "row": {"delta": None, "ci": [0.1, None]},
                               "ok": 0.5}
