from __future__ import annotations

from opsctl.parsers.lfs_check import parse_lfs_check_servers

# No genuine `lfs check servers` sample was found to vendor; these lines are test inputs in the
# shape the Lustre client prints (one "<target> active." line per server, errors otherwise).


def test_all_active():
    r = parse_lfs_check_servers(
        "lustre-MDT0000-mdc-ffff8b0e4f0d6800 active.\nlustre-OST0000-osc-ffff8b0e4f0d6800 active.\n"
    )
    assert r.healthy and r.active == [
        "lustre-MDT0000-mdc-ffff8b0e4f0d6800",
        "lustre-OST0000-osc-ffff8b0e4f0d6800",
    ]


def test_one_server_down():
    text = (
        "lustre-MDT0000-mdc-ffff8b0e4f0d6800 active.\n"
        "error: check 'lustre-OST0001-osc-ffff8b0e4f0d6800': Resource temporarily unavailable (11)\n"
    )
    r = parse_lfs_check_servers(text)
    assert not r.healthy and list(r.failed) == ["lustre-OST0001-osc-ffff8b0e4f0d6800"]


def test_no_output_is_not_healthy():
    assert not parse_lfs_check_servers("").healthy
