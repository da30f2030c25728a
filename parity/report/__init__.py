"""Reports of run folders, data apart from rendering (as pytest-html's ``report_data``).

* :mod:`~parity.report.runs` - the run loader: results.csv, environment.json, masks, decode results;
* :mod:`~parity.report.data` - the data layer: counts, worst rows, status, coverage, decode series;
* :mod:`~parity.report.html` - report.html; :mod:`~parity.report.text` - summary.md and junit.xml
  (neither renderer imports the other; both import the data layer and the loader);
* :mod:`~parity.report.svg` - inline-SVG plots for the HTML;
* :mod:`~parity.report.write` - ``write_all`` / ``write_reports``: every report of a run folder;
* :mod:`~parity.report.diff` - what changed between two runs; :mod:`~parity.report.merge` - one
  run folder from several.

The commands (``parity report``, ``diff``, ``merge``) are in :mod:`parity.cli`.
"""
