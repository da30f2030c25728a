"""The H100 models run 06b (RUN's files at AT) replayed on the CPU through the sweep's memory gate
(parity.sweep.memgate.MemoryGate): each lane's rows in their order, each row a sleep of its lane seconds (wait + judge +
reference, scaled by SCALE) holding its estimate; the 13 rows that ran alone there (their detail says so) ask the whole
card. Two orders: "in place" (as the run did: the card drains for each) and "last" (held back until every lane is
done, parity.sweep.deferred). Prints per order: wall, lane-idle share, the gate's waits, drains and alone rows, in the
run's seconds. lab/runs/cpu-gate-replay-2026-12-07."""

import gzip
import io
import json
import subprocess
import sys
import threading
import time

import pandas as pd

from parity.sweep.memgate import MemoryGate

AT, RUN, GIB = "9c7992b59c3a1a4339f9bf1e9d26dbb790f75e1e", "h100-2026-12-06b-models", 1 << 30
BUDGET = int(62.3 * GIB)  # the H100's gate (lab/models_cost.py)
SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 0.02  # replay seconds per run second


def git(name):
    return subprocess.run(["git", "show", f"{AT}:reports/{RUN}/run/{name}"], check=True, capture_output=True).stdout


def lanes():
    """Per lane of the run, its rows in their order: (seconds, bytes, alone)."""
    stages = [json.loads(x) for x in gzip.decompress(git("stages.jsonl.gz")).decode().splitlines() if x.strip()]
    res = pd.read_csv(io.BytesIO(git("results.csv.gz")), compression="gzip", low_memory=False)
    res = res.drop_duplicates(["backend", "case_id"], keep="last").set_index(["backend", "case_id"])
    out = []
    for lane in json.loads(git("timing.json"))["lanes"]:
        rows = []
        for s in (s for s in stages if s["backend"] in lane):
            r = res.loc[(s["backend"], s["case_id"])]
            ms = s["stage_ms"]
            alone = "alone" in str(r.detail)
            rows.append(
                ((ms["wait"] + ms["judge"] + ms.get("judge_wait", 0.0) + ms["reference"]) / 1e3, int(float(r.est_mem_mb) * 2**20), alone)
            )
        out.append(rows)
    return out


def replay(work, last):
    gate, stop, held, lock = MemoryGate(BUDGET), threading.Event(), [], threading.Lock()
    waited = [0.0]

    def row(sec, need, alone):
        got = gate.admit(need, stop, alone=alone)
        with lock:
            waited[0] += got.wait_s
        time.sleep(sec * SCALE)
        gate.release(got.held)

    def lane(rows):
        for sec, need, alone in rows:
            if last and (alone or gate.needs_card(need)):  # the gate's own rule, as the sweep asks it
                with lock:
                    held.append((sec, need, alone))
            else:
                row(sec, need, alone)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=lane, args=(rows,)) for rows in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t_last = time.perf_counter()
    for r in held:  # one gate: one thread
        row(*r)
    wall, last_s = (time.perf_counter() - t0) / SCALE, (time.perf_counter() - t_last) / SCALE
    busy = sum(sec for rows in work for sec, _, _ in rows)
    return {
        "wall_s": round(wall),
        "idle": round(1 - busy / (wall * len(work)), 3),
        "gate_wait_s": round(waited[0] / SCALE),
        "drains": gate.drains,
        "alone_rows": gate.alone_rows,
        "held_back": len(held),
        "held_back_s": round(last_s),
    }


def main():
    work = lanes()
    print(f"{RUN}: {sum(map(len, work))} rows in {len(work)} lanes, {sum(a for rows in work for *_, a in rows)} alone; scale {SCALE}")
    for last in (False, True):
        print("last   " if last else "in place", replay(work, last))


if __name__ == "__main__":
    main()
