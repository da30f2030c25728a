"""The harness's self-test: planted bugs it must catch, honest variants it must pass.

* :mod:`parity.selftest.bugs` - one deliberately wrong backend per class of bug seen in
  public attention code (``shared/design/window-semantics.md``), each written the way
  the bug looks in the wild: a wrong comparison, a dropped argument, a missing branch;
* :mod:`parity.selftest.honest` - backends that compute the same function by another
  algorithm (split-KV with a log-sum-exp merge, tiled online softmax, low-precision
  probabilities before PV, reversed key order); they differ only numerically and must
  pass;
* :mod:`parity.selftest.run` - runs both through the sweep machinery
  (:func:`parity.evaluate` over :func:`parity.strategies.generate`) and prints the
  detection table; ``python -m parity selftest``.
"""

from __future__ import annotations
