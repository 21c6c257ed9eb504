import configparser

from opsctl.lab.config import LabConfig
from opsctl.lab.netconf import NETWORK_FILE, render_hosts, render_network, render_nvidia_tmpfiles


def test_network_file_sorts_before_the_nspawn_default_and_has_no_route_out() -> None:
    cfg = LabConfig(gpu_nodes=2)
    text = render_network(cfg, cfg.machine("gpu-002"))
    parser = configparser.ConfigParser()
    parser.read_string(text)
    assert parser["Match"]["Name"] == "host0"
    assert parser["Network"]["Address"] == "10.213.0.12/24"
    assert "Gateway" not in parser["Network"] and "DNS" not in parser["Network"]
    assert NETWORK_FILE.rsplit("/", 1)[1] < "80-container-host0.network"


def test_hosts_file_lists_every_machine_once() -> None:
    cfg = LabConfig(gpu_nodes=3)
    entries = [line.split() for line in render_hosts(cfg).splitlines() if line and not line.startswith("#")]
    names = {e[1]: e[0] for e in entries if e[0].startswith("10.")}
    assert names == {
        "head-01": "10.213.0.10",
        "gpu-001": "10.213.0.11",
        "gpu-002": "10.213.0.12",
        "gpu-003": "10.213.0.13",
    }


def test_tmpfiles_creates_eight_gpu_device_placeholders() -> None:
    lines = [ln for ln in render_nvidia_tmpfiles().splitlines() if ln.startswith("f ")]
    paths = [ln.split()[1] for ln in lines]
    assert [f"/dev/nvidia{i}" for i in range(8)] == [p for p in paths if p[-1].isdigit()]
    assert "/dev/nvidiactl" in paths
