"""A models row's stages (RUN's files at 9c7992b), a cold run projected: lab/runs/cpu-models-cost-2026-12-07."""

import gzip
import io
import json
import subprocess
import sys
from collections import defaultdict

import pandas as pd

from parity import backends
from parity.design import takes
from parity.memory import estimate
from parity.models import CALLS, profile_cases

AT, GIB, LANES, CARD = "9c7992b59c3a1a4339f9bf1e9d26dbb790f75e1e", 1 << 30, 14, 77.2
PARTS = ("inputs", "call_warm", "compile", "output_copy", "mask_probe", "gqa_decode", "gqa_backend", "read_probe", "other", "ipc", "judge")
FAMILIES = ("jax", "flashinfer", "vllm", "fa4", "xformers", "fa2", "fa3")
CALL = {(c.q_lens, c.k_lens): c.name for c in CALLS}


def git(run, name):
    return subprocess.run(["git", "show", f"{AT}:reports/{run}/run/{name}"], check=True, capture_output=True).stdout


def call_of(q, k):
    return CALL.get((tuple(int(x) for x in str(q).split()), tuple(int(x) for x in str(k).split())), "?")


def load(run):
    rows = [json.loads(x) for x in gzip.decompress(git(run, "stages.jsonl.gz")).decode().splitlines() if x.strip()]
    df = pd.DataFrame([{"backend": r["backend"], "case_id": r["case_id"], "status": r["status"], **r["stage_ms"]} for r in rows])
    res = pd.read_csv(io.BytesIO(git(run, "results.csv.gz")), compression="gzip", low_memory=False)
    res["callname"] = [call_of(q, k) for q, k in zip(res.q_lens, res.k_lens)]
    df = df.merge(res[["backend", "case_id", "callname"]], on=["backend", "case_id"], how="left")
    df[df.columns[3:-1]] = df[df.columns[3:-1]] / 1000.0
    df["family"] = [next((f for f in FAMILIES if b.startswith(f)), "torch") for b in df.backend]
    df["call_warm"], df["gqa_decode"] = df.call - df.compile, df.gqa_probe - df.gqa_backend
    df["other"] = df.worker - df[["inputs", "call", "output_copy", "mask_probe", "gqa_probe", "read_probe"]].sum(axis=1)
    return df


def project(df, names, cases):
    ok = df[df.status == "ok"]
    mean, ref = ok.groupby("callname")[list(PARTS)].mean(), df[df.reference > 0].groupby("callname").reference.median()
    first = df[df.compile > 0].groupby("family").compile.mean()
    lane, configs, rows = defaultdict(float), defaultdict(set), defaultdict(int)
    for name in names:
        b = backends.get(name)
        for c in cases:
            est = estimate(c, True, 64, harness_on_device=True, backend=b)
            if not takes(b, c) or est.worker_bytes > CARD * GIB:
                continue
            rows["run"] += 1
            rows["alone"] += est.worker_bytes + est.harness_bytes > 62.3 * GIB  # an H100's gate
            for p in PARTS[:2] + PARTS[3:]:
                lane[p] += float(mean.loc[CALL[c.q_lens, c.k_lens], p])
            configs[name].add((c.head_dim, c.page_size is None, c.softcap is None, c.sinks, c.group, c.window.left is None))
    lane["reference"] = sum(float(ref.get(CALL[c.q_lens, c.k_lens], 0)) for c in cases)
    fam = {n: next((f for f in FAMILIES if n.startswith(f)), "torch") for n in configs}
    lane["compile"] = sum(len(k) * float(first.get(fam[n], first.mean())) for n, k in configs.items())
    return dict(rows), lane


def main():
    run = sys.argv[1] if len(sys.argv) > 1 else "h100-2026-12-06b-models"
    df, timing = load(run), json.loads(git(run, "timing.json"))
    t = df.groupby("family")[[*PARTS, "reference", "wait"]].sum().T
    t["all"] = t.sum(axis=1)
    lane_s = (timing["all_calls"]["wall_s"] - timing["all_calls"]["startup_s"]) * int(timing["jobs"])
    t.loc["idle", "all"] = lane_s - t.loc[["wait", "judge", "reference"], "all"].sum()
    print(t.drop(index="wait").assign(share=t["all"] / lane_s).round(3).to_string())
    every = backends.expand("all-gpu")
    for names in ([b for b in every if "split" not in b], every):
        (r0, l0), (r1, l1) = (project(df, names, profile_cases([], dedupe=d)[0]) for d in (False, True))
        l1["gqa_decode"] = 0.0  # on the device (tests/test_maskcheck.py)
        print(f"{len(names)} backends: rows {r0} -> {r1}; wall {sum(l0.values()) / LANES:.0f} -> {sum(l1.values()) / LANES:.0f} s")
        print({k: (round(l0[k]), round(l1[k])) for k in sorted(l0, key=lambda k: -l0[k])})


if __name__ == "__main__":
    main()
