"""bench.pairs: the default P2P pairs per size, on link matrices of real topologies' shapes."""
from bench.pairs import UNKNOWN, all_pairs, class_pairs, class_representatives, link_class, pairs_at_size
from bench.driver.inventory import link_matrix


# `nvidia-smi topo -m` of a PCIe box with two sockets: pairs behind one switch (PIX), across
# switches of one socket (NODE) and across sockets (SYS), and one NVLink bridge (NV4).
TOPO_4 = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV4\tNODE\tSYS\t0-15\t0
GPU1\tNV4\t X \tNODE\tSYS\t0-15\t0
GPU2\tNODE\tNODE\t X \tSYS\t0-15\t0
GPU3\tSYS\tSYS\tSYS\t X \t16-31\t1
"""


def test_link_matrix_of_the_fixture_names_every_pair():
    links = link_matrix(TOPO_4)
    assert len(links) == 12 and links["0,1"] == "NV4" and links["2,3"] == "SYS" and links["1,2"] == "NODE"


def test_one_pair_per_link_class_the_first_in_order():
    reps = class_representatives(4, link_matrix(TOPO_4))
    assert reps == {"NV4": (0, 1), "NODE": (0, 2), "SYS": (0, 3)}
    assert class_pairs(4, link_matrix(TOPO_4)) == [(0, 1), (0, 2), (0, 3)]


def test_every_pair_at_the_matrix_sizes_one_per_class_elsewhere():
    links, matrix = link_matrix(TOPO_4), (4096, 256 << 20)
    assert pairs_at_size(4096, matrix, 4, links) == all_pairs(4)
    assert pairs_at_size(256 << 20, matrix, 4, links) == all_pairs(4)
    assert pairs_at_size(65536, matrix, 4, links) == [(0, 1), (0, 2), (0, 3)]
    assert pairs_at_size(1 << 30, matrix, 4, links) == [(0, 1), (0, 2), (0, 3)]


def test_nvswitch_box_sweeps_one_pair_whatever_its_size():
    n = 8
    links = {f"{i},{j}": "NV18" for i in range(n) for j in range(n) if i != j}
    assert pairs_at_size(1 << 20, (4096,), n, links) == [(0, 1)]
    assert len(pairs_at_size(4096, (4096,), n, links)) == 56


def test_without_a_link_matrix_all_pairs_are_one_class():
    assert link_class({}, 0, 1) == UNKNOWN
    assert pairs_at_size(65536, (4096,), 4, {}) == [(0, 1)]


def test_a_matrix_naming_one_direction_serves_both():
    assert link_class({"0,1": "PIX"}, 1, 0) == "PIX"
