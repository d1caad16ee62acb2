"""A realistic input pipeline to measure: JPEG images decoded per sample, as an image classifier's
loader does. `xferbench suite=pipeline pipeline.dataset=bench.examples.jpeg:dataset`.

The images are made once, when the factory is called (in the main process, before the loader's
workers fork and share them): IMAGES photographs' worth of smooth colour fields with fine noise,
SIDE x SIDE pixels, encoded at QUALITY, so decoding costs what a camera image of that size costs.
Sample i is (image i mod IMAGES decoded into a uint8 tensor of 3 x SIDE x SIDE, its label)."""
from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image
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
