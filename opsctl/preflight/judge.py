"""Pure judgements of one node's ``hw`` fact: one verdict per expectation of the profile, the
GPU/HCA NUMA affinity, and the agreement of Slurm's GRES with the GPUs found. No I/O here.

Codes (stable; docs/preflight.md): preflight-gpu-count, preflight-gpu-model, preflight-gpu-memory,
preflight-ib-hca, preflight-ib-rate, preflight-nvme, preflight-numa-affinity, preflight-slurm-gres.
"""

from __future__ import annotations

import re
from typing import Any

from opsctl.checks.model import Status, Verdict
from opsctl.model import Node
from opsctl.parsers.hw_facts_build import expectation_problems

# expectation_problems' keys -> the code that reports them
_CODE_OF_PROBLEM = {
    "gpu_count": "preflight-gpu-count",
    "gpu_model": "preflight-gpu-model",
    "gpu_memory": "preflight-gpu-memory",
    "ib_hcas": "preflight-ib-hca",
    "ib_state": "preflight-ib-hca",
    "ib_rate": "preflight-ib-rate",
    "nvme": "preflight-nvme",
}
# an expectation (hw_expected key) -> the code that judges it
_CODE_OF_EXPECTATION = {
    "gpu_count": "preflight-gpu-count",
    "gpu_model_substring": "preflight-gpu-model",
    "gpu_memory_mib_min": "preflight-gpu-memory",
    "ib_hcas": "preflight-ib-hca",
    "ib_rate_gbps": "preflight-ib-rate",
    "nvme_data_min": "preflight-nvme",
}
SOURCE = "ssh"


def _v(node: str, code: str, status: Status, summary: str, **evidence: Any) -> Verdict:
    evidence.setdefault("source", SOURCE)
    return Verdict(code=code, status=status, node=node, gpu=None, summary=summary, evidence=evidence)


def _ib_ports(hw: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    return [p for p in hw["ib_hcas"] if p["name"] in names and p["link_layer"] in ("InfiniBand", "")]


def _facts_for(code: str, hw: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """What was found and what was wanted, for the verdict's evidence."""
    if code == "preflight-gpu-count":
        ev: dict[str, Any] = {"seen": hw["gpu_count"], "expected": expected["gpu_count"]}
        if hw["collection_errors"]:
            ev["collection_errors"] = hw["collection_errors"]
        return ev
    if code == "preflight-gpu-model":
        return {"seen": hw["gpu_models"], "expected_substring": expected["gpu_model_substring"]}
    if code == "preflight-gpu-memory":
        mem = {str(g["index"]): g["memory_mib"] for g in hw["gpus"]}
        return {"memory_mib": mem, "min_mib": expected["gpu_memory_mib_min"]}
    if code == "preflight-ib-hca":
        ports = {f"{p['name']}/{p['port']}": p["state"] for p in hw["ib_hcas"]}
        return {"ports": ports, "expected": expected["ib_hcas"]}
    if code == "preflight-ib-rate":
        rates = {f"{p['name']}/{p['port']}": p["rate_gbps"] for p in _ib_ports(hw, expected["ib_hcas"])}
        return {"rate_gbps": rates, "min_gbps": expected["ib_rate_gbps"]}
    data = [d["path"] for d in hw["nvme"] if not d["system"]]
    return {"data_drives": data, "expected_min": expected["nvme_data_min"]}


def _ok_summary(code: str, hw: dict[str, Any], expected: dict[str, Any]) -> str:
    if code == "preflight-gpu-count":
        return f"{hw['gpu_count']} GPUs"
    if code == "preflight-gpu-model":
        return ", ".join(hw["gpu_models"])
    if code == "preflight-gpu-memory":
        return f"every GPU has >= {expected['gpu_memory_mib_min']} MiB"
    if code == "preflight-ib-hca":
        return f"{len(expected['ib_hcas'])} HCAs ACTIVE"
    if code == "preflight-ib-rate":
        return f"every port at >= {expected['ib_rate_gbps']} Gb/s"
    n = len([d for d in hw["nvme"] if not d["system"]])
    return f"{n} data NVMe drives"


def judge_hardware(node: str, hw: dict[str, Any], expected: dict[str, Any]) -> list[Verdict]:
    """One verdict per expectation in ``expected`` (the keys of the inventory's hw_expected)."""
    problems: dict[str, list[str]] = {}
    for key, sentence in expectation_problems(hw, expected):
        problems.setdefault(_CODE_OF_PROBLEM[key], []).append(sentence.split(": ", 1)[-1])
    verdicts = []
    for key, code in _CODE_OF_EXPECTATION.items():
        if key not in expected or (key == "ib_rate_gbps" and "ib_hcas" not in expected):
            continue
        facts = _facts_for(code, hw, expected)
        if code in problems:
            summary = "; ".join(problems[code])
            if code == "preflight-gpu-count":
                short = f"{hw['gpu_count']}/{expected['gpu_count']} gpus"
            else:
                short = summary[:60]
            verdicts.append(_v(node, code, Status.FAIL, summary, short=short, **facts))
        elif code in ("preflight-gpu-model", "preflight-gpu-memory") and not hw["gpus"]:
            verdicts.append(_v(node, code, Status.UNKNOWN, "no GPU visible to check", **facts))
        elif code == "preflight-ib-rate" and not any(
            p["state"] == "ACTIVE" for p in _ib_ports(hw, expected["ib_hcas"])
        ):
            verdicts.append(_v(node, code, Status.UNKNOWN, "no ACTIVE port to measure", **facts))
        else:
            verdicts.append(_v(node, code, Status.OK, _ok_summary(code, hw, expected), **facts))
    return verdicts


def _placed(numa: int | None) -> bool:
    return numa is not None and numa >= 0  # the kernel says -1 where it does not know


def judge_numa(node: str, hw: dict[str, Any], hcas: list[str]) -> list[Verdict]:
    """WARN when a GPU's NUMA node has no ACTIVE HCA (its GPUDirect RDMA traffic crosses the
    socket link). No verdict when the node reports no NUMA placement for GPUs or HCAs."""
    gpus = {g["index"]: g["numa_node"] for g in hw["gpus"] if _placed(g["numa_node"])}
    ports = [p for p in hw["ib_hcas"] if not hcas or p["name"] in hcas]
    placed = [p for p in ports if _placed(p["numa_node"])]
    if not gpus or not placed:
        return []
    active = {p["numa_node"] for p in placed if p["state"] == "ACTIVE"}
    lonely = {i: n for i, n in gpus.items() if n not in active}
    hca_numa = {f"{p['name']}/{p['port']}": p["numa_node"] for p in placed}
    code = "preflight-numa-affinity"
    if lonely:
        listed = ", ".join(f"GPU {i} (NUMA {n})" for i, n in sorted(lonely.items()))
        return [
            _v(
                node,
                code,
                Status.WARN,
                f"no ACTIVE HCA on the NUMA node of {listed}",
                short=f"{len(lonely)} gpus without local hca",
                gpu_numa=gpus,
                hca_numa=hca_numa,
            )
        ]
    return [
        _v(
            node,
            code,
            Status.OK,
            "every GPU has an ACTIVE HCA on its NUMA node",
            gpu_numa=gpus,
            hca_numa=hca_numa,
        )
    ]


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def judge_slurm_gres(node: str, hw: dict[str, Any], slurm_node: Node | None, slurm_error: str) -> Verdict:
    """Slurm's GRES against the GPUs found: more GPUs declared than present (jobs would be placed on
    GPUs that are not there) or a GRES type the GPUs are not FAIL; fewer declared WARN."""
    code = "preflight-slurm-gres"
    if slurm_error:
        return _v(node, code, Status.UNKNOWN, f"Slurm not reachable: {slurm_error}"[:200], short="no slurm")
    if slurm_node is None:
        return _v(node, code, Status.UNKNOWN, "node not known to Slurm", short="not in slurm")
    declared, gtype, seen = slurm_node.gpus_total, slurm_node.gpu_type, hw["gpu_count"]
    ev = {"declared": declared, "gres_type": gtype, "seen": seen, "models": hw["gpu_models"]}
    if declared > seen:
        return _v(
            node,
            code,
            Status.FAIL,
            f"Slurm declares {declared} GPUs, {seen} visible",
            short=f"gres {declared} > {seen} gpus",
            **ev,
        )
    wrong = [m for m in hw["gpu_models"] if gtype and _norm(gtype) not in _norm(m)]
    if wrong:
        return _v(
            node,
            code,
            Status.FAIL,
            f"Slurm GRES type {gtype!r}, GPUs are {', '.join(wrong)}",
            short=f"gres type {gtype}",
            **ev,
        )
    if declared < seen:
        summary = f"Slurm declares {declared} of {seen} GPUs (the rest are never used)"
        return _v(node, code, Status.WARN, summary, short=f"gres {declared} < {seen} gpus", **ev)
    typed = f" of type {gtype}" if gtype else ""
    return _v(node, code, Status.OK, f"Slurm declares the {declared} GPUs{typed}", **ev)
