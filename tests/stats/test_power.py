"""Power / MDE against the spec's table, round trips, and the `ragassay power` command."""

import json

import numpy as np
import pytest
import typer
from scipy.stats import norm
from typer.testing import CliRunner

from ragassay.errors import InputError
from ragassay.stats import ci_width_curve, mde_paired, n_for_mde, power_paired, sigma_d

SPEC_TABLE = [(0.15, 0.054, 0.027, 197), (0.25, 0.090, 0.044, 546), (0.40, 0.145, 0.071, 1396)]


@pytest.mark.parametrize("sd, mde60, mde250, n03", SPEC_TABLE)
def test_spec_mde_table(sd, mde60, mde250, n03):
    assert round(mde_paired(60, sd), 3) == mde60
    assert round(mde_paired(250, sd), 3) == mde250
    assert n_for_mde(0.03, sd) == n03


@pytest.mark.parametrize(
    "sd, delta, alpha, pw", [(0.3, 0.02, 0.05, 0.8), (0.1, 0.01, 0.01, 0.9), (0.5, 0.1, 0.1, 0.95)]
)
def test_n_for_mde_is_the_smallest_sufficient_n(sd, delta, alpha, pw):
    n = n_for_mde(delta, sd, alpha, pw)
    assert mde_paired(n, sd, alpha, pw) <= delta + 1e-12
    assert n == 1 or mde_paired(n - 1, sd, alpha, pw) > delta


def test_mde_uses_exact_normal_quantiles():
    z = norm.ppf(0.975) + norm.ppf(0.8)
    assert mde_paired(100, 1.0) == pytest.approx(z / 10, rel=1e-14)
    assert mde_paired(100, 1.0, alpha=0.01, power=0.9) == pytest.approx(
        (norm.ppf(0.995) + norm.ppf(0.9)) / 10
    )


def test_power_at_mde_is_the_requested_power():
    sd, n = 0.25, 60
    # The far tail adds a negligible amount (~1e-9 here).
    assert power_paired(n, mde_paired(n, sd), sd) == pytest.approx(0.8, abs=1e-6)


def test_sigma_d_ddof_and_nan():
    d = np.array([0.0, 1.0, -1.0, 0.0, np.nan])
    assert sigma_d(d) == pytest.approx(np.std([0, 1, -1, 0], ddof=1))
    assert sigma_d(d, ddof=0) == pytest.approx(np.std([0, 1, -1, 0]))
    with pytest.raises(InputError, match="at least 2"):
        sigma_d([0.3, np.nan])


def test_zero_sigma_gives_zero_mde_and_one_item():
    assert mde_paired(10, 0.0) == 0.0
    assert n_for_mde(0.01, 0.0) == 1


@pytest.mark.parametrize(
    "kw", [dict(n=0, sigma_d=0.1), dict(n=10, sigma_d=-1), dict(n=10, sigma_d=0.1, alpha=0)]
)
def test_mde_bad_inputs(kw):
    with pytest.raises(InputError):
        mde_paired(**kw)


def test_n_for_mde_rejects_nonpositive_target():
    with pytest.raises(InputError, match="> 0"):
        n_for_mde(0.0, 0.2)


def test_ci_width_curve_tracks_normal_width_and_shrinks():
    d = np.random.default_rng(0).normal(0.02, 0.25, size=400)
    pts = ci_width_curve(d, [40, 160, 640], n_resamples=3000, seed=1)
    widths = [p.width_bootstrap for p in pts]
    assert widths[0] > widths[1] > widths[2]
    for p in pts:
        assert p.width_bootstrap == pytest.approx(p.width_normal, rel=0.08)
    # Quadrupling n halves the width.
    assert widths[0] / widths[1] == pytest.approx(2.0, rel=0.1)


def test_ci_width_curve_rejects_bad_sizes():
    with pytest.raises(InputError):
        ci_width_curve([0.1, 0.2, 0.3], [0])


@pytest.fixture()
def cli():
    from ragassay.cli.power import register

    app = typer.Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer in multi-command mode, as in the real app
        pass

    return app


def test_cli_prints_mde(cli):
    res = CliRunner().invoke(cli, ["power", "--sigma-d", "0.25", "--n", "60"])
    assert res.exit_code == 0 and "0.090" in res.output


def test_cli_json_n_for_mde(cli):
    res = CliRunner().invoke(cli, ["power", "--sigma-d", "0.40", "--mde", "0.03", "--json"])
    out = json.loads(res.output)
    assert out["n_required"] == 1396 and out["sigma_d"] == 0.4


def test_cli_estimates_sigma_from_diffs_file(cli, tmp_path):
    d = np.random.default_rng(3).normal(0, 0.2, size=50)
    f = tmp_path / "diffs.csv"
    f.write_text("delta\n" + "\n".join(f"{x:.6f}" for x in d) + "\nnan\n")
    res = CliRunner().invoke(cli, ["power", "--diffs", str(f), "--mde", "0.05", "--json"])
    out = json.loads(res.output)
    expected = np.std(np.round(d, 6), ddof=1)
    assert out["sigma_d"] == pytest.approx(expected, rel=1e-9)
    assert out["n_diffs"] == 50 and out["n_nan"] == 1
    assert out["n"] == 50 and out["mde"] == pytest.approx(mde_paired(50, expected))
    assert out["n_required"] == n_for_mde(0.05, expected)


def test_cli_bad_file_line_names_file_and_line(cli, tmp_path):
    f = tmp_path / "d.txt"
    f.write_text("0.1\n0.2\noops\n")
    res = CliRunner().invoke(cli, ["power", "--diffs", str(f), "--n", "10"])
    assert res.exit_code == 2 and f"{f}:3" in res.output


def test_cli_missing_arguments_exit_nonzero(cli):
    res = CliRunner().invoke(cli, ["power", "--n", "60"])
    assert res.exit_code == 2 and "--sigma-d" in res.output
    res = CliRunner().invoke(cli, ["power", "--sigma-d", "0.2"])
    assert res.exit_code == 2 and "--mde" in res.output
