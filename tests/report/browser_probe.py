"""Headless Chromium helpers shared by the browser tests and benchmarks/report_scale.py: run a page with a
probe script appended after the report's own, and read what the probe wrote on <body> from --dump-dom."""

from __future__ import annotations

import html as htmllib
import re
import shutil
import subprocess
from pathlib import Path

# Appended after the report's script: the time from navigation start to here is the load time (HTML parsed,
# data read, first page of rows drawn); then one column is sorted by a click, which sorts and redraws
# synchronously, so the time around click() is what a reader waits.
TIMING_PROBE = """<script>
(function () {
  var loaded = performance.now();
  var t = document.getElementById("queries");
  var th = t.tHead.querySelectorAll("th[data-type=num]")[0];
  var t0 = performance.now(); th.click(); var sort = performance.now() - t0;
  document.body.setAttribute("data-load-ms", loaded.toFixed(1));
  document.body.setAttribute("data-sort-ms", sort.toFixed(1));
  document.body.setAttribute("data-ready-seen", t.getAttribute("data-ready"));
  document.body.setAttribute("data-rows", t.tBodies.length);
  document.body.setAttribute("data-first", t.tBodies[0].rows[0].cells[0].textContent);
})();
</script>"""


def chromium_path() -> str | None:
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    return exe


def run_chromium(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError("headless Chromium not found at /usr/bin/chromium: run `apt-get install chromium`")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-extensions",
           f"--user-data-dir={profile}", "--virtual-time-budget=2000", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def body_attrs(dom: str) -> dict[str, str]:
    body = re.search(r'<body((?:[^>"]|"[^"]*")*)>', dom).group(1)
    return {k: htmllib.unescape(v) for k, v in re.findall(r'(data-[a-z-]+)="([^"]*)"', body)}


def time_page(page: Path, tmp: Path) -> dict:
    """Load and first-sort times (ms) of a report in headless Chromium, and what the probe saw."""
    probe = page.with_name("timing-probe.html")
    # the page's CSP admits only its own script by hash; the probe is a second script, so the policy goes
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text(encoding="utf-8"), count=1)
    probe.write_text(html.replace("</body>", TIMING_PROBE + "\n</body>"), encoding="utf-8")
    try:
        dom = run_chromium(["--dump-dom", probe.as_uri()], tmp / "chromium-profile").stdout
    finally:
        probe.unlink()
    a = body_attrs(dom)
    return {"load_ms": float(a["data-load-ms"]), "sort_ms": float(a["data-sort-ms"]),
            "ready": a.get("data-ready-seen"), "rows": int(a["data-rows"]), "first": a["data-first"]}
