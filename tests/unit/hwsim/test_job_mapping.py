"""The emulated dcgm-exporter's HPC job mapping, as dcgm-exporter's hpcMapper applies it
(pkg/dcgmexporter/hpc.go, 3.3.9-3.6.1): one file per GPU index holding a job id per line; a GPU's
field series come once per job labelled hpc_job; the XID collector is not mapped."""

from __future__ import annotations

from pathlib import Path

from opsctl.hwsim.metrics import dcgm_families, load_collectors, read_job_mapping
from opsctl.hwsim.state import make_node

SHIPPED = Path(__file__).resolve().parents[2] / "golden" / "production" / "dcgm-counters.csv"


def test_jobs_copy_a_gpus_series_and_an_empty_file_drops_them(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("101\n102\n")
    (tmp_path / "3").write_text("")
    (tmp_path / "notes").write_text("7\n")  # not a GPU index: ignored
    (tmp_path / "5").mkdir()  # a directory: ignored
    jobs = read_job_mapping(tmp_path)
    assert jobs == {0: ["101", "102"], 3: []}
    assert read_job_mapping(tmp_path / "absent") == {}
    fams = {f.name: f for f in dcgm_families(make_node("gpu-001"), load_collectors(SHIPPED), jobs=jobs)}
    temp = [(s.labels["gpu"], s.labels.get("hpc_job")) for s in fams["DCGM_FI_DEV_GPU_TEMP"].samples]
    assert temp == [
        ("0", "101"),
        ("0", "102"),
        ("1", None),
        ("2", None),
        ("4", None),
        ("5", None),
        ("6", None),
        ("7", None),
    ]
    xid = {s.labels["gpu"] for s in fams["DCGM_EXP_XID_ERRORS_COUNT"].samples}
    assert xid == {str(g) for g in range(8)} and all(
        "hpc_job" not in s.labels for s in fams["DCGM_EXP_XID_ERRORS_COUNT"].samples
    )
