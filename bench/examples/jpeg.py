"""A realistic input pipeline to measure: JPEG images decoded per sample, as an image classifier's
loader does, and a training step that consumes them. `xferbench suite=pipeline
pipeline.dataset=bench.examples.jpeg:dataset pipeline.step=bench.examples.jpeg:step`.

The images are made once, when the factory is called (in the main process, before the loader's
workers fork and share them): IMAGES photographs' worth of smooth colour fields with fine noise,
SIDE x SIDE pixels, encoded at QUALITY, so decoding costs what a camera image of that size costs.
Sample i is (image i mod IMAGES decoded into a uint8 tensor of 3 x SIDE x SIDE, its label).

The step is a small convolutional classifier's forward, backward and SGD update on one batch, with
no synchronization (as a training loop that logs its loss every N steps): cheap beside decoding on
a GPU, where the loop waits for data, and costly on a CPU, where it need not."""
from __future__ import annotations

import io

from typing import Callable

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

IMAGES = 256
SIDE = 224
QUALITY = 90
CLASSES = 10


def _image(i: int, rng: np.random.Generator) -> bytes:
    """One JPEG: a colour gradient whose direction and hue depend on i, with noise (a flat
    image would decode far faster than a photograph)."""
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32) / SIDE
    angle = 2 * np.pi * i / IMAGES
    field = np.cos(angle) * x + np.sin(angle) * y
    rgb = np.stack([field, np.roll(field, i % SIDE, axis=0), 1 - field], axis=-1) * 200
    rgb += rng.normal(0, 18, rgb.shape)
    out = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB").save(out, format="JPEG", quality=QUALITY)
    return out.getvalue()


class JpegImages(Dataset):
    """Encoded JPEGs in memory; each __getitem__ decodes one (Pillow) into a CHW uint8 tensor."""

    def __init__(self, images: int = IMAGES, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.encoded = [_image(i, rng) for i in range(images)]

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        with Image.open(io.BytesIO(self.encoded[i])) as image:
            pixels = np.array(image.convert("RGB"))
        return torch.from_numpy(pixels).permute(2, 0, 1).contiguous(), i % CLASSES


def dataset() -> JpegImages:
    """The factory pipeline.dataset names."""
    return JpegImages()


def classifier() -> nn.Module:
    """Images at an eighth of their side, two convolutions, pooled into CLASSES logits."""
    return nn.Sequential(nn.AvgPool2d(8), nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES))


def step(device: torch.device) -> Callable[[tuple[torch.Tensor, torch.Tensor]], None]:
    """The factory pipeline.step names: the classifier on `device`, and its training step on a
    batch of (images, labels) the loop has moved there."""
    model = classifier().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        images, labels = batch
        loss = nn.functional.cross_entropy(model(images.float().div_(255)), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return train
