"""Datasets of a user's own, for pipeline.dataset= in the tests (tests/ is on sys.path)."""
import torch
from torch.utils.data import Dataset, IterableDataset

NOT_CALLABLE = 3


class Small(Dataset):
    """Sample i: 256 bytes of i % 251 and its label."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        return torch.full((256,), i % 251, dtype=torch.uint8), i


class Varying(Small):
    """Sample 9 is one byte short: its batch cannot be collated like the others."""

    def __getitem__(self, i: int):
        data, label = super().__getitem__(i)
        return (data[:-1] if i == 9 else data), label


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(3))


def small():
    return Small()


def varying():
    return Varying()


def stream():
    return Stream()


def not_a_dataset():
    return [1, 2, 3]


def pairs(samples):
    """A collate_fn of the user's own: the data stacked, the labels as a list."""
    return torch.stack([s[0] for s in samples]), [s[1] for s in samples]


def raising_step(device):
    raise ValueError("no model here")


def not_a_step(device):
    return 3
