"""dcgm-exporter and node_exporter series, read through Prometheus for all nodes at once.

A handful of queries cover the whole cluster, whatever its size (they run concurrently):

1. ``timestamp(DCGM_FI_DEV_GPU_TEMP)``: which GPUs of which node report, and how fresh.
2. ``count by (__name__, node)``: which families each node reports at all.
3. one regex selector over the gauges the checks read (ECC, retired pages, row remap, PCIe,
   last XID, recovery action, InfiniBand port state and rate, boot time), the ones whose healthy
   value is 0 only where they are not; the clock event reasons only where a hardware bit is set.
4. one ``increase(...)`` per counter, joined with ``or`` and labelled with the counter's name.
5. the XID count (``DCGM_EXP_XID_ERRORS_COUNT``, a count within dcgm-exporter's own window, 5 min
   by default) over the XID policy window: its maximum, and the last time each (GPU, XID) was > 0.
   An XID that left the exporter's window stays visible for the whole policy window.
6. the kernel's boot id (``opsctl_boot_id_info``, the node_exporter role's textfile metric): a
   node's boot id is that ("kernel" kind); without it, its boot time ``boot-<btime>`` ("btime"
   kind, which a clock step moves: remediation allows for that, docs/health-checks.md).

A node with no fresh GPU series is UNKNOWN (``reachable=False``), never healthy, and never a
reason to drain. A fact whose series exist for no node at all is not "provided" and its check is
skipped rather than reported UNKNOWN everywhere. A fact the fleet provides but one node's series
lack (its node_exporter is down, its counters file differs) is ``None`` on that node: UNKNOWN for
that family only, never healthy and never failing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import gc
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from opsctl.errors import Unreachable
from opsctl.evidence.model import BOOT_BTIME, BOOT_KERNEL, Evidence, GpuEvidence, IbPortEvidence, XidEvent

FRESHNESS_METRIC = "DCGM_FI_DEV_GPU_TEMP"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # per-XID count within the exporter's window (label xid)
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"  # value of the LAST XID only; used when the count is absent
# DCGM field 1523: named ..._GET_GPU_RECOVERY_ACTION in DCGM 4.5, ..._GPU_RECOVERY_ACTION from 4.6
RECOVERY_GAUGES = ("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_GPU_RECOVERY_ACTION")
# "GPU recovery action changed": its class is the action it names, which only its message says; here
# the XID carries the action field 1523 serves for its GPU instead (where the exporter serves it)
XID_RECOVERY_CHANGED = 154
BOOT_METRIC = "node_boot_time_seconds"  # node_exporter's stat collector: /proc/stat btime
# the prometheus role's scrape job of dcgm-exporter (instance = the node's inventory name): a node
# whose exporter target is up but serves no GPU series has zero GPUs (gpu-count FAILs where GPUs are
# expected), not unknown ones
DCGM_JOB = "dcgm-exporter"
# the kernel's boot_id, which the node_exporter role's opsctl-boot-id unit writes at every boot into
# the textfile collector's directory: opsctl_boot_id_info{boot_id="<uuid>"} 1
BOOT_ID_METRIC = "opsctl_boot_id_info"
XID_STEP_SECONDS = 5  # resolution of an XID's last-counted time (about the scrape interval)
GAUGES = (
    XID_LAST,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_PCIE_LINK_GEN",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",  # DCGM 3 name of the bitmask
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",  # DCGM 4 name
    *RECOVERY_GAUGES,
    "node_infiniband_state_id",
    "node_infiniband_physical_state_id",
    "node_infiniband_rate_bytes_per_second",
    BOOT_METRIC,
)
REASON_GAUGES = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
# Gauges whose healthy value is 0: fetched only where non-zero.
NONZERO_GAUGES = tuple(g for g in GAUGES if g.startswith("DCGM_") and "PCIE_LINK" not in g)
# Gauges read in full (their healthy value is not zero).
VALUE_GAUGES = tuple(g for g in GAUGES if g not in NONZERO_GAUGES)
# counter series -> name used in evidence (the sysfs counter name for InfiniBand)
COUNTERS = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_crc",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "nvlink_crc",
    "node_infiniband_link_downed_total": "link_downed",
    "node_infiniband_symbol_error_total": "symbol_error",
    "node_infiniband_port_errors_received_total": "port_rcv_errors",
    "node_infiniband_link_error_recovery_total": "link_error_recovery",
    "node_infiniband_local_link_integrity_errors_total": "local_link_integrity_errors",
    "node_infiniband_excessive_buffer_overrun_errors_total": "excessive_buffer_overrun_errors",
    "node_infiniband_port_receive_remote_physical_errors_total": "port_rcv_remote_physical_errors",
    "node_infiniband_port_discards_transmitted_total": "port_xmit_discards",
}
# NVML clock event reason bits (nvml.h nvmlClocksEventReason*)
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
# nvmlDeviceGpuRecoveryAction_t -> the evidence's words. Values newer drivers added (5 recover the
# IMEX domain, 6 reset the PCIe bus, 7 reboot the system) or do not document read as "reboot":
# only a new boot is sure to satisfy them.
RECOVERY_ACTIONS = {0: "none", 1: "reset", 2: "reboot", 3: "drain_p2p", 4: "drain_and_reset"}
# IB port states as the kernel numbers them (sysfs "4: ACTIVE", "5: LinkUp")
IB_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
IB_PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "PhyTest",
}

Series = dict[str, Any]
_BOOT_ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# node identity (any spelling) and entity labels
_NODE = "Hostname, hostname, node, nodename, instance"
_KEEP = f"{_NODE}, gpu, device, port"
_GPU_IDENTITY = f"{_NODE}, gpu, UUID, pci_bus_id, modelName"


def node_of(labels: dict[str, str]) -> str | None:
    """dcgm-exporter used ``Hostname`` and later ``hostname``; node_exporter series carry the node
    in ``instance`` (host:port) unless relabelled to ``node``/``nodename``."""
    for key in ("Hostname", "hostname", "node", "nodename"):
        if labels.get(key):
            return labels[key]
    instance = labels.get("instance", "")
    if instance:
        return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance
    return None


class PrometheusSource:
    name = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        stale_after: float = 30.0,
        window_seconds: int = 600,
        xid_window_seconds: int = 3600,
        xid_step_seconds: int = XID_STEP_SECONDS,
        timeout: float = 5.0,
        query_fn: Any = None,
    ) -> None:
        """``window_seconds``: the counter increase window; ``xid_window_seconds``: how far back XIDs
        count (the XID policy window, thresholds ``[xid] window_seconds``); ``xid_step_seconds``:
        the resolution of "when was this XID last seen" (about the scrape interval)."""
        self.url = url
        self.stale_after = stale_after
        self.window_seconds = window_seconds
        self.xid_window_seconds = xid_window_seconds
        self.xid_step_seconds = xid_step_seconds
        self.timeout = timeout
        self._query_fn = query_fn

    # -- I/O ----------------------------------------------------------------------------------
    def _client_query(self) -> Any:
        if self._query_fn is not None:
            return self._query_fn
        from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
        from requests import RequestException
        from urllib3.util.retry import Retry

        # one quick retry, not the client's default backoff: on-call wants "unreachable" fast
        retry = Retry(total=1, backoff_factor=0.2, status_forcelist=(502, 503, 504))
        client = PrometheusConnect(url=self.url, disable_ssl=True, timeout=self.timeout, retry=retry)

        def query(q: str) -> list[Series]:
            try:
                return list(client.custom_query(q))
            except RequestException as exc:
                raise Unreachable(f"prometheus at {self.url} unreachable ({type(exc).__name__})") from None
            except PrometheusApiClientException as exc:
                raise Unreachable(f"prometheus at {self.url} refused a query: {exc}"[:300]) from None

        return query

    def queries(self) -> dict[str, str]:
        """Nine instant queries for the whole cluster. A healthy cluster answers with little: the
        fault gauges come back only where they are non-zero, counters and XIDs only where they grew;
        which families each node reports at all comes from one ``count by (__name__)``."""
        w = f"{self.window_seconds}s"
        xw, step = f"{self.xid_window_seconds}s", f"{self.xid_step_seconds}s"
        nonzero = "|".join(g for g in NONZERO_GAUGES if g not in REASON_GAUGES)
        every = "|".join((*NONZERO_GAUGES, *COUNTERS, XID_COUNT))  # the rest's presence shows in "values"
        counted = f'{XID_COUNT}{{xid!=""}}'
        counters = " or ".join(
            f'label_replace(max by ({_KEEP}) (increase({name}[{w}]) > 0), "counter", "{name}", "", "")'
            for name in COUNTERS
        )
        return {
            "fresh": f"max by ({_GPU_IDENTITY}) (timestamp({FRESHNESS_METRIC}))",
            "present": f'count by (__name__, {_NODE}) ({{__name__=~"{every}"}})',
            "nonzero": f'max by (__name__, {_KEEP}) ({{__name__=~"{nonzero}"}} != 0)',
            # clock event reasons below 0x40 (idle, application clocks, software caps) carry neither
            # hardware slowdown bit: they read as 0. (Their own query: "or" and "unless" match
            # series on their labels without the metric name, so another family's series of the
            # same GPU would be dropped with them.)
            "reasons": f'max by (__name__, {_KEEP}) ({{__name__=~"{"|".join(REASON_GAUGES)}"}}'
            f" >= {HW_THERMAL_SLOWDOWN})",
            "values": f'max by (__name__, {_KEEP}) ({{__name__=~"{"|".join(VALUE_GAUGES)}"}})',
            "counters": counters,
            # only series with an xid label: the zero series of a GPU without XIDs has none, so a
            # healthy fleet costs nothing here however long the window
            "xid_counts": f"max by ({_KEEP}, xid) (max_over_time({counted}[{xw}]) > 0)",
            # timestamp() of a selector is the sample's own time, so this is the last scrape that
            # still counted the XID (at most the exporter's window after the event itself)
            "xid_last": f"max by ({_KEEP}, xid) (max_over_time("
            f"(timestamp({counted}) and {counted} > 0)[{xw}:{step}]))",
            # the last scrape of each node's dcgm-exporter target that answered (up 1)
            "dcgm_up": f'max by (instance) (timestamp(up{{job="{DCGM_JOB}"}} == 1))',
            "boot_ids": f"max by (boot_id, {_NODE}) ({BOOT_ID_METRIC})",
        }

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        query = self._client_query()
        qs = self.queries()
        with _gc_paused(), concurrent.futures.ThreadPoolExecutor(max_workers=len(qs)) as pool:
            futures = {key: pool.submit(query, q) for key, q in qs.items()}
            results = {key: f.result() for key, f in futures.items()}
            return build_evidence(
                nodes, results, now, self.stale_after, self.window_seconds, self.xid_step_seconds
            )


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing the answers and building the evidence allocate some 10^5 small dicts and lists, none
    in a reference cycle; the cyclic collector, triggered by the count of allocations, would
    traverse the whole growing heap again and again (half of a 512-node pass's CPU time). Reference
    counting frees all of it; collection resumes afterwards as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# -- pure: query results -> evidence ----------------------------------------------------------
def _value(s: Series) -> float:
    return float(s["value"][1])


def _gpu(labels: dict[str, str]) -> int | None:
    g = labels.get("gpu")
    return int(g) if g is not None and g.isdigit() else None


def build_evidence(
    nodes: list[str],
    results: dict[str, list[Series]],
    now: float,
    stale_after: float,
    window_seconds: int,
    xid_step_seconds: float = XID_STEP_SECONDS,
) -> list[Evidence]:
    fresh: dict[str, dict[int, float]] = defaultdict(dict)
    uuids: dict[tuple[str, int], dict[str, str]] = {}
    for s in results.get("fresh", []):
        node, gpu = node_of(s["metric"]), _gpu(s["metric"])
        if node is None or gpu is None:
            continue
        fresh[node][gpu] = max(_value(s), fresh[node].get(gpu, 0.0))
        uuids[(node, gpu)] = s["metric"]
    exporter_up: dict[str, float] = {}
    for s in results.get("dcgm_up", []):
        node = node_of(s["metric"])
        if node is not None:
            exporter_up[node] = max(_value(s), exporter_up.get(node, 0.0))
    present: dict[str, set[str]] = defaultdict(set)
    for s in (*results.get("present", []), *results.get("values", [])):
        node = node_of(s["metric"])
        if node is not None:
            present[node].add(s["metric"].get("__name__", ""))
    families: set[str] = set().union(*present.values()) if present else set()
    gauges: dict[str, dict[str, list[Series]]] = defaultdict(lambda: defaultdict(list))
    for key in ("nonzero", "reasons", "values"):
        for s in results.get(key, []):
            node, name = node_of(s["metric"]), s["metric"].get("__name__", "")
            if node is not None:
                gauges[node][name].append(s)
    counters: dict[str, dict[str, list[Series]]] = defaultdict(lambda: defaultdict(list))
    for s in results.get("counters", []):
        node, name = node_of(s["metric"]), s["metric"].get("counter", "")
        if node is not None:
            counters[node][COUNTERS.get(name, name)].append(s)
    xid_counts: dict[str, list[Series]] = defaultdict(list)
    xid_last: dict[tuple[str, int | None, str], float] = {}
    for s in results.get("xid_counts", []):
        node = node_of(s["metric"])
        if node is not None:
            xid_counts[node].append(s)
    for s in results.get("xid_last", []):
        node = node_of(s["metric"])
        if node is not None:
            xid_last[(node, _gpu(s["metric"]), s["metric"].get("xid", ""))] = _value(s)
    kernel_boots: dict[str, set[str]] = defaultdict(set)
    for s in results.get("boot_ids", []):
        node = node_of(s["metric"])
        if node is not None and _BOOT_ID_RE.match(s["metric"].get("boot_id", "")):
            kernel_boots[node].add(s["metric"]["boot_id"])
    provides = _provides(families)
    out: list[Evidence] = []
    for node in nodes:
        stamps = fresh.get(node, {})
        seen = max(stamps.values(), default=exporter_up.get(node))  # an up exporter without GPUs
        if seen is None:
            out.append(Evidence(node, "prometheus", now, reachable=False, error="no dcgm-exporter series"))
            continue
        age = now - seen
        if age > stale_after:
            out.append(
                Evidence(
                    node,
                    "prometheus",
                    now,
                    reachable=False,
                    error=f"dcgm-exporter series stale ({age:.0f}s old)",
                )
            )
            continue
        have = present[node]
        live = sorted(g for g, ts in stamps.items() if now - ts <= stale_after)
        _fill_zeros(live, have, gauges[node], counters[node])
        ev = Evidence(node, "prometheus", now, gpu_count=len(live), provides=provides)
        ev.observed_at = max((stamps[g] for g in live), default=seen)  # the scrape these facts come from
        by_gauge, by_counter = _ByGpu(gauges[node]), _ByGpu(counters[node])
        ev.gpus = [
            _gpu_evidence(g, uuids[(node, g)], by_gauge, by_counter, window_seconds) for g in live
        ]
        # a node whose exporter reports no XID family stays None: unknown, not "no XID"
        if XID_COUNT in have:
            ev.xid_mode = "count"
            ev.xids = _counted_xids(node, xid_counts[node], xid_last)
            _mark_counted_now(ev.xids, seen, stale_after + xid_step_seconds)
            ev.xids += _uncounted_last_xids(gauges[node], ev.xids)
        elif XID_LAST in have:
            ev.xid_mode = "last-value"
            ev.xids = _last_xids(gauges[node])
        if ev.xids:
            _attach_recovery(ev.xids, ev.gpus, by_gauge)
        # node_exporter's families, per node: absent (its exporter down) is None, not "no port"
        if "node_infiniband_state_id" in have:
            with_counters = any(k in have for k in COUNTERS if k.startswith("node_infiniband"))
            ev.ib_ports = _ib_ports(gauges[node], counters[node], window_seconds, with_counters)
        _set_boot(ev, gauges[node].get(BOOT_METRIC), kernel_boots.get(node, set()))
        _forget_earlier_boot(ev, stamps)
        out.append(ev)
    return out


def _fill_zeros(
    live: list[int], present: set[str], g: dict[str, list[Series]], c: dict[str, list[Series]]
) -> None:
    """Give every live GPU (and every known IB port) the healthy value of each family the node
    reports but that came back only where non-zero: 0 for fault gauges, no increase for counters."""

    zero = _zero_series  # shared, read-only: a 512-node pass would otherwise build 60000 of them
    for name in NONZERO_GAUGES:
        if name not in present:
            continue
        have = {_gpu(x["metric"]) for x in g[name]}
        g[name].extend(zero(("gpu", str(i))) for i in live if i not in have)
    ports = {
        (x["metric"].get("device", ""), x["metric"].get("port", "")) for x in g["node_infiniband_state_id"]
    }
    for name, key in COUNTERS.items():
        if name not in present:
            continue
        if name.startswith("DCGM_"):
            have = {_gpu(x["metric"]) for x in c[key]}
            c[key].extend(zero(("gpu", str(i))) for i in live if i not in have)
        else:
            have_ports = {(x["metric"].get("device", ""), x["metric"].get("port", "")) for x in c[key]}
            c[key].extend(zero(("device", d), ("port", p)) for d, p in ports if (d, p) not in have_ports)


@functools.lru_cache(maxsize=4096)
def _zero_series(*labels: tuple[str, str]) -> Series:
    """The healthy value (0) of a series with these labels. Shared between nodes and families: the
    readers of a node's series only read them."""
    return {"metric": dict(labels), "value": [0, "0"]}


def _provides(families: set[str]) -> frozenset[str]:
    p = {"gpu_count"}
    rules = {
        "xid": (XID_COUNT, XID_LAST),
        "ecc": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",),
        "ecc_sbe_rate": ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",),
        "retired_pages": ("DCGM_FI_DEV_RETIRED_DBE",),
        "row_remap": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING"),
        "nvlink_crc": (
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        ),
        "pcie": ("DCGM_FI_DEV_PCIE_LINK_GEN",),
        "throttle": REASON_GAUGES,
        "ib": ("node_infiniband_state_id",),
        "ib_errors": tuple(k for k in COUNTERS if k.startswith("node_infiniband")),
        # field 1523: DCGM >= 4.5 and a counters file that lists it (the pinned DCGM 3.3 has none)
        "recovery": RECOVERY_GAUGES,
    }
    for fact, names in rules.items():
        if families.intersection(names):
            p.add(fact)
    return frozenset(p)


class _ByGpu:
    """One node's series of each family by GPU index, indexed once per family: every GPU looks up
    a dozen families, and scanning each family's list per GPU made a 512-node pass spend most of
    its time here."""

    def __init__(self, series: dict[str, list[Series]]) -> None:
        self._series = series
        self._max: dict[str, dict[int | None, float]] = {}
        self._sum: dict[str, dict[int | None, float]] = {}

    def either(self, first: str, second: str) -> str:
        """The first family if the node has series of it, else the second (renamed fields)."""
        return first if self._series.get(first) else second

    def max(self, name: str, gpu: int) -> float | None:
        if name not in self._max:
            table: dict[int | None, float] = {}
            for s in self._series.get(name, ()):
                key, v = _gpu(s["metric"]), _value(s)
                table[key] = max(v, table[key]) if key in table else v
            self._max[name] = table
        return self._max[name].get(gpu)

    def sum(self, name: str, gpu: int) -> float | None:
        if name not in self._sum:
            table: dict[int | None, float] = {}
            for s in self._series.get(name, ()):
                key = _gpu(s["metric"])
                table[key] = table.get(key, 0.0) + _value(s)
            self._sum[name] = table
        return self._sum[name].get(gpu)


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def _bool(v: float | None) -> bool | None:
    return None if v is None else v != 0


def _gpu_evidence(gpu: int, labels: dict[str, str], g: _ByGpu, c: _ByGpu, window: int) -> GpuEvidence:
    reasons = g.max(g.either("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), gpu)
    sbe = c.max("ecc_sbe", gpu)
    crc = c.sum("nvlink_crc", gpu)
    recovery = g.max(g.either(*RECOVERY_GAUGES), gpu)
    return GpuEvidence(
        index=gpu,
        uuid=labels.get("UUID", ""),
        pci_bus_id=labels.get("pci_bus_id", ""),
        model=labels.get("modelName", ""),
        ecc_dbe_volatile=_int(g.max("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu)),
        ecc_sbe_per_hour=None if sbe is None else sbe * 3600.0 / window,
        retired_pages_sbe=_int(g.max("DCGM_FI_DEV_RETIRED_SBE", gpu)),
        retired_pages_dbe=_int(g.max("DCGM_FI_DEV_RETIRED_DBE", gpu)),
        retired_pages_pending=_bool(g.max("DCGM_FI_DEV_RETIRED_PENDING", gpu)),
        remap_uncorrectable=_int(g.max("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu)),
        remap_pending=_bool(g.max("DCGM_FI_DEV_ROW_REMAP_PENDING", gpu)),
        remap_failure=_bool(g.max("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu)),
        nvlink_crc_per_second=None if crc is None else crc / window,
        pcie_gen=_int(g.max("DCGM_FI_DEV_PCIE_LINK_GEN", gpu)),
        pcie_width=_int(g.max("DCGM_FI_DEV_PCIE_LINK_WIDTH", gpu)),
        recovery_action=None if recovery is None else RECOVERY_ACTIONS.get(int(recovery), "reboot"),
        thermal_throttle=None if reasons is None else bool(int(reasons) & HW_THERMAL_SLOWDOWN),
        power_throttle=None if reasons is None else bool(int(reasons) & HW_POWER_BRAKE_SLOWDOWN),
    )


def _counted_xids(
    node: str, counts: list[Series], last: dict[tuple[str, int | None, str], float]
) -> list[XidEvent]:
    """One event per (GPU, XID) counted at any time in the XID window: the highest count the
    exporter's window held, stamped with the last time it was still counted."""
    out: list[XidEvent] = []
    for s in counts:
        code, gpu = s["metric"].get("xid", ""), _gpu(s["metric"])
        if not code.isdigit() or _value(s) <= 0:
            continue
        out.append(
            XidEvent(
                xid=int(code),
                gpu=gpu,
                count=int(_value(s)),
                time=last.get((node, gpu, code)),
                message=f"{XID_COUNT} (last counted)",
            )
        )
    return sorted(out, key=lambda e: (e.gpu if e.gpu is not None else -1, e.xid))


def _uncounted_last_xids(g: dict[str, list[Series]], counted: list[XidEvent]) -> list[XidEvent]:
    """The last-XID gauge's XIDs that no count of the XID window shows. dcgm-exporter counts an XID
    for its window only (5 min): one raised while Prometheus was down for longer never reached a
    count Prometheus stored, and only the gauge, which keeps the last XID until the driver reloads
    (a reboot), still says so. It is of this boot (the gauge starts at 0 with the node), its time
    unknown (``uncounted``: the check keeps those whose fix is a reboot or a replacement)."""
    have = {(e.gpu, e.xid) for e in counted}
    out = []
    for s in g.get(XID_LAST) or []:
        xid, gpu = int(_value(s)), _gpu(s["metric"])
        if xid > 0 and (gpu, xid) not in have:
            out.append(
                XidEvent(xid=xid, gpu=gpu, message=f"last XID ({XID_LAST}), never counted", uncounted=True)
            )
    return out


def _attach_recovery(xids: list[XidEvent], gpus: list[GpuEvidence], g: _ByGpu) -> None:
    """XID 154 comes without its message here: give each the recovery action the exporter serves
    for its GPU now, and the series and value it is read from. None where that GPU has no such
    series (no DCGM 4.5, or a counters file without the field): the check falls back to the
    catalogue's class, and says so."""
    name = g.either(*RECOVERY_GAUGES)
    actions = {x.index: x.recovery_action for x in gpus}
    for e in xids:
        if e.xid != XID_RECOVERY_CHANGED or e.gpu is None:
            continue
        action, value = actions.get(e.gpu), g.max(name, e.gpu)
        if action is not None and value is not None:
            e.recovery_action, e.recovery_from = action, f"{name}={int(value)}"


def _mark_counted_now(xids: list[XidEvent], scraped: float, lag: float) -> None:
    """Whether the node's latest scrape (``scraped``) still counts each XID. Its last-counted time
    comes from a subquery whose last step may end before that scrape, and the scrape before it may
    be up to one interval (< stale_after) older: ``lag`` is stale_after plus the step. An XID last
    counted longer ago than that has left the exporter's window, or is from before a reboot. No
    last-counted time: the count saw it in a scrape after the subquery's last step, so it is new."""
    for e in xids:
        e.counted_now = e.time is None or e.time >= scraped - lag


def _set_boot(ev: Evidence, boot: list[Series] | None, kernel: set[str]) -> None:
    """The node's boot: the kernel's boot_id where its textfile metric names exactly one (two would
    be the scrapes of two boots, neither sure to be the current one), else the boot time as
    ``boot-<btime>`` (whole seconds: stable per boot, but a clock step moves it)."""
    if boot:
        ev.boot_time = max(_value(b) for b in boot)
    if len(kernel) == 1:
        ev.boot_id, ev.boot_kind = next(iter(kernel)), BOOT_KERNEL
    elif ev.boot_time is not None:
        ev.boot_id, ev.boot_kind = f"boot-{int(ev.boot_time)}", BOOT_BTIME
    if ev.boot_time is not None:
        _stamp_boot(ev, ev.boot_time)


def _forget_earlier_boot(ev: Evidence, stamps: dict[int, float]) -> None:
    """A GPU's samples scraped before the node's boot time (node_exporter scraped the new boot,
    dcgm-exporter not yet, as right after a fast reboot) are of the boot before: what the driver
    asked for then is unknown now (until the next scrape), and the XIDs that scrape counted belong
    to the earlier boot, whatever their last-counted time says."""
    if ev.boot_time is None or ev.boot_time > ev.collected_at:
        return  # a boot after this query is a node clock stepped ahead, not a boot: no reason to forget
    boot = ev.boot_time
    earlier = {g.index for g in ev.gpus or [] if stamps.get(g.index, boot) < boot}
    for g in ev.gpus or []:
        if g.index in earlier:
            g.recovery_action, g.reset_required = None, None
    for e in ev.xids or []:
        if e.gpu in earlier:
            e.boot_id, e.counted_now = f"before-{ev.boot_id}", False


def _stamp_boot(ev: Evidence, boot_time: float) -> None:
    """Counted XIDs last seen before this boot belong to an earlier one (which, Prometheus does not
    say): the XID check leaves them to history, like the kernel log's of earlier boots."""
    for e in ev.xids or []:
        if e.time is not None:
            e.boot_id = ev.boot_id if e.time >= boot_time else f"before-{ev.boot_id}"


def _last_xids(g: dict[str, list[Series]]) -> list[XidEvent]:
    # Only the last XID per GPU is known, and not when it happened: treat a non-zero value as
    # current. It stays until the driver reloads, and a later harmless XID hides a fatal one.
    return [
        XidEvent(xid=int(_value(s)), gpu=_gpu(s["metric"]), time=None, message=f"last XID ({XID_LAST})")
        for s in g.get(XID_LAST) or []
        if _value(s) > 0
    ]


def _ib_ports(
    g: dict[str, list[Series]], c: dict[str, list[Series]], window: int, with_counters: bool
) -> list[IbPortEvidence]:
    ports: dict[tuple[str, int], IbPortEvidence] = {}

    def port(s: Series) -> IbPortEvidence | None:
        dev, num = s["metric"].get("device"), s["metric"].get("port", "")
        if not dev or not num.isdigit():
            return None
        key = (dev, int(num))
        if key not in ports:
            ports[key] = IbPortEvidence(
                device=dev,
                port=int(num),
                counter_deltas={} if with_counters else None,
                window_seconds=float(window) if with_counters else None,
            )
        return ports[key]

    for s in g.get("node_infiniband_state_id") or []:
        p = port(s)
        if p:
            p.state = IB_STATES.get(int(_value(s)), str(int(_value(s))))
    for s in g.get("node_infiniband_physical_state_id") or []:
        p = port(s)
        if p:
            p.phys_state = IB_PHYS_STATES.get(int(_value(s)), str(int(_value(s))))
    for s in g.get("node_infiniband_rate_bytes_per_second") or []:
        p = port(s)
        if p:
            p.rate_gbps = _value(s) * 8 / 1e9
    if with_counters:
        for name, series in c.items():
            if name in ("ecc_sbe", "nvlink_crc"):
                continue
            for s in series:
                p = port(s)
                if p and p.counter_deltas is not None:
                    # increase() extrapolates; round to whole events
                    p.counter_deltas[name] = round(_value(s))
    return sorted(ports.values(), key=lambda p: (p.device, p.port))
