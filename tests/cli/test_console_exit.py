"""The `ragassay` executable ends without tearing the interpreter down, and loses nothing by it: exit codes,
every byte of stdout and stderr, and the exit handlers are those of an ordinary exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from ragassay import __version__


def _run(code: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "drive.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def test_exit_codes_and_output_are_the_commands(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "ragassay", "--version"], capture_output=True, text=True,
                        timeout=120)
    assert (ok.returncode, ok.stdout.strip()) == (0, __version__)
    bad = subprocess.run([sys.executable, "-m", "ragassay", "runs", "--store", str(tmp_path / "none" / "x.duckdb")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    helped = subprocess.run([sys.executable, "-m", "ragassay", "--help"], capture_output=True, text=True,
                            timeout=120)
    from ragassay.cli.app import COMMANDS

    assert helped.returncode == 0 and all(name in helped.stdout for name in COMMANDS)


def test_exit_handlers_run_and_buffered_output_is_flushed(tmp_path):
    res = _run(f"""
        import atexit, sys
        atexit.register(lambda: open({str(tmp_path / "handler")!r}, "w").write("ran"))
        sys.argv = ["ragassay", "--version"]
        sys.stdout.write("x" * 100000)  # still in the buffer when the command returns
        from ragassay.cli.app import console_main
        console_main()
        """, tmp_path)
    assert res.returncode == 0
    assert res.stdout == "x" * 100000 + __version__ + "\n"
    assert (tmp_path / "handler").read_text() == "ran"


def test_a_running_non_daemon_thread_gets_the_ordinary_exit(tmp_path):
    res = _run(f"""
        import sys, threading, time
        def work():
            time.sleep(0.5)
            open({str(tmp_path / "thread")!r}, "w").write("done")
        threading.Thread(target=work).start()
        sys.argv = ["ragassay", "--version"]
        from ragassay.cli.app import console_main
        console_main()
        """, tmp_path)
    assert res.returncode == 0
    assert (tmp_path / "thread").read_text() == "done"  # the interpreter waited for it, as it always does


def test_sys_exit_with_a_message_prints_it_and_exits_1(tmp_path):
    res = _run("""
        import sys
        import ragassay.cli.app as app
        def main():
            sys.exit("stopped: no store")
        app.main = main
        app.console_main()
        """, tmp_path)
    assert (res.returncode, res.stderr) == (1, "stopped: no store\n")
