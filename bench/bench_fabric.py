"""Fabric acceptance scheduling (``opsctl preflight --fabric``) for 64 and 512 simulated nodes.

    .venv/bin/python bench/bench_fabric.py [--nodes 64 512] [--partners 2] [--runs 20] [--json]

For each fleet size: the rounds of disjoint pairs the scheduler makes (every node meets
``--partners`` distinct partners; the count does not grow with the fleet), the pairs per round,
and the median time to build the schedule, to attribute every rail result of a pass with faults
(one slow rail on 1% of the nodes, one bad cable) and to plan the retests. Pure computation: no
SSH, no simulator process; the pair results come from the simulated tools' own bandwidth model
(``opsctl.hwsim.fabric_tools.pair_gbps``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opsctl.hwsim.fabric_tools import FabricFaults, hca_end, pair_gbps
from opsctl.hwsim.state import make_node
from opsctl.preflight.isolate import RailResult, attribute
from opsctl.preflight.pairs import check_rounds, retest_rounds, rounds

RAILS = [f"mlx5_{i}" for i in range(8)]
FLOOR = 360.0


def _median_ms(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def bench(n: int, partners: int, runs: int) -> dict[str, object]:
    names = [f"gpu-{i:03d}" for i in range(1, n + 1)]
    schedule = rounds(names, partners)
    check_rounds(schedule)
    # a fleet with faults: a slow rail on 1% of the nodes, one bad cable between the first pair
    faults = {name: FabricFaults() for name in names}
    slow = names[7::100]  # about 1% of the fleet
    for name in slow:
        faults[name].rails["mlx5_3"] = 180.0
    a, b = schedule[0][0].client, schedule[0][0].server
    faults[a].links[b], faults[b].links[a] = 40.0, 40.0
    states = {name: make_node(name, now=0.0) for name in names}

    def measure(plan: list) -> list[RailResult]:  # type: ignore[type-arg]
        out = []
        for rnd in plan:
            for p in rnd:
                for rail in RAILS:
                    a_end = hca_end(states[p.client], faults[p.client], rail)
                    g = pair_gbps(a_end, hca_end(states[p.server], faults[p.server], rail))
                    out.append(RailResult(p.client, p.server, rail, g, g >= FLOOR))
        return out

    results = measure(schedule)
    att = attribute(results)
    suspects = att.suspects()
    good = [x for x in names if x not in suspects and all(x != nd for nd, _ in att.node_rails)]
    retests = retest_rounds(suspects, good, 2)
    att = attribute(results + measure(retests))  # what the retests decide
    return {
        "nodes": n,
        "partners": partners,
        "rounds": len(schedule),
        "pairs_per_round": [len(r) for r in schedule],
        "rail_results": len(results),
        "node_rails_found": sorted(f"{x}/{r}" for x, r in att.node_rails),
        "links_found": len({(x, y) for x, y, _ in att.links}),
        "retest_rounds": len(retests),
        "schedule_ms": round(_median_ms(lambda: rounds(names, partners), runs), 3),
        "attribute_ms": round(_median_ms(lambda: attribute(results), runs), 3),
        "retest_plan_ms": round(_median_ms(lambda: retest_rounds(suspects, good, 2), runs), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--partners", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = [bench(n, args.partners, args.runs) for n in args.nodes]
    for row in out:
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"{row['nodes']} nodes, {row['partners']} partners: {row['rounds']} rounds of "
                f"{row['pairs_per_round']} pairs ({row['rail_results']} rail tests), "
                f"{row['retest_rounds']} retest rounds; schedule {row['schedule_ms']} ms, "
                f"attribution {row['attribute_ms']} ms, retest plan {row['retest_plan_ms']} ms "
                f"(median of {args.runs}); found {len(row['node_rails_found'])} slow rails, "  # type: ignore[arg-type]
                f"{row['links_found']} bad links"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
