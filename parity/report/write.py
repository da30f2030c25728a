"""Every report of a run folder: ``report.html`` (:mod:`parity.report.html`), ``summary.md`` and
``junit.xml`` (:mod:`parity.report.text`), and ``coverage.csv``.

``write_all(out_dir)`` is what ``python -m parity run`` calls after a sweep, and what
``python -m parity report DIR`` calls on an existing folder (e.g. one copied from a GPU machine).
"""

from __future__ import annotations

from pathlib import Path

from .. import coverage
from ..expect import Expectations
from ..runfolder import Results
from .html import render_html
from .runs import Run, load_run
from .text import junit_xml, markdown_summary


def write_all(
    out_dir: Path | str,
    dest: Path | str | None = None,
    expectations: Expectations | None = None,
    rejudge: bool = False,
    results: Results | None = None,
) -> list[Path]:
    """Render the reports of the run in ``out_dir`` into ``dest`` (default: ``out_dir``).

    ``expectations`` (None: :func:`parity.expect.load`'s default) judge the rows that lack a
    verdict from them, or every row with ``rejudge`` (see :mod:`parity.report.runs`); ``results``:
    the folder's rows when already read (:func:`parity.runfolder.read_results`)."""
    from ..expect import load

    run = load_run(out_dir, load() if expectations is None else expectations, rejudge, results)
    return write_reports(run, dest if dest is not None else out_dir)


def write_reports(run: Run, dest: Path | str) -> list[Path]:
    """Write report.html, summary.md and junit.xml of a loaded ``run`` into ``dest``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = [coverage.write_csv(run.path, dest, rows=run.rows())]
    for name, text in (("report.html", render_html(run)), ("summary.md", markdown_summary(run)), ("junit.xml", junit_xml(run))):
        path = dest / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
