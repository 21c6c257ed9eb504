from __future__ import annotations

from opsctl.parsers.perfquery import parse_perfquery


def test_extended_two_ports(real):
    blocks = parse_perfquery(real("perfquery-x.2ports.infiniband_exporter.txt"))
    assert [(b.kind, b.lid, b.port) for b in blocks] == [
        ("Port extended", 1719, "1"),
        ("Port extended", 1719, "2"),
    ]
    assert blocks[0].counters["PortXmitData"] == 36298026860928
    assert blocks[0].counters["PortXmitWait"] == 22730501
    assert blocks[0].counters["SymbolErrorCounter"] == 0
    assert blocks[1].counters["PortRcvData"] == 39078804993378
    assert blocks[0].fields["CounterSelect"] == "0x0000"
    assert "PortSelect" not in blocks[0].counters


def test_rcv_error_details(real):
    (block,) = parse_perfquery(real("perfquery-E.rcv_error_details.infiniband_exporter.txt"))
    assert block.kind == "PortRcvErrorDetails"
    assert set(block.counters) == {
        "PortLocalPhysicalErrors",
        "PortMalformedPktErrors",
        "PortBufferOverrunErrors",
        "PortDLIDMappingErrors",
        "PortVLMappingErrors",
        "PortLoopingErrors",
    }
