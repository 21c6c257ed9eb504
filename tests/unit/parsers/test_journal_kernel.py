from __future__ import annotations

from opsctl.parsers.dmesg_xid import parse_dmesg_xids
from opsctl.parsers.journal_kernel import parse_journal_kernel, valid_cursor

CURSOR = (
    "s=6c94beb3369b4e30aeb6f4cea512c4dd;i=155;b=600f763a05394fedbee8d87e2786e381;"
    "m=1ea07e561;t=661bb12db9e5a;x=5aaf53251f84f498"
)


def test_genuine_kernel_lines_and_cursor_trailer(real):
    chunk = parse_journal_kernel(real("journalctl-k-short-monotonic-show-cursor.systemd252.txt"))
    assert chunk.cursor == CURSOR and chunk.entries == 6
    assert chunk.text.splitlines()[0].startswith("[    0.477210] vm kernel: ")
    assert "-- cursor" not in chunk.text


def test_genuine_nothing_new_after_the_cursor(real):
    chunk = parse_journal_kernel(real("journalctl-k-after-last-cursor.systemd252.txt"))
    assert (chunk.entries, chunk.text, chunk.cursor) == (0, "", CURSOR)


def test_journal_lines_read_like_dmesg_lines(real):
    # The genuine imbue lines in the journal's short-monotonic shape: stamp, host, "kernel:".
    lines = real("dmesg.xid_sxid_pcie_lines.imbue.txt").splitlines()
    shaped = [ln.replace("] ", "] gpu-001 kernel: ", 1) for ln in lines]
    journal = "\n".join(shaped) + f"\n-- cursor: {CURSOR}\n"
    log = parse_dmesg_xids(parse_journal_kernel(journal).text)
    assert [(x.code, x.uptime_seconds) for x in log.xids] == [(94, 2397166.983093), (64, 2397166.923949)]
    assert [(s.code, s.fatal) for s in log.sxids] == [(12028, False)]


def test_cursor_shape_is_checked_before_it_goes_near_a_shell():
    assert valid_cursor(CURSOR)
    for bad in ("", "s=1;i=2'; rm -rf /", "s=1 i=2", "S=ABC", "x" * 600):
        assert not valid_cursor(bad)
    chunk = parse_journal_kernel("[    1.0] h kernel: x\n-- cursor: s=1;i=$(reboot)\n")
    assert chunk.cursor == "" and chunk.entries == 1
