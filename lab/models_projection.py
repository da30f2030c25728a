"""Issue 47's three lane-overhead cuts projected on the H100's `--profile models` run: a PROJECTION from the stages that
run measured, not a measurement (lab/runs/cpu-models-cost-2026-12-07b). `PYTHONPATH=. python lab/models_projection.py`.

Measured: lab/runs/h100-2026-12-07g-models/run/stages.csv (its two calls) and lab/runs/h100-2026-12-07d-models/run/stages.csv
(the seed's), each stage's sum per backend and status; results.csv.gz there, the 1200 rows that ran (their shapes). The cuts:
(1) a case's inputs drawn once into shared-memory files: a row's `inputs` is mapping them and the copy to its card (not
measured on a GPU: bytes / --h2d GiB/s); the draw stays in the case's reference stage, outside the reference cache's lock;
(2) answers of 1 MiB or more through files: `ipc`'s transfer at the CPU-measured rate; what else a row's ipc held (its waits
for other lanes' references, judge_wait now) scaled by the part of a reference the lock still holds (LOCK_SHARE);
(3) a refused row costs its lane the worker's answer only: no reference computed or waited for.
call, compile, probes, judge and the memory gate stay as measured (per row, per backend; compile per kernel key).
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd

from parity import backends
from parity.case import Case
from parity.design import takes
from parity.execute import kernel_key
from parity.memory import estimate, lse_bytes, output_bytes
from parity.models import profile_cases
from parity.sweep.lanes import auto_splits, plan_lanes

RUNS = Path(__file__).resolve().parent / "runs"
RUN, SEED = RUNS / "h100-2026-12-07g-models" / "run", RUNS / "h100-2026-12-07d-models" / "run"
MIB, GIB, LANES, CARD_GIB = 1 << 20, 1 << 30, 14, 77.2
MIN_ROWS = 20  # RUN's own ok rows of a backend that its per-row figures are read from
WRITTEN = 2852  # rows in RUN's results before compaction: 1200 ran, 1463 unsupported, 189 unavailable (its README)
#: benchmarks/sweep_io_2026-12-07.txt, after: a 256 MiB answer 0.154-0.169 s (the slower), a small one 1.7 ms; a row's
#: inputs mapped 0.3-0.4 ms. benchmarks/refused_rows_2026-12-07.txt, after: a refused row 1-8 ms of its lane (the most)
AFTER_S_PER_MIB, SMALL_ANSWER_S, MAP_S, REFUSED_S = 0.169 / 256, 0.0017, 0.0004, 0.008
BEFORE_S_PER_MIB = 1.420 / 256  # the same, before (pickled through the pipe): the faster of its two pairs
#: an ok row's parts kept as measured (per row, per backend), before and after
OK_PARTS = ("gate", "call_warm", "mask_probe", "gqa_probe", "read_probe", "other", "judge")
LANE_PARTS = ("inputs", "ipc", "ref_wait", "refused", "compile", *OK_PARTS, "reference")  # a lane's own; "moved": anyone's
FAMILIES = ("flashinfer", "vllm-fa2", "fa4", "jax", "flex")  # compile's lines
#: h100-2026-12-07d-models' call 8 (no pre-pass): flashinfer-paged-cuda's one key built in its lane (FlashInfer's prefill JIT)
FLASHINFER_COLD_S, PREFILL_JIT = 210.5, ("flashinfer-cuda", "flashinfer-paged-cuda")


def stage_sums(seed_too: bool = True) -> pd.DataFrame:
    """(backend, status) -> rows and each stage's sum in seconds, over the four calls (both folders; RUN's two calls
    alone without ``seed_too``). The seed's code (3e178a0) counted a lane's waits for other lanes' references in
    ``judge``: beyond RUN's judge per row (its status), they are ``judge_wait`` here, as RUN's code counted those of
    judging (its waits beside the worker: in ``ipc``)."""
    run, seed = (pd.read_csv(f / "stages.csv").set_index(["backend", "status"]) for f in (RUN, SEED))
    per_row = run.groupby(level="status").judge_sum_ms.sum() / run.groupby(level="status").rows.sum()
    fair = seed.rows * per_row.reindex(seed.index.get_level_values("status")).to_numpy()
    seed["judge_wait_sum_ms"], seed["judge_sum_ms"] = (seed.judge_sum_ms - fair).clip(lower=0), fair
    s = pd.concat([seed, run] if seed_too else [run]).fillna(0.0).groupby(level=["backend", "status"]).sum(numeric_only=True)
    out = pd.DataFrame({"rows": s.rows})
    for c in [c for c in s.columns if c.endswith("_sum_ms")]:
        out[c[: -len("_sum_ms")]] = s[c] / 1000.0
    out["call_warm"] = out.call - out.compile
    out["other"] = out.worker - out[["inputs", "call", "mask_probe", "gqa_probe", "read_probe"]].sum(axis=1)  # its output's copy, ...
    out["net_ipc"] = out.wait - out.worker  # the lane's wait beyond its worker (ipc per row is clipped at 0)
    return out


def shapes(case: Case, backend: object) -> tuple[float, float]:
    """MiB of ``case``'s inputs (q + k + v), and of its answer's tensors that go through a file (1 MiB or more)."""
    answer = [output_bytes(case), lse_bytes(case) if getattr(backend, "returns_lse", False) else 0]
    inputs = sum(case.q_lens) * case.hq * case.head_dim + 2 * sum(case.k_lens) * case.hkv * case.head_dim
    return inputs * case.torch_dtype.itemsize / MIB, sum(b for b in answer if b >= MIB) / MIB


def ran_rows() -> pd.DataFrame:
    """The 1200 rows that ran (RUN's results: the seed's 441, ``seed``, and its own 759), with their MiB in and out."""
    r = pd.read_csv(RUN / "results.csv.gz", low_memory=False)
    seed = pd.read_csv(SEED / "results.csv.gz", usecols=["backend", "case_id"], low_memory=False)
    sizes = [shapes(Case.from_json(j), backends.get(b)) for b, j in zip(r.backend, r.case_json)]
    seeded = pd.MultiIndex.from_frame(r[["backend", "case_id"]]).isin(list(seed.itertuples(index=False, name=None)))
    r = r.assign(in_mib=[s[0] for s in sizes], big_mib=[s[1] for s in sizes], seed=seeded)
    return r[["backend", "case_id", "in_mib", "big_mib", "seed"]]


def timing() -> dict:
    return json.loads(gzip.decompress((RUN / "timing.json.gz").read_bytes()))


def _ok_rows(st: pd.DataFrame, st_run: pd.DataFrame, ran: pd.DataFrame) -> pd.DataFrame:
    """Each backend's ok rows' sums and MiB: RUN's own (07g's code, the one before the cuts) where it ran MIN_ROWS or
    more of them, else the seed's too (3e178a0: its waits for other lanes' references were longer, one lock then)."""
    both, own = st.xs("ok", level="status"), st_run.xs("ok", level="status")
    own = own[own.rows >= MIN_ROWS]
    ok = pd.concat([own, both.drop(index=own.index)])
    mine = ran[~ran.seed | ~ran.backend.isin(own.index)]
    return ok.join(mine.groupby("backend")[["in_mib", "big_mib"]].sum())


def rates(st: pd.DataFrame, st_run: pd.DataFrame, ran: pd.DataFrame, t: dict) -> dict:
    """Per backend: the ok rows' per-row parts (:func:`_ok_rows`), inputs s per MiB, the lane's wait past the worker
    beyond the transfer per row (its waits for other lanes' references), compile s per key (the four calls' lanes);
    a refused row's lane seconds and gate (RUN's); the reference stages a row of each status met (re-computations in
    later calls included). ``lock_share``: of a reference stage, what is not the draw (07g's call 9)."""
    ok = _ok_rows(st, st_run, ran)
    per = {p: (ok[p] / ok.rows).to_dict() for p in OK_PARTS}
    per["inputs_s_per_mib"] = (ok.inputs / ok.in_mib).to_dict()
    waits = ok.net_ipc + ok.judge_wait - BEFORE_S_PER_MIB * ok.big_mib
    per["ref_wait"] = (waits.clip(lower=0) / ok.rows).to_dict()
    calls = t["all_calls"]["stages"]
    per["s_per_key"] = {b: v["compile_s"] / v["first_config_rows"] for b, v in calls.items() if v.get("first_config_rows")}
    ref = st_run.xs("unsupported", level="status")
    per["refused_lane"] = ((ref.gate + ref.wait + ref.judge + ref.judge_wait) / ref.rows).to_dict()
    per["refused_gate"] = (ref.gate / ref.rows).to_dict()
    per["ref_ok"], per["ref_refused"] = (ok.reference / ok.rows).to_dict(), (ref.reference / ref.rows).to_dict()
    rs = t["reference_stages_s"]
    share = (rs["reference"] + rs["baseline"]) / (rs["inputs"] + rs["reference"] + rs["baseline"])
    return {**per, "lock_share": share}


def _get(r: dict, part: str, backend: str) -> float:
    """``r[part]`` of ``backend``, else the mean over the backends that have it."""
    d = r[part]
    return float(d[backend]) if backend in d else sum(d.values()) / max(1, len(d))


def refused_in_run() -> dict[str, int]:
    """RUN's unsupported rows per backend (its results' 1463: the seed's refused rows were sent again there)."""
    s = pd.read_csv(RUN / "stages.csv")
    return s[s.status == "unsupported"].set_index("backend").rows.to_dict()


def statuses(cases: list[Case], ran: pd.DataFrame, seen: set[str]) -> tuple[dict, dict]:
    """(backend -> [(case, status)] of the rows RUN wrote, the same of the rows left), in the profile's order. Status:
    ``ok``, ``refused`` (the backend's own check or the card: unsent), ``in_call`` (its check takes the case but every
    row of the backend that ran was refused in its worker: FlashInfer 0.7.2.post1's plan has no ``fixed_split_size``
    for the split decodes), ``unavailable`` (its package was not on the image). ``seen``: backends with stages."""
    done, left, refused = {}, {}, refused_in_run()
    names = backends.expand("all-gpu")
    gone = [b for b in names if b not in seen]
    for b in names:
        if b in gone:  # the rows RUN wrote that neither ran nor were refused, as many for each
            n = (WRITTEN - len(ran) - sum(refused.values())) // len(gone)
            done[b], left[b] = [(c, "unavailable") for c in cases[:n]], [(c, "unavailable") for c in cases[n:]]
            continue
        be, ok_ids = backends.get(b), set(ran.case_id[ran.backend == b])
        fits = [takes(be, c) and estimate(c, True, 64, harness_on_device=True, backend=be).worker_bytes <= CARD_GIB * GIB for c in cases]
        in_call = not ok_ids and any(fits)
        status = [("in_call" if in_call else "ok") if f else "refused" for f in fits]
        first = [i for i, c in enumerate(cases) if c.case_id not in ok_ids][: refused.get(b, 0)]  # reached in order
        wrote = {i for i, c in enumerate(cases) if c.case_id in ok_ids} | set(first)
        ran_as = ["ok" if c.case_id in ok_ids else "in_call" if status[i] == "in_call" else "refused" for i, c in enumerate(cases)]
        done[b] = [(c, ran_as[i]) for i, c in enumerate(cases) if i in wrote]
        left[b] = [(c, status[i]) for i, c in enumerate(cases) if i not in wrote]
    return done, left


def project(rows: dict, r: dict, after: bool, h2d: float, wait_share: float | None = None) -> dict[str, dict[str, float]]:
    """Each backend's lane seconds by part for ``rows`` (:func:`statuses`), as 07g's code ran them (``after`` False) or with
    the three cuts; compile: its rows' distinct kernel keys x its seconds per key (one cold call). ``wait_share``: what
    is left of an ok row's waits for other lanes' references (default :func:`rates`' ``lock_share``)."""
    share = r["lock_share"] if wait_share is None else wait_share
    out = {}
    for b, items in rows.items():
        be, p, keys = backends.get(b), defaultdict(float), set()
        for case, status in items:
            if status == "unavailable":
                continue
            mi, mo = shapes(case, be)
            if status != "ok":
                p["refused_rows"] += 1
                p["reference" if not after else "moved"] += _get(r, "ref_refused", b)  # after: an ok row's, anywhere
                upload = MAP_S + mi / 1024 / h2d if status == "in_call" and after else 0.0  # maps the case's files, refuses
                p["upload"] += upload
                p["refused"] += _get(r, "refused_gate", b) + REFUSED_S + upload if after else _get(r, "refused_lane", b)
                continue
            p["ok_rows"] += 1
            for k in OK_PARTS:
                p[k] += _get(r, k, b)
            p["reference"] += _get(r, "ref_ok", b)
            keys.add(kernel_key(be, case))
            if after:
                p["inputs"] += MAP_S + mi / 1024 / h2d
                p["ipc"] += mo * AFTER_S_PER_MIB if mo else SMALL_ANSWER_S
                p["ref_wait"] += _get(r, "ref_wait", b) * share
            else:
                p["inputs"] += mi * _get(r, "inputs_s_per_mib", b)
                p["ipc"] += mo * BEFORE_S_PER_MIB
                p["ref_wait"] += _get(r, "ref_wait", b)
        p["keys"] = len(keys)
        p["compile"] = len(keys) * _get(r, "s_per_key", b)
        p["lane"] = sum(p[k] for k in LANE_PARTS)
        out[b] = dict(p)
    return out


def measured(st: pd.DataFrame) -> dict[str, dict[str, float]]:
    """07g's rows as they ran: each backend's lane seconds by part (all four calls; ``ipc``: the waits past the worker)."""
    g = st.groupby(level="backend").sum()
    ok = st.xs("ok", level="status").reindex(g.index).fillna(0.0)
    out = {}
    for b, row in g.iterrows():
        o = ok.loc[b]
        out[b] = {"inputs": o.inputs, "ipc": o.net_ipc, "compile": o.compile, "ref_wait": o.judge_wait, "reference": row.reference}
        out[b].update({k: o[k] for k in OK_PARTS})
        out[b]["refused"] = (row.gate + row.wait + row.judge + row.judge_wait) - (o.gate + o.wait + o.judge + o.judge_wait)
        out[b]["lane"] = row.gate + row.wait + row.judge + row.judge_wait + row.reference
    return out


def measured_after(st: pd.DataFrame, ran: pd.DataFrame, done: dict, r: dict, h2d: float) -> dict[str, dict[str, float]]:
    """07g's rows with the cuts: each backend's measured parts, but for those the cuts change: inputs and the answers'
    transfer (:func:`project`), the waits for other lanes' references (past the transfer) x ``lock_share``, a refused
    row's lane its gate as measured and its worker's answer, and its reference stages moved to an ok row's lane."""
    a0, model, share = measured(st), project(done, r, True, h2d), r["lock_share"]
    g, ok = st.groupby(level="backend").sum(), st.xs("ok", level="status")
    big = ran.groupby("backend").big_mib.sum()
    out = {}
    for b, v in a0.items():
        o = ok.loc[b] if b in ok.index else pd.Series(0.0, index=ok.columns)
        waits = max(0.0, o.net_ipc + o.judge_wait - BEFORE_S_PER_MIB * big.get(b, 0.0))
        n_refused, gate_refused = g.rows[b] - o.rows, g.gate[b] - o.gate
        m = model.get(b, {})
        refused = gate_refused + REFUSED_S * n_refused + m.get("upload", 0.0)
        out[b] = {**v, "inputs": m.get("inputs", 0.0), "ipc": m.get("ipc", 0.0), "ref_wait": waits * share, "refused": refused}
        out[b].update(reference=o.reference, moved=g.reference[b] - o.reference)
        out[b]["lane"] = sum(out[b][k] for k in LANE_PARTS)
    return out


def total(per: dict) -> float:
    """Lane seconds in all: every lane's own and the reference stages moved to whichever lane meets a case first."""
    return sum(v["lane"] + v.get("moved", 0.0) for v in per.values())


def wall(units: dict[str, float], lanes: list[list[str]], per: dict, share: float, startup: float) -> dict:
    """The wall of one call: its startup, then the longest of its heaviest lane (``units``' seconds over ``lanes``), all
    lane seconds over the lanes (the moved reference stages spread evenly), and the reference stages' part under the
    reference cache's lock, one at a time (``share`` of them: 1 before the cuts). No other idle is modelled."""
    own = {" ".join(lane): sum(units.get(u, 0.0) for u in lane) for lane in lanes}
    crit = max(own, key=own.__getitem__)
    serial = share * sum(v.get("reference", 0.0) + v.get("moved", 0.0) for v in per.values())
    mean = total(per) / LANES
    return {"lane": crit, "lane_s": own[crit], "mean_s": mean, "serial_s": serial, "wall_s": startup + max(own[crit], mean, serial)}


def plans(per: dict, plan07: list[list[str]]) -> tuple[list[tuple[dict[str, float], list[list[str]]]], dict[str, int]]:
    """(units' seconds, lanes): 07g's lanes (call 9's plan); lanes balanced on these seconds a backend (LPT,
    parity.sweep.lanes.plan_lanes; `parity run` itself weighs seconds per row, from hints or a cost file); the same
    split as `--split auto` would split on these loads (auto_splits, at most a part a kernel key; a part's seconds its
    backend's / K: keys dealt out evenly), and the parts K it chose."""
    whole = {b: v["lane"] for b, v in per.items()}
    k = auto_splits(whole, {b: max(1, int(v.get("keys", 0))) for b, v in per.items()}, LANES)
    parts = {(f"{b}#{i + 1}" if b in k else b): s / k.get(b, 1) for b, s in whole.items() for i in range(k.get(b, 1))}
    anew = plan_lanes(list(whole), LANES, {b: max(1e-3, s) for b, s in whole.items()})
    split = plan_lanes(list(parts), LANES, {u: max(1e-3, s) for u, s in parts.items()}, {u: u.split("#")[0] for u in parts})
    return [(whole, plan07), (whole, anew), (parts, split)], k


def walls(per: dict, share: float, plan07: list[list[str]], startup: float) -> list[dict]:
    each, k = plans(per, plan07)
    out = [wall(units, lanes, per, share, startup) for units, lanes in each]
    out[2]["split"] = ", ".join(f"{b.removesuffix('-cuda')} {n}" for b, n in sorted(k.items(), key=lambda x: -x[1]))
    return out


def short(lane: str) -> str:
    names = lane.split()
    return names[0] if len(names) == 1 else f"{names[0]} + {len(names) - 1} more"


def part_table(sets: list[tuple[str, dict]]) -> None:
    print("| lane-s | " + " | ".join(name for name, _ in sets) + " |")
    print("|---|" + "---:|" * len(sets))
    for k in (*LANE_PARTS, "moved"):
        print(f"| {k} | " + " | ".join(f"{sum(v.get(k, 0.0) for v in per.values()):.0f}" for _, per in sets) + " |")
        if k == "compile":
            for f in FAMILIES:
                got = [sum(v.get(k, 0.0) for b, v in per.items() if b.startswith(f)) for _, per in sets]
                print(f"| - of which {f} | " + " | ".join(f"{x:.0f}" for x in got) + " |")
    print("| **all** | " + " | ".join(f"**{total(per):.0f}**" for _, per in sets) + " |")


def backend_table(done: dict, left: dict, a0: dict, a1: dict, b0: dict, b1: dict, top: int = 12) -> None:
    """The ``top`` backends by their lane seconds left after the cuts, then the others and the unavailable summed."""
    print("| backend | 07g ok / refused | 07g lane-s measured -> after | left ok / refused (keys) | left before -> after |")
    print("|---|---:|---:|---:|---:|")
    gone = [b for b in left if all(s == "unavailable" for _, s in done[b] + left[b])]
    order = sorted(set(left) - set(gone), key=lambda b: -b1[b]["lane"])

    def line(name: str, bs: list[str]) -> None:
        n = [sum(s == "ok" for b in bs for _, s in done[b]), sum(s != "ok" for b in bs for _, s in done[b])]
        n += [sum(int(b1[b].get(k, 0)) for b in bs) for k in ("ok_rows", "refused_rows", "keys")]
        lane = [sum(d.get(b, {}).get("lane", 0.0) for b in bs) for d in (a0, a1, b0, b1)]
        print(f"| {name} | {n[0]} / {n[1]} | {lane[0]:.0f} -> {lane[1]:.0f} | {n[2]} / {n[3]} ({n[4]}) | {lane[2]:.0f} -> {lane[3]:.0f} |")

    for b in order[:top]:
        line(b, [b])
    line(f"the other {len(order[top:])}", order[top:])
    print(f"| {len(gone)} flash-attn backends | unavailable | 0 | {sum(len(left[b]) for b in gone)} unavailable | 0 |")


def wall_table(rows: list[tuple[str, list[dict]]]) -> None:
    print("| rows | all / 14 | reference lock | heaviest lane (s): 07g's lanes | balanced | split (parts) | wall: 07g's, balanced, split |")
    print("|---|---:|---:|---|---|---|---:|")
    for name, ws in rows:
        lanes = " | ".join(f"{short(w['lane'])} {w['lane_s']:.0f}" for w in ws)
        ends = ", ".join(f"{w['wall_s'] / 60:.0f}" for w in ws)
        print(f"| {name} | {ws[0]['mean_s']:.0f} | {ws[0]['serial_s']:.0f} | {lanes} ({ws[2]['split'] or 'none'}) | {ends} min |")


def footnotes(left: dict, r: dict, h2d: float, sets: tuple, plan07: list[list[str]], startup: float) -> None:
    """The heaviest backend after the cuts, and the remaining rows' wall under other assumptions."""
    for label, per, old in sets:
        crit = max(per, key=lambda b: per[b]["lane"])
        parts = ", ".join(f"{k} {per[crit][k]:.0f}" for k in sorted(LANE_PARTS, key=lambda k: -per[crit].get(k, 0.0))[:5])
        redraw = old[crit]["inputs"] - per[crit]["inputs"]
        print(f"{label}: heaviest {crit} {per[crit]['lane']:.0f} s ({int(per[crit]['keys'])} keys): {parts}; +{redraw:.0f} s drawn again")
    slow = {**r, "s_per_key": {b: (FLASHINFER_COLD_S if b in PREFILL_JIT else v) for b, v in r["s_per_key"].items()}}
    for label, per in (
        (f"FlashInfer {FLASHINFER_COLD_S:.0f} s a key", project(left, slow, True, h2d)),
        ("h2d 1 GiB/s", project(left, r, True, 1.0)),
        ("ref waits 0", project(left, r, True, h2d, 0.0)),
        ("ref waits as before", project(left, r, True, h2d, 1.0)),
    ):
        ws = walls(per, r["lock_share"], plan07, startup)
        print(f"left after, {label}: {total(per):.0f} lane-s, wall balanced {ws[1]['wall_s']:.0f} s, split {ws[2]['wall_s']:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description="issue 47's lane-overhead cuts projected on the H100's models run (a projection)")
    ap.add_argument("--h2d", type=float, default=4.0, help="GiB/s of a row's mapped inputs to its card (not measured on a GPU)")
    h2d = ap.parse_args().h2d
    st, ran, t = stage_sums(), ran_rows(), timing()
    r, cases = rates(st, stage_sums(seed_too=False), ran, t), profile_cases([])[0]
    done, left = statuses(cases, ran, set(st.index.get_level_values("backend")))
    whole = {b: done[b] + left[b] for b in done}
    startup, plan07, share = t["all_calls"]["startup_s"] / t["all_calls"]["calls"], t["lanes"], r["lock_share"]
    a0, a1, a_model = measured(st), measured_after(st, ran, done, r, h2d), project(done, r, False, h2d)
    b0, b1 = project(left, r, False, h2d), project(left, r, True, h2d)
    c0, c1 = project(whole, r, False, h2d), project(whole, r, True, h2d)
    n_left, n_gone = sum(len(v) for v in left.values()), sum(s == "unavailable" for v in left.values() for _, s in v)
    print(f"PROJECTION, not a measurement. h2d {h2d} GiB/s; answers {BEFORE_S_PER_MIB * 1e3:.2f} -> {AFTER_S_PER_MIB * 1e3:.2f} ms/MiB")
    print(f"(CPU); lock share {share:.3f}; startup {startup:.0f} s a call; rows left {n_left} ({n_gone} unavailable).")
    print(f"07g's lane-s (four calls): measured {total(a0):.0f}, the model of them {total(a_model):.0f}.\n")
    backend_table(done, left, a0, a1, b0, b1)
    print()
    part_table([("07g measured", a0), ("07g after", a1), ("left before", b0), ("after", b1), ("whole cold before", c0), ("after", c1)])
    print()
    wall_table(
        [
            ("07g's rows, after (one call)", walls(a1, share, plan07, startup)),
            (f"left {n_left}, before", walls(b0, 1.0, plan07, startup)),
            (f"left {n_left}, after", walls(b1, share, plan07, startup)),
            ("whole 7700 cold, before", walls(c0, 1.0, plan07, startup)),
            ("whole 7700 cold, after", walls(c1, share, plan07, startup)),
        ]
    )
    print()
    footnotes(left, r, h2d, (("left after", b1, b0), ("whole cold after", c1, c0)), plan07, startup)


if __name__ == "__main__":
    main()
