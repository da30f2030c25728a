"""Scale a sweep past one machine / one GPU: shards of the cases, and lanes placed on GPUs.

Pure functions, save :func:`check_shard_folders` (reads ``environment.json``), :func:`cost_hints`
(builds the backends) and :func:`visible_gpus` (asks torch where ``CUDA_VISIBLE_DEVICES`` is unset);
the CLI, ``parity merge`` and the pytest plugin (``conftest.py``: ``--parity-shard``) call them.

What a shard is
---------------

A shard is **a subset of the cases; every backend of the run runs on all of them** (split by
case, as pytest-shard / pytest-split users expect). Not by (backend, configuration): then
``parity merge`` would have to stitch a backend's rows from several machines, a shard's
``results.csv`` would be a sparse matrix, and the per-machine backends' availability would
differ between shards of one backend. By case, each shard folder is an ordinary run of a
smaller sweep, and merging is the union of rows with no (backend, case) pair twice.

Cases move in **configurations** (:func:`config_key`: dtype, heads, head dim,
softcap, paged; what ``--split`` keeps together too): every case of one configuration is in
the same shard, so no compile-bound backend (flex, FA4, JAX/XLA, cuDNN) builds the same kernel
on two machines.

==========================================  ==============================  ============================
question                                    by case (this module)           by (backend, configuration)
==========================================  ==============================  ============================
each shard runs every backend               yes                             no: a subset of the backends
a (backend, case) row in exactly one shard  yes                             yes
a configuration's kernel built once         yes (configurations whole)      yes
a shard folder is a plain run with reports  yes                             no (a sparse matrix)
``parity merge`` needs                      union of rows + set check       union + per-backend check
balance unit                                a configuration (<= ~11 cases)  a (backend, configuration)
every machine must hold every backend       yes                             no
==========================================  ==============================  ============================

The split (:func:`assign`)
--------------------------

Deterministic and the same on every machine for the same profile, seed, filters and backends:
it depends only on the cases' fields (their configuration keys, lengths, heads, head dim) and
the backends' ``cost_hint`` values, never on ``hash()`` (``PYTHONHASHSEED``), dict order or
time. Configurations are dealt out largest cost first onto the least loaded shard (LPT; ties:
the configuration key's JSON, then the lowest shard index). Cost of a configuration ``g`` with
backends ``B`` (``h_b`` = ``cost_hint``, 1.0 when unknown)::

    cost(g) = sum_b (h_b - 1) * compiles(g)  +  |B| * sum_{c in g} w(c)
    compiles(g) = distinct (pow2 bucket of max Sq, pow2 bucket of max Sk) among g's cases
    w(c)        = 1 + sum_i(Sq_i * Sk_i) * hq * head_dim / 2**35

``h_b - 1`` is the part of a backend's hint above a plain backend's: charged per kernel it
compiles (flex compiles per configuration and length bucket); every backend pays ``w(c)`` per
case, which grows with the score elements (reference, probes, the call) but slowly: on the
H200 run of 2026-12-04 (``lab/runs/h200-2026-12-04``, 19 backends) the 16k x 16k case summed 14.7 s
of backend-call time against a median of 4.2 s for a small case (compiles dominate), hence
``2**35`` (that case: w = 5). A shard's cost is the sum over its configurations. LPT bounds the
most loaded shard by ``mean + max cost(g)``.

Balance (``python benchmarks/shard_balance.py lab/runs/h200-2026-12-04``; ``tests/test_shard.py``
holds max/mean <= 1.05 for the default profile, N <= 5): the default profile (CPU backends, or
all-gpu, seeds 0/1/7) gives model max/mean <= 1.009 for N = 2..5 and <= 1.021 for N = 8.
Replaying the H200 run's measured per-case backend-call times (``time_ms`` summed over its 19
backends, 365 cases, 181 configurations; reference, probes and start-up not in ``time_ms``)
through the split: max/mean 1.03 (N=2), 1.07 (3), 1.09 (4), 1.09 (5), 1.32 (8).

``N`` larger than the number of configurations is refused (a shard would be empty).

The cases themselves must be the same on every machine: run the same harness version, command
and installation kind everywhere. hypothesis >= 6.131 mixes literals of the *local* modules in
``sys.modules`` into its draws, so the drawn cases depend on which parity modules are imported
and on whether parity is installed editable (local) or in site-packages (not scanned); see the
strict xfail in ``tests/test_shard.py``. The shard key holds every case id, so shards that drew
different cases are refused by :func:`check_shard_set`, never merged into a wrong union.

The shard record and ``parity merge``
-------------------------------------

Each shard run records ``environment.json["shard"] = {"k": K, "n": N, "key": KEY, "cases": M}``
(:func:`shard_record`); ``KEY`` fingerprints what must be equal across the shards of one sweep:
profile, seed, filters (``--dtype``, ...), the backends and their cost hints, the split's
version, and the ids of **all** the sweep's cases (before the shard filter). ``parity merge``
calls :func:`check_shard_set` on the folders' environments first: every ``k`` of ``1..N``
exactly once, one ``N``, one ``KEY``.

GPUs in one machine (:func:`lane_gpus`)
---------------------------------------

``--gpus 0,1,...`` (:func:`parse_gpus`; default :func:`visible_gpus`: every GPU visible to this
process) places the ``--jobs`` lanes on GPUs by cost: largest lane first onto the least loaded
GPU, ties by lane order then GPU order; each lane's workers get ``CUDA_VISIBLE_DEVICES`` = that
GPU. The ids are those ``CUDA_VISIBLE_DEVICES`` takes (indices or ``GPU-``/``MIG-`` UUIDs), passed
to the workers verbatim.

Wiring (where each hook goes)
-----------------------------

* ``parity run --shard K/N``: add the argument to the ``run`` parser
  (``r.add_argument("--shard", metavar="K/N", help="run shard K of N of the cases (configurations
  whole; parity merge joins the shards)")``). In ``parity.runner.run``, with the other argument checks
  (before any case is generated): ``shard.parse_shard(req.shard)`` (``ValueError`` ->
  ``UserError(f"--shard: {exc}")``). Right after ``cases, design, req = load_cases(req, backend_names)`` (:mod:`parity.runner`) and
  **before** ``if req.list_cases`` (so ``--list-cases --shard K/N`` lists the shard's cases)::

      shard_rec = None
      if req.shard:
          try:
              cases, shard_rec = shard.for_run(cases, req.shard, backend_names, profile=<the profile name
                  recorded as environment.json "profile">, seed=req.seed, filters=shard.run_filters(req.dtype, ...))
          except ValueError as exc:
              raise UsageError(f"--shard {req.shard}: {exc}") from None

  and in the ``env.collect({...})`` dict add ``"shard": shard_rec``. ``--resume`` with
  ``--shard`` needs nothing more (the same K/N gives the same cases). Run the same command
  (backends, profile, seed, filters) on every machine, only K differing.
* ``parity merge``: first thing in ``merge.merge`` after the ``OUT is one of the input
  folders`` check (so a bad set writes nothing): ``shard_set = shard.check_shard_folders(dirs)``
  (its ``ValueError`` already becomes ``UsageError("merge: ...")`` in ``merge.run``). Rows are then
  united as now; in the merged ``environment.json`` set ``env["shard"] = None`` and
  ``env["shards"] = shard_set``. To merge a shard set with a rerun folder, a
  ``--no-shard-check`` flag would skip the call. ``--extra`` folders are not checked.
* pytest ``--parity-shard K/N``: done in ``conftest.py`` (``pytest_addoption``, the check in
  ``pytest_configure``, and)::

      def pytest_collection_modifyitems(config, items):
          spec = config.getoption("--parity-shard")
          if spec:
              k, n = shard.parse_shard(spec)
              keep = shard.keep_nodeids([i.nodeid for i in items], k, n)
              config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
              items[:] = [i for i in items if i.nodeid in keep]

  (:func:`shard_of_nodeid`: sha256 of the node id mod N, as pytest-shard: an item's shard
  does not depend on which other items were collected.)
* ``--gpus`` (wired): :func:`parity.sweep.options.read_gpus` reads it (default
  :func:`visible_gpus`; several GPUs with ``--no-isolate``: a usage error, one process) into
  ``SweepOptions.gpus``; :func:`parity.sweep.lanes.plan` plans the lanes **before** the executors
  start (``CUDA_VISIBLE_DEVICES`` is read when a worker starts), from ``cost_hint / splits`` only
  (availability is not known yet; an unavailable backend's lane then just runs fast), places them
  with :func:`unit_gpus` and gives each worker its lane's GPU; a lane's reference runs on that GPU
  (the sweep process's device of the same id); rows record it (``gpu``), ``timing.json`` has
  ``gpus`` / ``per_gpu``. Fewer lanes than GPUs (``--jobs 1``): the rest are left idle, said once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: Version of the split: part of the shard key, so shards cut by different versions never merge.
ALGORITHM = 1
#: Score elements worth one more plain case of cost (calibrated on the H200 run of 2026-12-04: see the module docstring).
ELEMENT_UNIT = 2**35


# -- K/N -----------------------------------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``1 <= K <= N``; ValueError naming what is wrong."""
    raw = str(text).strip()
    m = re.fullmatch(r"\s*([+-]?\d+)\s*/\s*([+-]?\d+)\s*", raw)
    if not m:
        raise ValueError(f"shard {text!r}: want K/N (this machine's shard K of N, e.g. 2/4), two whole numbers")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise ValueError(f"shard {text!r}: N (the number of shards) must be >= 1, got {n}")
    if not 1 <= k <= n:
        raise ValueError(f"shard {text!r}: K must be between 1 and N={n} (shards are numbered from 1), got {k}")
    return k, n


# -- the split -----------------------------------------------------------------------------------


def config_key(case: Any) -> tuple[Any, ...]:
    """The case's configuration: what a compiling backend builds a kernel for, lengths aside (their
    buckets compile within it). Shards and ``--split`` parts keep a configuration whole."""
    return (case.dtype, case.hq, case.hkv, case.head_dim, case.softcap, case.page_size is not None)


def _key_text(key: tuple[Any, ...]) -> str:
    return json.dumps(list(key), separators=(",", ":"))


def _bucket(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def case_weight(case: Any) -> float:
    """``1 + score elements / 2**26``: what one case costs one backend, in plain-case units."""
    elems = sum(q * k for q, k in zip(case.q_lens, case.k_lens)) * case.hq * case.head_dim
    return 1.0 + elems / ELEMENT_UNIT


def config_costs(
    cases: Iterable[Any],
    backend_names: Sequence[str],
    cost: Mapping[str, float] | None = None,
    key: Callable[[Any], tuple[Any, ...]] = config_key,
) -> dict[str, tuple[float, list[Any]]]:
    """``{config key JSON: (cost, its cases in input order)}`` (the model: module docstring)."""
    cost = cost or {}
    hints = [float(cost.get(s, 1.0)) for s in sorted(set(backend_names))]
    compile_w = sum(max(0.0, h - 1.0) for h in hints)
    per_case = float(len(hints))
    groups: dict[str, list[Any]] = {}
    for c in cases:
        groups.setdefault(_key_text(key(c)), []).append(c)
    out: dict[str, tuple[float, list[Any]]] = {}
    for k in sorted(groups):
        members = groups[k]
        compiles = len({(_bucket(max(c.q_lens)), _bucket(max(c.k_lens))) for c in members})
        weights = sum(case_weight(c) for c in sorted(members, key=lambda c: c.case_id))  # fixed summation order
        out[k] = (round(compile_w * compiles + per_case * weights, 6), members)
    return out


def assign(
    cases: Iterable[Any],
    backend_names: Sequence[str],
    n: int,
    cost: Mapping[str, float] | None = None,
    key: Callable[[Any], tuple[Any, ...]] = config_key,
) -> dict[str, int]:
    """Case id -> shard index (0 .. n-1): configurations dealt out largest cost first onto the
    least loaded shard. ValueError when ``n < 1`` or ``n`` exceeds the configurations."""
    if n < 1:
        raise ValueError(f"the number of shards must be >= 1, got {n}")
    groups = config_costs(cases, backend_names, cost, key)
    if n > len(groups):
        raise ValueError(
            f"{n} shards but only {len(groups)} configurations (dtype, heads, head dim, softcap, paged) "
            f"in this sweep; a configuration is never split, so use N <= {len(groups)}"
        )
    load = [0.0] * n
    out: dict[str, int] = {}
    for k in sorted(groups, key=lambda g: (-groups[g][0], g)):
        i = min(range(n), key=lambda j: (load[j], j))
        c, members = groups[k]
        load[i] += c
        for case in members:
            out[case.case_id] = i
    return out


def shard_loads(cases: Iterable[Any], backend_names: Sequence[str], n: int, cost: Mapping[str, float] | None = None) -> list[float]:
    """Each shard's cost under :func:`assign` (for balance figures)."""
    cases = list(cases)
    groups = config_costs(cases, backend_names, cost)
    where = assign(cases, backend_names, n, cost)
    load = [0.0] * n
    for c, members in groups.values():
        load[where[members[0].case_id]] += c
    return load


def select(cases: Sequence[Any], k: int, n: int, backend_names: Sequence[str], cost: Mapping[str, float] | None = None) -> list[Any]:
    """The cases of shard ``k`` of ``n`` (``k`` 1-based, as ``--shard K/N``), in their sweep order."""
    if not 1 <= k <= n:
        raise ValueError(f"shard {k}/{n}: K must be between 1 and N")
    where = assign(cases, backend_names, n, cost)
    return [c for c in cases if where[c.case_id] == k - 1]


def cost_hints(backend_names: Iterable[str]) -> dict[str, float]:
    """``{backend: its cost_hint}`` (1.0 when the backend cannot be built here)."""
    from . import backends

    out = {}
    for s in backend_names:
        try:
            out[s] = float(getattr(backends.get(s), "cost_hint", 1.0))
        except Exception:  # noqa: BLE001 - an unknown backend is the CLI's error to report, not ours
            out[s] = 1.0
    return out


# -- the shard record and the set check ----------------------------------------------------------


def shard_key(
    profile: str | None,
    seed: int,
    filters: Mapping[str, Any],
    backend_names: Sequence[str],
    costs: Mapping[str, float],
    case_ids: Iterable[str],
) -> str:
    """A fingerprint of the sweep the shards cut (not of the shard): equal on every shard."""
    doc = {
        "algorithm": ALGORITHM,
        "profile": profile,
        "seed": seed,
        "filters": {k: filters[k] for k in sorted(filters)},
        "backends": sorted(set(backend_names)),
        "costs": {s: float(costs.get(s, 1.0)) for s in sorted(set(backend_names))},
        "cases": sorted(set(case_ids)),
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shard_record(
    k: int,
    n: int,
    *,
    profile: str | None,
    seed: int,
    filters: Mapping[str, Any],
    backend_names: Sequence[str],
    costs: Mapping[str, float],
    case_ids: Iterable[str],
    shard_cases: int | None = None,
) -> dict[str, Any]:
    """``environment.json["shard"]`` of a shard run; ``case_ids``: the whole sweep's, before the filter."""
    rec: dict[str, Any] = {"k": int(k), "n": int(n), "key": shard_key(profile, seed, filters, backend_names, costs, case_ids)}
    if shard_cases is not None:
        rec["cases"] = int(shard_cases)
    return rec


def check_shard_set(envs: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Check that ``envs`` (the environment.json of each folder to merge) are the complete shard
    set of one sweep: ``{"n": N, "key": KEY}``; ``None`` when no folder is a shard run.

    ValueError naming the missing or repeated shard(s), folders that are not shard runs, and
    shards of different sweeps (another N or key)."""
    names = list(names) if names is not None else [f"folder {i + 1}" for i in range(len(envs))]
    if len(names) != len(envs):
        raise ValueError("check_shard_set: one name per environment")
    recs: list[tuple[str, Any]] = [(name, (env or {}).get("shard")) for name, env in zip(names, envs)]
    if all(r is None for _, r in recs):
        return None
    plain = [name for name, r in recs if r is None]
    if plain:
        raise ValueError(f"{', '.join(plain)}: not a shard run (no 'shard' in environment.json), merged with shard runs")
    good: list[tuple[str, Mapping[str, Any]]] = []
    for name, r in recs:
        ok = isinstance(r, Mapping) and all(isinstance(r.get(f), int) and not isinstance(r.get(f), bool) for f in ("k", "n"))
        if not ok or not isinstance(r.get("key"), str) or not 1 <= r["k"] <= r["n"]:
            raise ValueError(f"{name}: malformed shard record {r!r} (want k, n whole numbers with 1 <= k <= n, and a key)")
        good.append((name, r))
    recs = good
    ns = sorted({r["n"] for _, r in recs})
    if len(ns) > 1:
        by = "; ".join(f"N={n}: " + ", ".join(name for name, r in recs if r["n"] == n) for n in ns)
        raise ValueError(f"shards of different splits (different N): {by}")
    keys = list(dict.fromkeys(r["key"] for _, r in recs))
    if len(keys) > 1:
        by = "; ".join(f"key {key}: " + ", ".join(f"{name} ({r['k']}/{r['n']})" for name, r in recs if r["key"] == key) for key in keys)
        raise ValueError(f"shards of different sweeps (profile, seed, filters, backends or cases differ): {by}")
    n = ns[0]
    seen: dict[int, list[str]] = {}
    for name, r in recs:
        seen.setdefault(r["k"], []).append(name)
    repeated = {k: v for k, v in sorted(seen.items()) if len(v) > 1}
    missing = [k for k in range(1, n + 1) if k not in seen]
    problems = []
    if repeated:
        problems.append("repeated shard(s) " + "; ".join(f"{k}/{n} in {', '.join(v)}" for k, v in repeated.items()))
    if missing:
        problems.append("missing shard(s) " + ", ".join(f"{k}/{n}" for k in missing))
    if problems:
        raise ValueError("incomplete shard set of " + f"{n} shards: " + "; ".join(problems))
    return {"n": n, "key": keys[0]}


def check_shard_folders(dirs: Sequence[Any]) -> dict[str, Any] | None:
    """:func:`check_shard_set` on run folders' ``environment.json`` (a folder without a readable
    one counts as a plain run, so it cannot slip past the check); named by folder."""
    import pathlib

    from . import runfolder
    from .errors import UserError

    envs: list[Mapping[str, Any]] = []
    for d in dirs:
        try:
            env = runfolder.read_environment(pathlib.Path(d)) or {}
        except (OSError, UserError):
            env = {}
        envs.append(env if isinstance(env, Mapping) else {})
    return check_shard_set(envs, names=[str(d) for d in dirs])


def run_filters(
    dtype: Iterable[str] | None = None, case: Iterable[str] | None = None, case_file: Any = None, no_siblings: bool = False
) -> dict[str, Any]:
    """What narrows a ``parity run``'s cases besides profile and seed (for :func:`shard_key`):
    its ``--dtype``, ``--case``, ``--case-file`` and ``--no-siblings`` (None counts as unset)."""
    return {
        "dtype": sorted(dtype or []),
        "case": list(case or []),
        "case_file": str(case_file) if case_file else "",
        "no_siblings": bool(no_siblings),
    }


def for_run(
    cases: Sequence[Any],
    text: str,
    backend_names: Sequence[str],
    *,
    profile: str | None,
    seed: int,
    filters: Mapping[str, Any],
    costs: Mapping[str, float] | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """``parity run --shard TEXT`` in one call: (the shard's cases, its ``environment.json["shard"]``).
    ``cases``: the whole sweep's; ``costs``: default :func:`cost_hints` of ``backend_names``. ValueError
    on a bad ``K/N`` or too many shards."""
    k, n = parse_shard(text)
    costs = dict(costs) if costs is not None else cost_hints(backend_names)
    chosen = select(cases, k, n, backend_names, costs)
    rec = shard_record(
        k,
        n,
        profile=profile,
        seed=seed,
        filters=filters,
        backend_names=backend_names,
        costs=costs,
        case_ids=[c.case_id for c in cases],
        shard_cases=len(chosen),
    )
    return chosen, rec


# -- pytest --------------------------------------------------------------------------------------


def shard_of_nodeid(nodeid: str, n: int) -> int:
    """0-based shard of a pytest node id: sha256 (little-endian) mod ``n``, as pytest-shard."""
    return int.from_bytes(hashlib.sha256(nodeid.encode()).digest(), "little") % n


def keep_nodeids(nodeids: Iterable[str], k: int, n: int) -> set[str]:
    """The node ids shard ``k`` (1-based) of ``n`` keeps."""
    if not 1 <= k <= n:
        raise ValueError(f"shard {k}/{n}: K must be between 1 and N")
    return {i for i in nodeids if shard_of_nodeid(i, n) == k - 1}


# -- GPUs ----------------------------------------------------------------------------------------

_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z/-]+")


def _check_id(item: str, flag: str) -> str:
    if item.isdigit() or _UUID.fullmatch(item):
        return str(int(item)) if item.isdigit() else item
    raise ValueError(f"{flag}: {item!r} is not a GPU id (an index such as 0, or a GPU-/MIG- UUID)")


def visible_gpus(environ: Mapping[str, str] | None = None, device_count: int | None = None) -> list[str]:
    """The GPU ids this process may hand to its workers: ``CUDA_VISIBLE_DEVICES``'s entries when
    it is set (up to the first invalid one, as CUDA reads it), else ``0 .. device_count-1``
    (``torch.cuda.device_count()`` when not given)."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        out: list[str] = []
        for item in environ["CUDA_VISIBLE_DEVICES"].split(","):
            item = item.strip()
            try:
                gid = _check_id(item, "CUDA_VISIBLE_DEVICES")
            except ValueError:
                break
            if gid in out:
                break
            out.append(gid)
        return out
    if device_count is None:
        import torch

        device_count = torch.cuda.device_count()
    return [str(i) for i in range(device_count)]


def parse_gpus(text: str, visible: Sequence[str] | None = None) -> list[str]:
    """``--gpus "0,1"`` -> ``["0", "1"]``; ValueError on an empty item, a repeat, a non-id, or an
    id not among ``visible`` (when given)."""
    items = [x.strip() for x in str(text).split(",")]
    if not str(text).strip() or any(not x for x in items):
        raise ValueError(f"--gpus {text!r}: want comma-separated GPU ids, e.g. 0,1,2,3 (no empty item)")
    out: list[str] = []
    for item in items:
        gid = _check_id(item, f"--gpus {text!r}")
        if gid in out:
            raise ValueError(f"--gpus {text!r}: GPU {gid} is named twice")
        out.append(gid)
    if visible is not None:
        gone = [g for g in out if g not in visible]
        if gone:
            seen = ",".join(visible) if visible else "none"
            raise ValueError(
                f"--gpus {text!r}: GPU {', '.join(gone)} not visible to this process "
                f"(visible: {seen}; CUDA_VISIBLE_DEVICES / torch.cuda.device_count())"
            )
    return out


def lane_gpus(lanes: Sequence[tuple[str, float]] | Mapping[str, float], gpus: Sequence[str]) -> dict[str, str]:
    """``{lane name: CUDA_VISIBLE_DEVICES value}``: lanes largest cost first onto the least loaded
    GPU (ties: the lane's position, then the GPU's). ``lanes``: ``(name, cost)`` pairs or a mapping."""
    pairs = list(lanes.items()) if isinstance(lanes, Mapping) else [(str(a), float(b)) for a, b in lanes]
    if not gpus:
        raise ValueError("no GPU to place the lanes on (--gpus is empty, or no GPU is visible)")
    names = [p[0] for p in pairs]
    if len(set(names)) != len(names):
        raise ValueError("lane names must be unique")
    load = [0.0] * len(gpus)
    out: dict[str, str] = {}
    for _, (name, c) in sorted(enumerate(pairs), key=lambda e: (-float(e[1][1]), e[0])):
        i = min(range(len(gpus)), key=lambda j: (load[j], j))
        load[i] += max(0.0, float(c))
        out[name] = str(gpus[i])
    return {name: out[name] for name in names}


def unit_gpus(lanes: Sequence[Sequence[str]], costs: Mapping[str, float], gpus: Sequence[str]) -> dict[str, dict[str, str]]:
    """For :func:`parity.sweep.plan_lanes`' lanes (lists of units): each unit's extra worker
    environment ``{"CUDA_VISIBLE_DEVICES": id}``, the lane's cost being its units' sum."""
    desc = [(" ".join(lane), sum(float(costs.get(u, 1.0)) for u in lane)) for lane in lanes]
    placed = lane_gpus(desc, gpus)
    return {u: {"CUDA_VISIBLE_DEVICES": placed[" ".join(lane)]} for lane in lanes for u in lane}
