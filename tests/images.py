"""Test images made here (no files shipped): random-noise PNGs of a given size."""

import io

import torch


def noise_png(w: int, h: int, seed: int) -> bytes:
    """A ``w`` x ``h`` PNG of seeded uniform noise (a screenshot stand-in for model inputs)."""
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    buf = io.BytesIO()
    Image.fromarray((torch.rand((h, w, 3), generator=g) * 255).to(torch.uint8).numpy()).save(buf, format="PNG")
    return buf.getvalue()
