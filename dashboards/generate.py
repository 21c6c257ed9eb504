"""The Grafana dashboards as code: ``python dashboards/generate.py`` writes dashboards/grafana/*.json,
and the XID matcher of the GpuFatalXid alert rule (dashboards/alerts/gpu-node-health.rules.yml)
from the XID catalogue; ``--check`` exits 1 when a committed file differs from what it makes.

Built with Grafana's own Foundation SDK (grafana-foundation-sdk, the builders generated from
Grafana 11.6's schemas), so every field name and panel option is one Grafana knows. Queries follow
what production exports (tests/unit/ansible/test_metric_contract.py): dcgm-exporter series name
their node in ``Hostname``, node_exporter series in ``instance`` (the inventory name the
prometheus role gives every target), the remediation service's in ``node``, and a training run's
series carry ``run`` and ``component`` (its file_sd target labels).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableOption, VariableRefresh

OUT = Path(__file__).resolve().parent / "grafana"
RULES = Path(__file__).resolve().parent / "alerts" / "gpu-node-health.rules.yml"
# the XID label matcher of the GpuFatalXid rule, the one line of the rules file generated here
XID_MATCHER = re.compile(r'xid!~"[0-9|]*"')
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
NODE = '$node'
GPU = f'Hostname=~"{NODE}"'  # dcgm-exporter's node label
HOST = f'instance=~"{NODE}"'  # node_exporter's (the prometheus role sets instance to the node name)
# the fabric's InfiniBand ports, not the Ethernet ports node_exporter also exports as node_infiniband_*
FABRIC = f'{HOST},fabric="infiniband"'
RUN = 'run=~"$run"'


def reasons(selector: str) -> str:
    """The clock event reasons under either name (DCGM 3: throttle reasons, DCGM 4: clocks event)."""
    sel = f"{{{selector}}}"
    return f"(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{sel} or DCGM_FI_DEV_CLOCKS_EVENT_REASONS{sel})"


def gpus(metric: str, *, rate: bool = False) -> str:
    """One series per GPU of the selected nodes: dcgm-exporter's HPC job mapping repeats a GPU's
    series once per Slurm job on it (label hpc_job), which a plain sum or count would add up."""
    series = f"{metric}{{{GPU}}}"
    inner = f"rate({series}[$__rate_interval])" if rate else series
    return f"max by (Hostname, gpu) ({inner})"


Builder = Any  # a panel builder of the SDK


def q(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> prometheus.Dataquery:
    out = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        out = out.legend_format(legend)
    return out.instant() if instant else out.range()


def _targets(panel: Builder, queries: list[prometheus.Dataquery]) -> Builder:
    for query in queries:
        panel = panel.with_target(query)
    return panel.datasource(DS)


def ts(title: str, desc: str, unit: str, *queries: prometheus.Dataquery, w: int = 12, h: int = 8) -> Builder:
    panel = timeseries.Panel().title(title).description(desc).unit(unit).span(w).height(h)
    return _targets(panel, list(queries))


def big(title: str, desc: str, *queries: prometheus.Dataquery, unit: str = "none", w: int = 6) -> Builder:
    return _targets(stat.Panel().title(title).description(desc).unit(unit).span(w).height(4), list(queries))


def tab(title: str, desc: str, *queries: prometheus.Dataquery, w: int = 12, h: int = 8) -> Builder:
    return _targets(table.Panel().title(title).description(desc).span(w).height(h), list(queries))


def _datasource_var() -> d.DatasourceVariable:
    return d.DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def _label_var(name: str, label: str, metric: str, key: str) -> d.QueryVariable:
    query = f"label_values({metric}, {key})"
    return (
        d.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": query, "refId": name})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text="All", value="$__all"))
    )


def _base(uid: str, title: str, desc: str, tags: list[str]) -> d.Dashboard:
    return (
        d.Dashboard(title)
        .uid(uid)
        .description(desc)
        .tags(["opsctl", *tags])
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("utc")
        .readonly()
        .with_variable(_datasource_var())
    )


def cluster() -> d.Dashboard:
    dash = _base(
        "opsctl-cluster",
        "opsctl / GPU cluster",
        "Nodes by Slurm state and opsctl verdict, and the GPU health series of every node.",
        ["gpu", "slurm"],
    ).with_variable(_label_var("node", "Node", "DCGM_FI_DEV_GPU_TEMP", "Hostname"))
    dash = dash.with_row(d.Row("Nodes"))
    for panel in (
        big(
            "Nodes by opsctl verdict",
            "Status of each node in the remediation service's last pass (opsctl_remediator_node_status).",
            q("count by (status) (opsctl_remediator_node_status == 1)", "{{status}}", instant=True),
        ),
        big(
            "Nodes by Slurm state",
            "Slurm's state of each node as the remediation service read it in its last pass.",
            q("count by (state) (opsctl_remediator_slurm_node_state == 1)", "{{state}}", instant=True),
        ),
        big(
            "GPUs reporting",
            "GPUs with a dcgm-exporter series; 8 per node when every GPU is on the bus.",
            q(f"count({gpus('DCGM_FI_DEV_GPU_TEMP')})", instant=True),
        ),
        big(
            "Exporter targets down",
            "dcgm-exporter and node_exporter targets Prometheus cannot scrape: health there is unknown.",
            q('sum by (job) (1 - up{job=~"dcgm-exporter|node"})', "{{job}}", instant=True),
        ),
    ):
        dash = dash.with_panel(panel)
    dash = dash.with_panel(
        tab(
            "Checks not OK",
            "Every check of every node whose last verdict is not OK (WARN, FAIL, UNKNOWN).",
            q('opsctl_remediator_check_status{status!="OK"} == 1', instant=True),
            w=24,
            h=6,
        )
    )
    dash = dash.with_row(d.Row("GPUs"))
    for panel in (
        ts("GPU utilisation", "Mean busy share of the node's GPUs.", "percent",
           q(f"avg by (Hostname) ({gpus('DCGM_FI_DEV_GPU_UTIL')})", "{{Hostname}}")),
        ts("GPU temperature", "Hottest GPU die and HBM of each node.", "celsius",
           q(f"max by (Hostname) (DCGM_FI_DEV_GPU_TEMP{{{GPU}}})", "{{Hostname}} die"),
           q(f"max by (Hostname) (DCGM_FI_DEV_MEMORY_TEMP{{{GPU}}})", "{{Hostname}} HBM", ref="B")),
        ts("GPU power", "Board power of each node's GPUs together.", "watt",
           q(f"sum by (Hostname) ({gpus('DCGM_FI_DEV_POWER_USAGE')})", "{{Hostname}}")),
        ts("Throttled GPUs", "GPUs whose clocks a thermal or power event slows (reasons 0x20 and up; "
           "0x1 idle and application clocks do not count).", "none",
           q(f"count by (Hostname) (max by (Hostname, gpu) ({reasons(GPU)}) >= 32)", "{{Hostname}}")),
    ):  # fmt: skip
        dash = dash.with_panel(panel)
    dash = dash.with_row(d.Row("Errors"))
    for panel in (
        tab("XIDs in the exporter's window", "Per GPU and XID: DCGM_EXP_XID_ERRORS_COUNT, the count within "
            "dcgm-exporter's --xid-count-window-size (5 min).",
            q(f'DCGM_EXP_XID_ERRORS_COUNT{{{GPU},xid!=""}} > 0', instant=True)),
        tab("Last XID per GPU", "DCGM_FI_DEV_XID_ERRORS: the last XID since the GPU's last reset; it "
            "stays until then.", q(f"DCGM_FI_DEV_XID_ERRORS{{{GPU}}} > 0", instant=True)),
        ts("Double-bit ECC errors", "Uncorrectable ECC errors since the driver loaded.", "none",
           q(f"sum by (Hostname) ({gpus('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL')})", "{{Hostname}} DBE"),
           q(f"sum by (Hostname) ({gpus('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL', rate=True)})",
             "{{Hostname}} SBE/s", ref="B")),
        ts("Row remapping", "Rows remapped after uncorrectable errors; pending: waiting for a GPU reset; "
           "failure: no spare row left.", "none",
           q(f"sum by (Hostname) ({gpus('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS')})",
             "{{Hostname}} remapped"),
           q(f"sum by (Hostname) ({gpus('DCGM_FI_DEV_ROW_REMAP_PENDING')})", "{{Hostname}} pending", ref="B"),
           q(f"sum by (Hostname) ({gpus('DCGM_FI_DEV_ROW_REMAP_FAILURE')})", "{{Hostname}} failed", ref="C")),
        ts("PCIe link", "Lowest PCIe generation and width of each node's GPUs (H200: Gen 5 x16).", "none",
           q(f"min by (Hostname) (DCGM_FI_DEV_PCIE_LINK_GEN{{{GPU}}})", "{{Hostname}} gen"),
           q(f"min by (Hostname) (DCGM_FI_DEV_PCIE_LINK_WIDTH{{{GPU}}})", "{{Hostname}} width", ref="B")),
        ts("NVLink CRC errors /s", "Flit and data CRC errors over all links.", "cps",
           q(f"sum by (Hostname) ({gpus('DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL', rate=True)}"
             f" + {gpus('DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL', rate=True)})",
             "{{Hostname}}")),
    ):  # fmt: skip
        dash = dash.with_panel(panel)
    return dash


def infiniband() -> d.Dashboard:
    dash = _base(
        "opsctl-infiniband",
        "opsctl / InfiniBand",
        "Ports, rates, traffic and errors of the compute fabric's HCAs (the inventory's ib_fabric_hcas,"
        " labelled fabric=\"infiniband\" by Prometheus), from node_exporter's infiniband collector.",
        ["infiniband"],
    ).with_variable(_label_var("node", "Node", "node_infiniband_state_id", "instance"))
    for panel in (
        big("Ports not ACTIVE", "Ports whose state is not 4 (ACTIVE): a dead cable, switch port or HCA.",
            q(f"count(node_infiniband_state_id{{{FABRIC}}} != 4) or vector(0)", instant=True)),
        big("Ports below NDR", "Ports that trained below 400 Gb/s.",
            q(f"count(node_infiniband_rate_bytes_per_second{{{FABRIC}}} < 5e10) or vector(0)", instant=True)),
        big("Ports", "Fabric ports node_exporter reports.",
            q(f"count(node_infiniband_state_id{{{FABRIC}}})", instant=True)),
        big("Link downs (1h)", "Times a link went down in the last hour, all ports.",
            q(f"sum(increase(node_infiniband_link_downed_total{{{FABRIC}}}[1h]))", instant=True)),
        tab("Ports not ACTIVE, by node", "Which ports: state 1 Down, 2 Init, 3 Armed.",
            q(f"node_infiniband_state_id{{{FABRIC}}} != 4", instant=True), w=24, h=6),
        ts("Transmit /s per node", "Data sent over all of a node's ports.", "Bps",
           q(f"sum by (instance) (rate(node_infiniband_port_data_transmitted_bytes_total{{{FABRIC}}}"
             "[$__rate_interval]))", "{{instance}}")),
        ts("Receive /s per node", "Data received over all of a node's ports.", "Bps",
           q(f"sum by (instance) (rate(node_infiniband_port_data_received_bytes_total{{{FABRIC}}}"
             "[$__rate_interval]))", "{{instance}}")),
        ts("Port rate", "Signalling rate each port trained at.", "bps",
           q(f"node_infiniband_rate_bytes_per_second{{{FABRIC}}} * 8", "{{instance}} {{device}}")),
        ts("Symbol and receive errors /s", "Physical-layer symbol errors and bad received packets.", "cps",
           q(f"sum by (instance, device) (rate(node_infiniband_symbol_error_total{{{FABRIC}}}"
             "[$__rate_interval]))",
             "{{instance}} {{device}} symbol"),
           q(f"sum by (instance, device) (rate(node_infiniband_port_errors_received_total{{{FABRIC}}}"
             "[$__rate_interval]))", "{{instance}} {{device}} rcv", ref="B")),
        ts("Transmit wait", "Share of time ports had data but no credit to send it: congestion.",
           "percentunit",
           q(f"sum by (instance) (rate(node_infiniband_port_transmit_wait_total{{{FABRIC}}}"
             "[$__rate_interval])) / 1e9", "{{instance}}")),
        ts("Link recoveries and downs", "Link error recoveries and downs per hour.", "none",
           q(f"sum by (instance, device) (increase(node_infiniband_link_error_recovery_total{{{FABRIC}}}"
             "[1h]))", "{{instance}} {{device}} recovered"),
           q(f"sum by (instance, device) (increase(node_infiniband_link_downed_total{{{FABRIC}}}[1h]))",
             "{{instance}} {{device}} down", ref="B")),
    ):  # fmt: skip
        dash = dash.with_panel(panel)
    return dash


STORAGE_FS = 'fstype=~"nfs4?|lustre|ext4|xfs"'


def storage() -> d.Dashboard:
    dash = _base(
        "opsctl-storage",
        "opsctl / Storage",
        "Shared and local file systems of every node (node_exporter's filesystem and nfs collectors).",
        ["storage"],
    ).with_variable(_label_var("node", "Node", "node_filesystem_size_bytes", "instance"))
    sel = f"{HOST},{STORAGE_FS}"
    for panel in (
        big("File systems over 90% full", "Mounts (shared and local) with less than 10% space left.",
            q(f"count(1 - node_filesystem_avail_bytes{{{sel}}} / node_filesystem_size_bytes{{{sel}}} > 0.9)"
              " or vector(0)", instant=True)),
        big("Read-only or failing mounts", "Mounts node_exporter finds read-only or cannot stat.",
            q(f"count(node_filesystem_readonly{{{sel}}} == 1 or node_filesystem_device_error{{{sel}}} == 1)"
              " or vector(0)", instant=True)),
        big("NFS retransmissions (1h)", "RPCs the NFS client had to send again: a slow or lost server.",
            q(f"sum(increase(node_nfs_rpc_retransmissions_total{{{HOST}}}[1h]))", instant=True)),
        big("Mounts", "File systems node_exporter reports on the selected nodes.",
            q(f"count(node_filesystem_size_bytes{{{sel}}})", instant=True)),
        tab("Space by mount", "Used share of each shared and local mount, fullest first.",
            q(f"max by (mountpoint, fstype) (1 - node_filesystem_avail_bytes{{{sel}}}"
              f" / node_filesystem_size_bytes{{{sel}}})", instant=True), w=12),
        ts("Space used", "Used share per mount and node.", "percentunit",
           q(f"1 - node_filesystem_avail_bytes{{{sel}}} / node_filesystem_size_bytes{{{sel}}}",
             "{{instance}} {{mountpoint}}")),
        ts("Inodes used", "Used share of inodes per mount and node.", "percentunit",
           q(f"1 - node_filesystem_files_free{{{sel}}} / node_filesystem_files{{{sel}}}",
             "{{instance}} {{mountpoint}}")),
        ts("NFS client RPCs /s", "Calls the node's NFS client sends.", "reqps",
           q(f"sum by (instance) (rate(node_nfs_rpcs_total{{{HOST}}}[$__rate_interval]))", "{{instance}}")),
    ):  # fmt: skip
        dash = dash.with_panel(panel)
    return dash


def rl_run() -> d.Dashboard:
    dash = _base(
        "opsctl-rl-run",
        "opsctl / RL run",
        "One RL training run: reward, throughput, step time, off-policy lag, weight updates and "
        "checkpoints, from the trainer's and orchestrator's /metrics (training/metrics.py).",
        ["training"],
    ).with_variable(_label_var("run", "Run", "opsctl_train_step_time", "run"))
    for panel in (
        ts("Reward", "Mean reward of each step's rollouts (the env's name ends the series name).", "none",
           q(f'{{__name__=~"opsctl_train_reward_mean_.+",{RUN}}}', "{{run}} {{__name__}}"), w=24),
        ts("Trainer tokens/s", "Tokens the trainer ranks processed per second of train step.", "none",
           q(f'opsctl_train_tokens_per_s{{component="trainer",{RUN}}}', "{{run}}")),
        ts("Rollouts/s", "Rollouts the orchestrator turned into batches per second.", "none",
           q(f'opsctl_train_rollouts_per_s{{component="orchestrator",{RUN}}}', "{{run}}")),
        ts("Step time", "Wall time of the last step, trainer and orchestrator; the trainer's wait for "
           "rollouts is part of its step.", "s",
           q(f"opsctl_train_step_time{{{RUN}}}", "{{run}} {{component}}"),
           q(f'opsctl_train_wait_time{{component="trainer",{RUN}}}', "{{run}} trainer wait", ref="B")),
        ts("Off-policy lag", "Policy versions between generating a rollout and training on it: the "
           "step's maximum and the 90th percentile over the dashboard interval.", "none",
           q(f'opsctl_train_off_policy_lag_max{{component="orchestrator",{RUN}}}', "{{run}} max"),
           q(f"histogram_quantile(0.9, sum by (run, le) (rate(opsctl_train_off_policy_lag_steps_bucket"
             f"{{{RUN}}}[$__rate_interval])))", "{{run}} p90", ref="B")),
        ts("Weight update time", "Trainer: time to publish new weights; orchestrator: time the inference "
           "servers paused to load them.", "s",
           q(f'opsctl_train_weight_publish_time{{component="trainer",{RUN}}}', "{{run}} publish"),
           q(f'opsctl_train_weight_update_time{{component="orchestrator",{RUN}}}', "{{run}} load", ref="B")),
        ts("Checkpoint age", "Time since each component's newest committed checkpoint.", "s",
           q(f"time() - opsctl_train_last_checkpoint_timestamp_seconds{{{RUN}}}", "{{run}} {{component}}")),
        ts("Loss and grad norm", "The trainer's loss and gradient norm.", "none",
           q(f'opsctl_train_loss{{component="trainer",{RUN}}}', "{{run}} loss"),
           q(f'opsctl_train_grad_norm{{component="trainer",{RUN}}}', "{{run}} grad norm", ref="B")),
        ts("Rollout shape", "Completions cut at max_tokens per step; for a verifiers environment (vf:) also "
           "the mean turns and sampled tokens per rollout, the fraction cut at max_tokens, rollouts an "
           "environment error ended, and reward functions that raised so far (verifiers scores those 0). "
           "The env's name ends the series name.", "none",
           q(f'{{__name__=~"opsctl_train_(truncated_completions|(turns_mean|sampled_tokens_mean|'
             f'truncated_fraction|env_errors|reward_fn_errors_total)_.+)",component="orchestrator",{RUN}}}',
             "{{run}} {{__name__}}")),
        ts("Held-out accuracy", "The last evaluation of each [eval] environment on its held-out split "
           "(before step 0, every eval.every steps, at the end), and pass@k for eval.pass_k; "
           "metrics.jsonl has each one's step and policy version.", "percentunit",
           q(f'opsctl_train_eval_accuracy{{component="orchestrator",{RUN}}}', "{{run}} {{env}}"),
           q(f'opsctl_train_eval_pass_at_k{{component="orchestrator",{RUN}}}', "{{run}} {{env}} pass@{{k}}",
             ref="B")),
    ):  # fmt: skip
        dash = dash.with_panel(panel)
    return dash


DASHBOARDS: dict[str, Callable[[], d.Dashboard]] = {
    "cluster.json": cluster,
    "infiniband.json": infiniband,
    "storage.json": storage,
    "rl-run.json": rl_run,
}


def render(builder: Callable[[], d.Dashboard]) -> str:
    model = builder().build()
    doc = json.loads(JSONEncoder(sort_keys=True).encode(model))
    for i, panel in enumerate(doc.get("panels", []), start=1):
        panel["id"] = i  # stable ids, unique per dashboard
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def not_fatal_xids() -> list[int]:
    """The XIDs the shipped configuration does not drain for (classes ignore and restart_app: the
    catalogue's, with thresholds.toml's overrides). Every other XID, one missing from the catalogue
    included ([xid] default_class), takes a node out: the rule fires unless the XID is listed."""
    from opsctl.checks import load_thresholds
    from opsctl.checks.xid_catalogue import catalogue

    th = load_thresholds()
    return [x for x in sorted(catalogue().entries) if th.xid_class(x) in ("ignore", "restart_app")]


def render_rules(text: str) -> str:
    """The rules file with the GpuFatalXid matcher made from the catalogue."""
    matcher = 'xid!~"' + "|".join(str(x) for x in not_fatal_xids()) + '"'
    if len(XID_MATCHER.findall(text)) != 1:
        raise ValueError(f"{RULES.name}: want exactly one {XID_MATCHER.pattern} matcher")
    return XID_MATCHER.sub(matcher, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    ap.add_argument("--out", type=Path, default=OUT, help=f"directory (default {OUT})")
    ap.add_argument(
        "--rules",
        type=Path,
        help=f"the alert rules file (default {RULES}, unless --out names another directory)",
    )
    args = ap.parse_args(argv)
    rules = args.rules or (RULES if args.out == OUT else None)
    stale = []
    if rules is not None:
        text = render_rules(rules.read_text())
        if args.check and rules.read_text() != text:
            stale.append(rules.name)
        elif not args.check:
            rules.write_text(text)
    for name, builder in DASHBOARDS.items():
        text = render(builder)
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"files differ from the generator: {', '.join(stale)} (run python dashboards/generate.py)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
