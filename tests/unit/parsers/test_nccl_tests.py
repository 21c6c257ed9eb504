"""nccl-tests reports: genuine outputs of 2.16 and 2.17.8 (tests/fixtures/real-world/SOURCES.md)."""

from __future__ import annotations

from opsctl.parsers.nccl_tests import parse_nccl_tests


def test_single_node_all_reduce_2_17(real):
    (r,) = parse_nccl_tests(real("nccl-tests.all_reduce_perf.h100x8.2.17.8.nccl-tests-cluster.txt"))
    assert (r.collective, r.version, r.n_threads, r.n_gpus) == ("all_reduce_perf", "2.17.8", 1, 1)
    assert (r.min_bytes, r.max_bytes) == (33554432, 68719476736)
    assert len(r.ranks) == 8 and r.hosts == ["cnode3-002"]
    assert r.ranks[7].name == "NVIDIA H100 80GB HBM3" and r.ranks[7].bus == "0000:df:00"
    assert r.rows[0].size_bytes == 33554432 and len(r.rows) == 10
    last = r.rows[-1]
    assert (last.size_bytes, last.busbw_gbs, last.in_busbw_gbs, last.wrong) == (
        17179869184,
        482.27,
        482.12,
        0,
    )
    assert r.busbw_at_largest() == 482.27 and r.avg_busbw_gbs == 437.957
    assert r.out_of_bounds == 0 and r.complete and not r.failures and r.wrong_total() == 0


def test_multi_node_all_reduce(real):
    (r,) = parse_nccl_tests(real("nccl-tests.all_reduce_perf.h100x8x10nodes.2.17.8.nccl-tests-cluster.txt"))
    assert len(r.ranks) == 80 and len(r.hosts) == 10
    assert r.busbw_at_largest() == 320.54 and r.avg_busbw_gbs == 265.631


def test_pre_2_17_layout_without_version_line(real):
    (r,) = parse_nccl_tests(real("nccl-tests.all_reduce_perf.a100x8.gcm.txt"))
    assert (r.version, r.collective, r.n_gpus) == ("", "", 1)
    assert len(r.ranks) == 8 and r.ranks[0].host == "{hostname}" and r.ranks[0].bus == "0x00"
    assert r.busbw_at_largest() == 231.72 and r.avg_busbw_gbs == 210.99


def test_a_sweep_of_collectives_is_split_and_na_is_kept(real):
    reports = parse_nccl_tests(real("nccl-tests.5-collectives.h100x8.2.17.8.nccl-tests-cluster.log"))
    assert [r.collective for r in reports] == [
        "all_reduce_perf",
        "all_gather_perf",
        "reduce_scatter_perf",
        "alltoall_perf",
        "sendrecv_perf",
    ]
    alltoall = reports[3]
    assert alltoall.rows[0].wrong == 0 and alltoall.rows[0].in_wrong is None  # "N/A"
    assert all(r.complete for r in reports)


def test_a_cuda_failure_is_incomplete_with_its_line():
    text = (
        "gpu-001: Test CUDA failure common.cu:1014 'system not yet initialized'\n"
        " .. gpu-001 pid 4242: Test failure common.cu:1128\n"
    )
    (r,) = parse_nccl_tests(text)
    assert not r.complete and r.busbw_at_largest() is None
    assert r.failures[0].endswith("'system not yet initialized'") and len(r.failures) == 2


def test_nothing_recognisable():
    assert parse_nccl_tests("") == [] and parse_nccl_tests("hello\n") == []
