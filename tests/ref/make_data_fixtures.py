#!/usr/bin/python3
"""Fixtures for tests/test_formats.c: CIFAR-10's binary batches and an llm.c
token file, written with numpy from seeded random arrays, and what torchvision
makes of the same arrays. Writes tests/ref/fixtures/formats/:

  cifar/data_batch_{1..5}.bin, cifar/test_batch.bin, cifar/batches.meta.txt
        CIFAR-10's binary layout: per record a label byte, then 1024 R, 1024 G,
        1024 B bytes (32x32, row-major); 2, 1, 2, 1, 1 training records and 3
        test records of random pixels and labels
  cifar_<case>_<split>.f32
        float32 [n, C, H, W]: every sample of the split through torchvision's
        transforms on the PIL image of its array (Image.fromarray(HWC)):
          norm3      ToTensor, Normalize((0.49, 0.48, 0.45), (0.25, 0.24, 0.26))
          grey       convert('L'), ToTensor, Normalize((0.5,), (0.25,))
          resize     Resize(20), CenterCrop(16), ToTensor (antialiased shrink; test split)
  idx/{train,t10k}-{images-idx3,labels-idx1}-ubyte
        IDX files of random 28x28 grey images (5 training, 3 test) and labels
  idx_<case>_<split>.f32, idx_labels_<split>.txt
        float32 [n, C, H, W]: torchvision's own FashionMNIST reader over those files,
        with these transforms of its PIL image (mode L):
          resize3    Resize(32), Grayscale(3), ToTensor, Normalize((0.3, 0.4, 0.5), (0.2, 0.25, 0.3))
          crop       CenterCrop(20), ToTensor, Normalize((0.1307,), (0.3081,)) (kiln's default
                     normalisation of IDX data)
  tokens.bin   llm.c's token file: 256 int32 (magic 20240520, version 1, count), uint16 tokens
  tokens.txt   the same tokens as text, one line (the test's independent copy)
  jpeg/*.jpg   JPEGs PIL encoded (quality 90) from seeded smooth-plus-noise arrays, for
               tests/test_jpeg_crop.c: RGB at 4:2:0, 4:2:2 and 4:4:4, grey, a progressive
               4:2:0, odd sizes (not multiples of an iMCU)

Regenerate (CI uses the committed files):  /usr/bin/python3 tests/ref/make_data_fixtures.py
"""
import os

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "formats")
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_batch(path, labels, pixels):
    """pixels [n, 3, 32, 32] u8, labels [n] u8, as CIFAR-10's binary records"""
    rec = np.concatenate([labels.reshape(-1, 1), pixels.reshape(len(labels), -1)], axis=1).astype(np.uint8)
    rec.tofile(path)


def expected(pixels, tf, name):
    """torchvision's transform of each sample's PIL image, stacked as float32"""
    out = [tf(Image.fromarray(p.transpose(1, 2, 0), "RGB")) for p in pixels]
    torch.stack(out).numpy().astype(np.float32).tofile(os.path.join(OUT, name))


def cifar(rng):
    os.makedirs(os.path.join(OUT, "cifar"), exist_ok=True)
    splits = {}
    train_l, train_p = [], []
    for i, n in enumerate([2, 1, 2, 1, 1]):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        pixels = rng.integers(0, 256, (n, 3, 32, 32)).astype(np.uint8)
        write_batch(os.path.join(OUT, "cifar", f"data_batch_{i + 1}.bin"), labels, pixels)
        train_l.append(labels)
        train_p.append(pixels)
    splits["train"] = (np.concatenate(train_l), np.concatenate(train_p))
    labels = rng.integers(0, 10, 3).astype(np.uint8)
    pixels = rng.integers(0, 256, (3, 3, 32, 32)).astype(np.uint8)
    write_batch(os.path.join(OUT, "cifar", "test_batch.bin"), labels, pixels)
    splits["test"] = (labels, pixels)
    with open(os.path.join(OUT, "cifar", "batches.meta.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n\n")
    norm3 = T.Compose([T.ToTensor(), T.Normalize((0.49, 0.48, 0.45), (0.25, 0.24, 0.26))])
    grey = T.Compose([T.Grayscale(1), T.ToTensor(), T.Normalize((0.5,), (0.25,))])
    for split, (labels, pixels) in splits.items():
        expected(pixels, norm3, f"cifar_norm3_{split}.f32")
        expected(pixels, grey, f"cifar_grey_{split}.f32")
        with open(os.path.join(OUT, f"cifar_labels_{split}.txt"), "w") as f:
            f.write(" ".join(str(int(v)) for v in labels) + "\n")
    resize = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor()])
    expected(splits["test"][1], resize, "cifar_resize_test.f32")


def idx(rng):
    import shutil
    import struct
    import tempfile

    import torchvision

    d = os.path.join(OUT, "idx")
    os.makedirs(d, exist_ok=True)
    root = tempfile.mkdtemp()
    raw = os.path.join(root, "FashionMNIST", "raw")
    os.makedirs(raw)
    for split, n in (("train", 5), ("t10k", 3)):
        pixels = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        for kind, head, body in (("images-idx3", struct.pack(">IIII", 0x803, n, 28, 28), pixels),
                                 ("labels-idx1", struct.pack(">II", 0x801, n), labels)):
            for folder in (d, raw):
                with open(os.path.join(folder, f"{split}-{kind}-ubyte"), "wb") as f:
                    f.write(head + body.tobytes())
    cases = {"resize3": T.Compose([T.Resize(32), T.Grayscale(3), T.ToTensor(),
                                   T.Normalize((0.3, 0.4, 0.5), (0.2, 0.25, 0.3))]),
             "crop": T.Compose([T.CenterCrop(20), T.ToTensor(), T.Normalize((0.1307,), (0.3081,))])}
    for split, train in (("train", True), ("test", False)):
        for case, tf in cases.items():
            ds = torchvision.datasets.FashionMNIST(root, train=train, transform=tf, download=False)
            torch.stack([ds[i][0] for i in range(len(ds))]).numpy().astype(np.float32).tofile(
                os.path.join(OUT, f"idx_{case}_{split}.f32"))
        with open(os.path.join(OUT, f"idx_labels_{split}.txt"), "w") as f:
            f.write(" ".join(str(int(ds[i][1])) for i in range(len(ds))) + "\n")
    shutil.rmtree(root)


def tokens(rng):
    toks = rng.integers(0, 50257, 1000).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(toks)
    with open(os.path.join(OUT, "tokens.bin"), "wb") as f:  # llm.c's write_datafile
        f.write(header.tobytes())
        f.write(toks.tobytes())
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(" ".join(str(int(t)) for t in toks) + "\n")


def jpegs(rng):
    os.makedirs(os.path.join(OUT, "jpeg"), exist_ok=True)

    def pattern(h, w, c):
        y, x = np.mgrid[0:h, 0:w]
        chans = [60 + 120 * np.sin(x / (5.0 + 3 * k)) * np.cos(y / 7.0) + rng.integers(0, 60, (h, w)) for k in range(c)]
        return np.clip(np.stack(chans, -1) + 60, 0, 255).astype(np.uint8)

    for name, (h, w), sub in [("rgb420", (83, 117), 2), ("rgb422", (61, 90), 1), ("rgb444", (77, 71), 0)]:
        Image.fromarray(pattern(h, w, 3), "RGB").save(os.path.join(OUT, "jpeg", name + ".jpg"), quality=90, subsampling=sub)
    Image.fromarray(pattern(70, 99, 1)[:, :, 0], "L").save(os.path.join(OUT, "jpeg", "grey.jpg"), quality=90)
    Image.fromarray(pattern(66, 100, 3), "RGB").save(os.path.join(OUT, "jpeg", "prog420.jpg"), quality=90, subsampling=2,
                                                     progressive=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240520)
    cifar(rng)
    tokens(rng)
    jpegs(rng)
    idx(rng)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
