"""``dcgmi diag -r N -j`` (DCGM 4 layout) and ``dcgmi health -c -j`` from simulated state.

Both documents are built the way dcgmi builds them (the key names, nesting and error texts of
DCGM's dcgmi/Diag.cpp, dcgmi/Health.cpp and dcgm_errors.h) and printed with jsoncpp's layout.
Which test a fault fails, and with which error, is this simulator's choice: the lab cannot run
the real diagnostic, and docs/simulated-hardware.md says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsctl.hwsim.jsoncpp import to_styled_string
from opsctl.hwsim.state import Gpu, NodeHardware

DCGM_VERSION = "4.1.1"
GPU_DEVICE_ID = "2335"  # PCI device id of the H200 SXM
ENTITY_GROUP_GPU = 1

# dcgm_errors.h codes, categories and severities used here.
_FR = {
    "dbe": (4, 10, 2, "Detected {n} volatile double-bit ECC error(s) in GPU {gpu}."),
    "nvlink_down": (14, 11, 4, "GPU {gpu}'s NvLink link {link} is currently down"),
    "thermal": (10, 9, 1, "Detected clock throttling due to thermal violation in GPU {gpu}."),
    "remap_failure": (80, 10, 2, "GPU {gpu} had uncorrectable memory errors and row remapping failed."),
    "remap_pending": (85, 10, 6, "GPU {gpu} had memory errors and row remappings are pending"),
    "xid": (101, 5, 2, "Detected XID {xid} for GPU {gpu}"),
}


@dataclass(frozen=True)
class Incident:
    gpu: int
    system: str  # dcgmi's health system name: "Memory system", "PCIe system", ...
    fail: bool  # Failure (True) or Warning (False)
    code: int
    category: int
    severity: int
    message: str


def _incident(gpu: Gpu, system: str, kind: str, fail: bool, **kw: object) -> Incident:
    code, category, severity, fmt = _FR[kind]
    return Incident(gpu.index, system, fail, code, category, severity, fmt.format(gpu=gpu.index, **kw))


def _xid_system(xid: int) -> str:
    if xid in (48, 63, 64, 92, 94, 95):
        return "Memory system"
    if xid == 74:
        return "NVLINK system"
    if xid == 79:
        return "PCIe system"
    return "SM system"


def incidents(state: NodeHardware) -> list[Incident]:
    """What DCGM's health watches would report for this node, grouped by GPU then system."""
    found: list[Incident] = []
    for g in state.present_gpus:
        mine: list[Incident] = []
        if g.ecc_dbe_volatile:
            mine.append(_incident(g, "Memory system", "dbe", True, n=g.ecc_dbe_volatile))
        if g.remapped_rows_failure:
            mine.append(_incident(g, "Memory system", "remap_failure", True))
        elif g.remapped_rows_pending:
            mine.append(_incident(g, "Memory system", "remap_pending", False))
        for link in g.nvlinks:
            if not link.up:
                mine.append(_incident(g, "NVLINK system", "nvlink_down", True, link=link.link))
        if g.clock_event_reasons & 0x60:
            mine.append(_incident(g, "Thermal system", "thermal", False))
        # DCGM knows the XIDs it saw since its host engine last started (a GPU reset restarts it)
        seen = {x.xid for x in state.xids if x.gpu == g.index and x.time >= g.dcgm_xid_since}
        for xid in sorted(seen):
            mine.append(_incident(g, _xid_system(xid), "xid", True, xid=xid))
        order = ["PCIe system", "NVLINK system", "Memory system", "SM system", "Thermal system"]
        found += sorted(mine, key=lambda i: order.index(i.system))
    return found


def _split_message(msg: str, width: int = 54) -> list[str]:
    """dcgmi's word wrap of a health message into "overflow" lines (Health::AddErrorMessage)."""
    msg = msg.replace("\n", " ")
    if len(msg) <= width:
        return [msg]
    lines: list[str] = []
    p = start = 0
    while start < len(msg):
        p += width
        if p >= len(msg):
            p = len(msg) - 1
        elif p != len(msg) - 1:
            while msg[p] != " ":
                if msg[p + 1] in " .,/":
                    break
                p -= 1
            while msg[p] == " ":
                p -= 1
        while start < len(msg) and msg[start] == " ":
            start += 1
        if start >= len(msg):
            break
        lines.append(msg[start : p + 1])
        start = p + 2
    return lines


def health_document(state: NodeHardware) -> dict[str, object]:
    body: dict[str, object] = {}
    gpus: dict[str, object] = {}
    overall = 0  # 0 Healthy, 1 Warning, 2 Failure
    words = ("Healthy", "Warning", "Failure")
    for g in state.present_gpus:
        mine = [i for i in incidents(state) if i.gpu == g.index]
        if not mine:
            continue
        errors: dict[str, object] = {}
        worst_gpu = 0
        for system in dict.fromkeys(i.system for i in mine):
            group = [i for i in mine if i.system == system]
            worst = max(2 if i.fail else 1 for i in group)
            worst_gpu = max(worst_gpu, worst)
            errors[system] = {
                "overflow": _split_message(", ".join(i.message for i in group)),
                "value": words[worst],
            }
        gpus[str(g.index)] = {"children": {"Errors": {"children": errors}}, "value": words[worst_gpu]}
        overall = max(overall, worst_gpu)
    if gpus:
        body["GPU"] = {"children": gpus}
    body["Overall Health"] = {"value": words[overall]}
    return {"body": body, "header": ["Health Monitor Report"]}


def render_dcgmi_health(state: NodeHardware) -> str:
    """``dcgmi health -c -j`` (health watches assumed enabled, as the sim's setup does)."""
    return to_styled_string(health_document(state))


# (category, test name, lowest run level that includes it), in DCGM 4 output order.
_DIAG_TESTS = (
    ("Deployment", "software", 1),
    ("Integration", "pcie", 2),
    ("Hardware", "memory", 2),
    ("Hardware", "diagnostic", 3),
    ("Stress", "targeted_stress", 3),
    ("Stress", "targeted_power", 3),
    ("Stress", "memory_bandwidth", 3),
    ("Stress", "memtest", 4),
    ("Stress", "pulse_test", 4),
)


def _diag_failures(state: NodeHardware, level: int) -> dict[tuple[str, int], list[Incident]]:
    """Map (test, gpu) -> incidents that fail it, on the first test of the run that would see them."""
    tests = [t for _, t, lvl in _DIAG_TESTS if lvl <= level]
    out: dict[tuple[str, int], list[Incident]] = {}
    for inc in incidents(state):
        if inc.system == "NVLINK system" and "pcie" in tests:
            test = "pcie"
        elif inc.system == "Thermal system" and "targeted_stress" in tests:
            test = "targeted_stress"
        elif inc.system == "Thermal system":
            continue  # a short run does not load the GPU enough to see it
        else:
            test = "software"
        out.setdefault((test, inc.gpu), []).append(inc)
    return out


def diag_document(state: NodeHardware, level: int = 1) -> dict[str, object]:
    if level not in (1, 2, 3, 4):
        raise ValueError(f"run level must be 1-4, not {level}")
    failures = _diag_failures(state, level)
    categories: list[dict[str, object]] = []
    for _category, test, lvl in _DIAG_TESTS:
        if lvl > level:
            continue
        results: list[dict[str, object]] = []
        worst = "Pass"
        for g in state.present_gpus:
            incs = failures.get((test, g.index), [])
            status = "Pass"
            entry: dict[str, object] = {
                "entity_group": "GPU",
                "entity_group_id": ENTITY_GROUP_GPU,
                "entity_id": g.index,
            }
            if incs:
                status = "Fail" if any(i.fail for i in incs) else "Warn"
                entry["warnings"] = [
                    {
                        "error_category": i.category,
                        "error_id": i.code,
                        "error_severity": i.severity,
                        "warning": i.message,
                    }
                    for i in incs
                ]
            entry["status"] = status
            results.append(entry)
            if status == "Fail" or (status == "Warn" and worst == "Pass"):
                worst = status
        test_entry = {"name": test, "results": results, "test_summary": {"status": worst}}
        if categories and categories[-1]["category"] == _category:
            tests = categories[-1]["tests"]
            assert isinstance(tests, list)
            tests.append(test_entry)
        else:
            categories.append({"category": _category, "tests": [test_entry]})
    return {
        "DCGM Diagnostic": {"test_categories": categories},
        "entity_groups": [
            {
                "entities": [
                    {"device_id": GPU_DEVICE_ID, "entity_id": g.index, "serial_num": g.serial}
                    for g in state.present_gpus
                ],
                "entity_group": "GPU",
                "entity_group_id": ENTITY_GROUP_GPU,
            }
        ],
        "metadata": {"Driver Version Detected": state.driver_version, "version": DCGM_VERSION},
    }


def diag_failed(state: NodeHardware, level: int = 1) -> bool:
    return any(i.fail for incs in _diag_failures(state, level).values() for i in incs)


# dcgmi's message when the diagnostic's NVVS process is killed (DCGM_ST_NVVS_KILLED, -53), as
# dcgmi/Diag.cpp words it for the default group; main() returns -53, which exits as 203.
DIAG_KILLED_ERROR = (
    "Error: Unable to complete diagnostic. Return: (-53) : The DCGM diagnostic was killed by a signal\n"
)
DIAG_KILLED_EXIT = 203


def runtime_error_document(message: str) -> dict[str, object]:
    """What ``dcgmi diag -j`` prints when the diagnostic cannot run (Diag::HelperDisplayFailureMessage)."""
    return {"DCGM Diagnostic": {"runtime_error": message, "version": DCGM_VERSION}}


def render_dcgmi_diag(state: NodeHardware, level: int = 1) -> str:
    if state.diag_killed:
        return to_styled_string(runtime_error_document(DIAG_KILLED_ERROR))
    return to_styled_string(diag_document(state, level))


def render_dcgmi_link_status(state: NodeHardware) -> str:
    """``dcgmi nvlink --link-status`` (``-s``): one U/D per NVLink of each GPU.

    The NVSwitch section says none were found, as on the genuine sample: the simulator does not
    model the baseboard's NVSwitches.
    """
    lines = ["+----------------------+", "|  NvLink Link Status  |", "+----------------------+", "GPUs:"]
    for g in state.present_gpus:
        lines.append(f"    gpuId {g.index}:")
        lines.append("        " + " ".join("U" if link.up else "D" for link in g.nvlinks))
    lines += ["NvSwitches:", "    No NvSwitches found.", "", "Key: Up=U, Down=D, Disabled=X, Not Supported=_"]
    return "\n".join(lines) + "\n"
