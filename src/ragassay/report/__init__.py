"""Reports: the self-contained HTML report with inline SVG plots.

``render_report(data, out_dir)`` renders a plain, JSON-serializable dict (see ``docs/report.md``) to
``out_dir/index.html``. This package reads no store and runs no analysis; callers build the dict.
"""

from ragassay.report.html import render_report

__all__ = ["render_report"]
