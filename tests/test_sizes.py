import pytest

from bench import ConfigError
from bench.sizes import format_size, parse_size, sweep


@pytest.mark.parametrize("text, value", [
    ("4KiB", 4096), ("1GiB", 1 << 30), ("1.5KiB", 1536), ("8", 8), (512, 512), ("2MB", 2_000_000),
    ("16 mib", 16 << 20),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "4XB", "-1", "0", "1.3B", True])
def test_parse_size_rejects_with_key(text):
    with pytest.raises(ConfigError, match="sizes.max"):
        parse_size(text, "sizes.max")


def test_format_size_round_trips():
    for n in (8, 1000, 4096, 3 << 20, 1 << 30, 12345):
        assert parse_size(format_size(n)) == n
    assert format_size(4096) == "4KiB" and format_size(1536) == "1536B"


def test_sweep_doubles_and_keeps_max():
    assert sweep("4KiB", "32KiB") == [4096, 8192, 16384, 32768]
    assert sweep("4KiB", "20KiB") == [4096, 8192, 16384, 20480]
    assert sweep(8, 8) == [8]
    assert sweep(1, 64, 4) == [1, 4, 16, 64]


def test_sweep_rejects_inverted_range_and_bad_factor():
    with pytest.raises(ConfigError, match="larger than sizes.max"):
        sweep("1MiB", "4KiB")
    with pytest.raises(ConfigError, match="factor"):
        sweep(1, 64, 1)
