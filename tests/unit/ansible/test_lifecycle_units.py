"""Pieces of the node lifecycle and of the secrets handling, each on real inputs: the dcgm_diag
module run by the real Ansible against the hwsim dcgmi (healthy, then with an uncorrectable ECC
error), the munge key adoption filter on what slurp returns, and the slurmdbd password reader."""

from __future__ import annotations

import base64
import json
import os
import secrets
import sys
from pathlib import Path

from provisioning_helpers import load_filter_plugin, run_ansible

from opsctl.hwsim import state as hwstate
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.tools import install_shims


def _dcgm_diag(tmp_path: Path, state_file: Path) -> tuple[int, dict[str, object]]:
    bindir = tmp_path / "bin"
    install_shims(bindir, tmp_path / "lib", python=sys.executable, names=("dcgmi",))
    os.environ["HWSIM_STATE"] = str(state_file)
    try:
        proc = run_ansible(
            "ansible",
            [
                "localhost",
                "-m",
                "dcgm_diag",
                "-a",
                json.dumps({"level": 1, "dcgmi": str(bindir / "dcgmi")}),
                "-e",
                f"ansible_python_interpreter={sys.executable}",
                "-o",
            ],
            tmp_path,
            check=False,
        )
    finally:
        del os.environ["HWSIM_STATE"]
    result = json.loads(proc.stdout.split("=>", 1)[1])
    return proc.returncode, result


def test_dcgm_diag_passes_a_healthy_node_and_names_the_failed_test(tmp_path: Path) -> None:
    node = hwstate.ensure_node(tmp_path / "hw", "gpu-001")
    path = hwstate.state_path(tmp_path / "hw", "gpu-001")
    rc, result = _dcgm_diag(tmp_path, path)
    assert rc == 0 and result["failed_tests"] == [], result
    hwstate.save(apply_fault(node, "ecc_dbe,gpu=3"), path)
    rc, result = _dcgm_diag(tmp_path, path)
    assert rc != 0
    assert str(result["msg"]).startswith("dcgmi diag -r 1 failed: software (GPU 3)")


def test_dcgm_diag_fails_when_the_diagnostic_could_not_run(tmp_path: Path) -> None:
    node = hwstate.ensure_node(tmp_path / "hw", "gpu-001")
    path = hwstate.state_path(tmp_path / "hw", "gpu-001")
    hwstate.save(apply_fault(node, "diag_killed"), path)
    rc, result = _dcgm_diag(tmp_path, path)
    assert rc != 0 and result["rc"] == 203, result
    assert str(result["msg"]) == (
        "dcgmi diag -r 1 could not run: Error: Unable to complete diagnostic. "
        "Return: (-53) : The DCGM diagnostic was killed by a signal"
    )


def test_dcgm_diag_fails_without_a_diagnostic_document(tmp_path: Path) -> None:
    rc, result = _dcgm_diag(tmp_path, tmp_path / "no-such-state.json")
    assert rc != 0
    assert "no diagnostic document" in str(result["msg"]) and "no simulated hardware state" in str(
        result["msg"]
    )


def _slurped(data: bytes) -> dict[str, str]:
    return {"content": base64.b64encode(data).decode(), "encoding": "base64"}


def test_a_text_key_or_a_binary_key_hosts_share_is_adopted() -> None:
    plugin = load_filter_plugin("munge", "munge_keys")
    keys = plugin.munge_cluster_keys
    ours = secrets.token_hex(64)
    text = {"form": "text", "key": ours}
    assert keys([_slurped(ours.encode()), _slurped(ours.encode()), {"failed": True, "msg": "not found"}]) == [
        text
    ]
    # Debian's package creates a random binary key on each host: never shared, never adopted
    package_default = secrets.token_bytes(1024)
    assert keys([_slurped(package_default), _slurped(secrets.token_bytes(1024))]) == []
    assert keys([_slurped(package_default)]) == []  # one host alone cannot tell
    # SchedMD's form (mungekey, or 1024 bytes of /dev/urandom) that the hosts share
    site = secrets.token_bytes(1024)
    shared = {"form": "binary", "b64": base64.b64encode(site).decode()}
    assert keys([_slurped(site), _slurped(package_default), _slurped(site)]) == [shared]
    assert keys([_slurped(b"short")]) == []
    other = secrets.token_hex(64)
    assert keys([_slurped(ours.encode()), _slurped(other.encode())]) == [text, {"form": "text", "key": other}]
    assert keys([_slurped(site), _slurped(site), _slurped(ours.encode())]) == [shared, text]  # refused: two
    form = plugin.munge_key_form
    assert [form(_slurped(ours.encode() + b"\n")), form(_slurped(site)), form({"failed": True})] == [
        "text", "binary", "text",
    ]  # fmt: skip
    assert form(_slurped(secrets.token_bytes(16))) == "short"


def test_the_running_database_password_is_read_from_slurmdbd_conf() -> None:
    plugin = load_filter_plugin("slurm", "slurm_conf")
    conf = b"# Ansible managed\nAuthType=auth/munge\nStorageUser=slurm\nStoragePass=Zx81kQ\n"
    assert plugin.slurmdbd_storage_pass(_slurped(conf)) == "Zx81kQ"
    assert plugin.slurmdbd_storage_pass(_slurped(b"AuthType=auth/munge\n")) == ""
    assert plugin.slurmdbd_storage_pass({"failed": True}) == ""
    assert plugin.mysql_quote("it's\\") == "it\\'s\\\\"
