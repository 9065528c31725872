#!/usr/bin/python3
"""Fixtures for tests/test_image.c, written by PIL (python3-pil) and torchvision
(python3-torchvision 0.14), so kiln's decoders and transforms are checked
against the libraries PyTorch users train with. Writes tests/ref/fixtures/images/:

  gray.png, rgb.png, rgba.png, gray.jpg, rgb.jpg    images PIL wrote (small, seeded patterns)
  *.u8                                              raw pixels (HWC, uint8) PIL decodes or torchvision makes
  manifest.txt                                      one case a line (below)

Lines of manifest.txt:
  decode FILE CHANNELS MIN_SCALE W H RAW TOL     PIL's decode (convert('L'|'RGB'); MIN_SCALE < 1: PIL's
                                                 draft(), the JPEG DCT scaling) within TOL levels
  resize FILE CHANNELS RESIZE CROP W H RAW       torchvision Resize(RESIZE) [then CenterCrop(CROP)] on PIL
  rrc W H SCALE_LO SCALE_HI TOP LEFT HEIGHT WIDTH N DRAW...
                                                 RandomResizedCrop.get_params's box and the N random
                                                 values it drew (area fractions, log ratios, offsets)
  crop FILE CHANNELS TOP LEFT HEIGHT WIDTH SIZE RAW
                                                 F.resized_crop(img, TOP, LEFT, HEIGHT, WIDTH, SIZE)

Regenerate (CI uses the committed files):  /usr/bin/python3 tests/ref/make_image_fixtures.py
"""
import math
import os

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "images")
lines = []


def pattern(h, w, c, seed):
    """smooth gradients plus noise: every value differs, nothing is all zero"""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    chans = [(40 + 180 * (x / w) * (0.5 + 0.5 * np.sin(y / 3.0 + k)) + rng.integers(0, 30, (h, w))) for k in range(c)]
    a = np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8)
    return a[:, :, 0] if c == 1 else a


def raw(name, img):
    a = np.asarray(img, dtype=np.uint8)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(a.tobytes())
    return a


def decode_case(fname, channels, tol, scale=1.0):
    img = Image.open(os.path.join(OUT, fname))
    if scale < 1:
        img.draft("RGB" if channels == 3 else "L", (math.ceil(img.width * scale), math.ceil(img.height * scale)))
    img = img.convert("L" if channels == 1 else "RGB")
    stem = fname.replace(".", "_")
    out = f"dec_{stem}_c{channels}{'_draft' if scale < 1 else ''}.u8"
    raw(out, img)
    lines.append(f"decode {fname} {channels} {scale} {img.width} {img.height} {out} {tol}")


def resize_case(fname, channels, size, crop):
    img = Image.open(os.path.join(OUT, fname)).convert("L" if channels == 1 else "RGB")
    tf = [T.Resize(size)] + ([T.CenterCrop(crop)] if crop else [])
    out_img = T.Compose(tf)(img)
    out = f"resize_{fname.split('.')[0]}_c{channels}_{size}_{crop}.u8"
    raw(out, out_img)
    lines.append(f"resize {fname} {channels} {size} {crop} {out_img.width} {out_img.height} {out}")


def rrc_case(w, h, scale, seed):
    """get_params's box, and the same draws replayed in get_params's order"""
    ratio = (3.0 / 4.0, 4.0 / 3.0)
    img = Image.new("L", (w, h))
    torch.manual_seed(seed)
    top, left, ch, cw = T.RandomResizedCrop.get_params(img, list(scale), list(ratio))
    torch.manual_seed(seed)
    log_ratio = torch.log(torch.tensor(ratio))
    draws, box = [], None
    for _ in range(10):
        s = torch.empty(1).uniform_(scale[0], scale[1]).item()
        lr = torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item()
        draws += [s, lr]
        aspect = torch.exp(torch.tensor(lr, dtype=torch.float32)).item()
        bw, bh = int(round(math.sqrt(w * h * s * aspect))), int(round(math.sqrt(w * h * s / aspect)))
        if 0 < bw <= w and 0 < bh <= h:
            i = torch.randint(0, h - bh + 1, size=(1,)).item()
            j = torch.randint(0, w - bw + 1, size=(1,)).item()
            draws += [i, j]
            box = (i, j, bh, bw)
            break
    if box is not None:  # the replay must be get_params itself
        assert box == (top, left, ch, cw), (box, (top, left, ch, cw))
    lines.append(f"rrc {w} {h} {scale[0]!r} {scale[1]!r} {top} {left} {ch} {cw} {len(draws)} " +
                 " ".join(repr(float(d)) for d in draws))


def crop_case(fname, channels, box, size):
    img = Image.open(os.path.join(OUT, fname)).convert("L" if channels == 1 else "RGB")
    out_img = F.resized_crop(img, *box, [size, size], T.InterpolationMode.BILINEAR)
    out = f"crop_{fname.split('.')[0]}_c{channels}_{'_'.join(map(str, box))}_{size}.u8"
    raw(out, out_img)
    lines.append(f"crop {fname} {channels} {' '.join(map(str, box))} {size} {out}")


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    Image.fromarray(pattern(31, 29, 1, 1), "L").save(os.path.join(OUT, "gray.png"))
    Image.fromarray(pattern(23, 37, 3, 2), "RGB").save(os.path.join(OUT, "rgb.png"))
    rgba = np.dstack([pattern(23, 37, 3, 3), pattern(23, 37, 1, 4)])
    Image.fromarray(rgba, "RGBA").save(os.path.join(OUT, "rgba.png"))
    Image.fromarray(pattern(31, 29, 1, 5), "L").save(os.path.join(OUT, "gray.jpg"), quality=90)
    Image.fromarray(pattern(48, 64, 3, 6), "RGB").save(os.path.join(OUT, "rgb.jpg"), quality=90)
    for f in ("gray.png", "rgb.png", "rgba.png"):
        for c in (1, 3):
            decode_case(f, c, 0)
    # JPEG: both libjpeg-turbo, but kiln takes grey from the file's luma, PIL from its RGB
    for c in (1, 3):
        decode_case("gray.jpg", c, 1)
        decode_case("rgb.jpg", c, 3)
    decode_case("rgb.jpg", 3, 1, 0.5)   # DCT scaling 1/2
    decode_case("rgb.jpg", 1, 3, 0.25)  # 1/4
    for f, c in (("rgb.png", 3), ("rgb.png", 1), ("gray.png", 1)):
        resize_case(f, c, 11, 0)    # shrink (antialiased)
        resize_case(f, c, 53, 0)    # enlarge
        resize_case(f, c, 16, 14)   # resize, then center crop
    resize_case("rgb.png", 3, 23, 20)   # crop only: the shorter side is 23 already
    for seed, (w, h, scale) in enumerate([(37, 23, (0.08, 1.0)), (64, 48, (0.08, 1.0)), (500, 375, (0.08, 1.0)),
                                          (224, 224, (0.5, 1.0)), (33, 97, (0.08, 1.0)), (1000, 20, (0.9, 1.0)),
                                          (20, 1000, (0.9, 1.0)), (30, 30, (1.0, 1.0))]):
        for k in range(3):
            rrc_case(w, h, scale, 100 * seed + k)
    crop_case("rgb.png", 3, (2, 5, 17, 21), 12)
    crop_case("rgb.png", 1, (0, 0, 23, 37), 28)
    crop_case("gray.png", 1, (3, 1, 20, 11), 9)
    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} cases to {OUT}")


if __name__ == "__main__":
    main()
