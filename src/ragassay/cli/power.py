"""`ragassay power`: minimum detectable effect for n pairs, or pairs needed for a target effect."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from ragassay.cli.common import EXIT_USAGE, console
from ragassay.errors import InputError
from ragassay.stats.power import mde_paired, n_for_mde, sigma_d


def read_diffs(path: Path) -> np.ndarray:
    """Read one column of per-item differences (text or CSV). Blank lines and '#' comments are skipped, a
    non-numeric first line is taken as a header, and 'nan' marks an undefined item. Errors name file:line."""
    fix = "pass a one-column text/CSV file of per-item differences"
    if path.is_dir():
        raise InputError(f"{path}: is a folder; {fix}")
    if not path.is_file():
        raise InputError(f"{path}: file not found; {fix}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte offset {e.start}); {fix}") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read the file ({e.strerror}); {fix}") from None
    values: list[float] = []
    seen_content = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",") if c.strip()]
        if len(cells) != 1:
            raise InputError(
                f"{path}:{lineno}: expected one column, got {line!r}; keep only the difference column"
            )
        try:
            value = float(cells[0])
        except ValueError:
            if seen_content:
                raise InputError(
                    f"{path}:{lineno}: {cells[0]!r} is not a number; one difference per line"
                ) from None
        else:
            if math.isinf(value):
                raise InputError(f"{path}:{lineno}: {cells[0]!r} is infinite; a difference must be finite "
                                 "(write nan for an undefined item)")
            values.append(value)
        seen_content = True
    if not values:
        raise InputError(f"{path}: no numbers found; one per-item difference per line")
    return np.asarray(values, dtype=np.float64)


def _check_flags(sigma: float | None, n: int | None, mde: float | None, alpha: float, power: float) -> None:
    """Every flag's range, checked before any arithmetic, one problem per line."""
    problems = []
    if sigma is not None and not (math.isfinite(sigma) and sigma > 0):
        problems.append(f"--sigma-d must be a finite number > 0, got {sigma}")
    if n is not None and n < 2:
        problems.append(f"--n must be at least 2 paired items (a paired test on fewer has no degrees of "
                        f"freedom), got {n}")
    if mde is not None and not (math.isfinite(mde) and mde > 0):
        problems.append(f"--mde must be a finite effect > 0, got {mde}")
    for flag, p in (("--alpha", alpha), ("--power", power)):
        if not (0 < p < 1):
            problems.append(f"{flag} must lie strictly between 0 and 1, got {p}")
    if problems:
        raise InputError("\n".join(problems))


def power_command(
    sigma_d_: Annotated[
        float | None, typer.Option("--sigma-d", help="SD of per-item differences (B - A).")
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="Number of paired items: prints the MDE.")] = None,
    mde: Annotated[float | None, typer.Option("--mde", help="Target effect: prints the n needed.")] = None,
    diffs: Annotated[
        Path | None,
        typer.Option("--diffs", help="One-column text/CSV of per-item differences; estimates sigma_d."),
    ] = None,
    alpha: Annotated[float, typer.Option("--alpha", help="Two-sided significance level.")] = 0.05,
    power: Annotated[float, typer.Option("--power", help="Desired power.")] = 0.80,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Minimum detectable effect of a paired comparison, or the n needed for a target effect."""
    try:
        _check_flags(sigma_d_, n, mde, alpha, power)
        out: dict = {"alpha": alpha, "power": power}
        if diffs is not None:
            if sigma_d_ is not None:
                raise InputError("give either --sigma-d or --diffs, not both")
            d = read_diffs(diffs)
            sigma_d_ = sigma_d(d)
            out["n_diffs"] = int((~np.isnan(d)).sum())
            out["n_nan"] = int(np.isnan(d).sum())
            if n is None:  # the MDE of the set the differences came from is always worth showing
                n = out["n_diffs"]
        if sigma_d_ is None:
            raise InputError("need --sigma-d S or --diffs FILE (e.g. ragassay power --sigma-d 0.25 --n 60)")
        if n is None and mde is None:
            raise InputError("need --n N (prints the MDE) or --mde D (prints the n needed)")
        out["sigma_d"] = float(sigma_d_)
        if n is not None:
            out["n"] = int(n)
            out["mde"] = mde_paired(n, sigma_d_, alpha, power)
        if mde is not None:
            out["target_mde"] = float(mde)
            out["n_required"] = n_for_mde(mde, sigma_d_, alpha, power)
    except InputError as exc:
        for line in str(exc).splitlines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(code=EXIT_USAGE) from None
    if as_json:
        typer.echo(json.dumps(out))
        return
    src = f" (estimated from {out['n_diffs']} differences)" if "n_diffs" in out else ""
    console.print(f"sigma_d = {out['sigma_d']:.4f}{src}, alpha = {alpha}, power = {power}")
    if "mde" in out:
        console.print(f"n = {out['n']}: minimum detectable effect [bold]{out['mde']:.3f}[/bold]")
    if "n_required" in out:
        console.print(f"effect {out['target_mde']}: needs [bold]n = {out['n_required']}[/bold] paired items")


def register(app: typer.Typer) -> None:
    """Add the `power` command to the ragassay application."""
    app.command("power")(power_command)
