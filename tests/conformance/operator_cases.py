"""Conformance cases for the operators of real models and image pipelines (issue 29): boundary
conditions and combining scatters so far.  Each returns (workload, expected outputs from the inputs, in numpy)."""

from __future__ import annotations

import numpy as np

import ptowsp as pw


def boundary_blur(h: int = 14, w: int = 21):
    """A separable blur over a repeat_edge view, then a mirror view of the result, plus a
    constant-border read far outside: every view in one pipeline."""
    wl = pw.Workload("boundary_blur")
    img = wl.input("img", (h, w))
    edge = img.boundary("repeat_edge")
    bx = wl.compute("bx", (h, w), lambda y, x: (edge[y, x - 1] + edge[y, x] * 2.0 + edge[y, x + 1]) / 4.0)
    mirror = bx.boundary("mirror")
    by = wl.compute("by", (h, w), lambda y, x: (mirror[y - 2, x] + mirror[y, x] + mirror[y + 2, x]) / 3.0)
    dark = img.boundary("constant", -1.0)
    wl.output(wl.compute("out", (h, w), lambda y, x: by[y, x] + dark[y + 3, x - 5]))

    def expected(p):
        e = np.pad(p["img"], 1, mode="edge")
        bx = (e[1:-1, :-2] + e[1:-1, 1:-1] * 2 + e[1:-1, 2:]) / 4
        m = np.pad(bx, 2, mode="symmetric")
        by = (m[:-4, 2:-2] + m[2:-2, 2:-2] + m[4:, 2:-2]) / 3
        c = np.pad(p["img"], 5, mode="constant", constant_values=-1.0)
        return {"out": by + c[8:8 + h, 0:w]}

    return wl, expected


def boundary_uint8(h: int = 9, w: int = 40):
    """A byte image through a repeat_edge view: integer taps, a widening sum, a saturating store."""
    wl = pw.Workload("boundary_uint8")
    img = wl.input("img", (h, w), "uint8")
    edge = img.boundary("repeat_edge")
    wl.output(wl.compute("out", (h, w), lambda y, x: pw.saturating_cast(
        pw.cast(edge[y, x - 1], "int16") + pw.cast(edge[y, x + 1], "int16") - pw.cast(edge[y - 1, x], "int16"),
        "uint8")))

    def expected(p):
        e = np.pad(p["img"], 1, mode="edge").astype(np.int16)
        return {"out": np.clip(e[1:-1, :-2] + e[1:-1, 2:] - e[:-2, 1:-1], 0, 255).astype(np.uint8)}

    return wl, expected


def histogram_uint8(h: int = 12, w: int = 20, bins: int = 8):
    """A histogram of a byte image in one pass: every pixel adds 1 to its bin (Halide's bilateral_grid)."""
    wl = pw.Workload("histogram_uint8")
    img = wl.input("img", (h, w), "uint8")
    wl.output(wl.scatter("H", (bins,), over=(h, w), index=lambda y, x: (img[y, x] // (256 // bins),),
                         value=lambda y, x: 1, combine="add"))
    return wl, lambda p: {"H": np.bincount((p["img"] // (256 // bins)).ravel(), minlength=bins)}


def scatter_add_repeated(n: int = 30, d: int = 4):
    """Rows added into an 11-row table at data-dependent, repeated rows (np.add.at)."""
    wl = pw.Workload("scatter_add_repeated")
    src, idx = wl.input("src", (n, d)), wl.input("idx", (n,), "int32")
    wl.output(wl.scatter("T", (11, d), over=(n, d), index=lambda i, j: (idx[i] + 5, j),
                         value=lambda i, j: src[i, j] * 2.0, combine="add"))

    def expected(p):
        out = np.zeros((11, d), np.float32)
        np.add.at(out, p["idx"] + 5, p["src"] * 2)
        return {"T": out}

    return wl, expected


def scatter_max(rows: int = 6, n: int = 44):
    """A per-row maximum into 11 bins: the first 11 points of a row fill each bin once, the others
    land where the data says (np.maximum.at); no bin keeps the identity, -inf."""
    wl = pw.Workload("scatter_max")
    x, idx = wl.input("x", (rows, n)), wl.input("idx", (rows, n), "int32")
    wl.output(wl.scatter("M", (rows, 11), over=(rows, n), index=lambda r, c: (r, pw.where(c < 11, c, idx[r, c] + 5)),
                         value=lambda r, c: x[r, c], combine="max"))

    def expected(p):
        out = np.full((rows, 11), -np.inf, np.float32)
        cols = np.where(np.arange(n) < 11, np.arange(n), p["idx"] + 5)
        np.maximum.at(out, (np.repeat(np.arange(rows), n).reshape(rows, n), cols), p["x"])
        return {"M": out}

    return wl, expected


def bilateral_grid(h: int = 12, w: int = 18, s: int = 8, bins: int = 4):
    """The zoo's bilateral grid: sums and counts per (cell, intensity bin) by np.add.at, a [1, 2, 1]
    blur along the bins, each pixel sliced at its own cell."""
    wl = pw.zoo.bilateral_grid(h, w, s, bins)

    def expected(p):
        img = p["img"]
        z = np.clip((img * bins).astype(np.int32), 0, bins - 1)
        at = (*np.meshgrid(np.arange(h) // s, np.arange(w) // s, indexing="ij"), z)
        grids = [np.zeros((-(-h // s), -(-w // s), bins)) for _ in range(2)]
        np.add.at(grids[0], at, img)
        np.add.at(grids[1], at, 1.0)
        blurred = [np.pad(g, ((0, 0), (0, 0), (1, 1)))[..., :-2] + 2 * g + np.pad(g, ((0, 0), (0, 0), (1, 1)))[..., 2:]
                   for g in grids]
        return {"out": blurred[0][at] / np.maximum(blurred[1][at], 1.0)}

    return wl, expected


OPERATOR_CASES = [boundary_blur, boundary_uint8, histogram_uint8, scatter_add_repeated, scatter_max, bilateral_grid]

from tests.conformance.reduction_cases import EXACT_CASES, REDUCTION_CASES  # noqa: E402 - argmax, reducers

OPERATOR_CASES += REDUCTION_CASES


def zoo_blur():
    """Halide's apps/blur on uint16 (the zoo's `blur`): widened sums, floor division, edge repeat."""
    def expected(p):
        def three(a, axis):
            e = np.pad(a, [(1, 1) if d == axis else (0, 0) for d in range(2)], mode="edge").astype(np.uint32)
            lo, mid, hi = (np.take(e, range(k, k + a.shape[axis]), axis=axis) for k in (0, 1, 2))
            return ((lo + mid + hi) // 3).astype(np.uint16)

        return {"blur_y": three(three(p["input"], 1), 0)}

    return pw.zoo.blur(10, 36), expected


def zoo_quantized_conv2d():
    """int8 convolution with int32 accumulation (the zoo's `quantized_conv2d`), zero padding."""
    def expected(p):
        x, w = p["X"].astype(np.int32), p["W"].astype(np.int32)
        k = w.shape[-1]
        xp = np.pad(x, [(0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)])
        h, wd = x.shape[2:]
        out = np.zeros((x.shape[0], w.shape[0], h, wd), np.int32)
        for r in range(k):
            for s in range(k):
                out += np.einsum("nchw,oc->nohw", xp[:, :, r:r + h, s:s + wd], w[:, :, r, s])
        return {"Y": out}

    return pw.zoo.quantized_conv2d(1, 4, 6, 7, 5, 3), expected


def zoo_camera_pipe():
    """The zoo's camera_pipe on a 16-bit raw (so random pixels reach every curve entry): saturating
    black level, hot-pixel clamp per Bayer plane, bilinear GRBG demosaic (neighbours reflected about
    the edge, which keeps their colour), Q8.8 colour matrix with floor division, a 1024-entry curve."""
    black, scale = 25, 64  # bits=16: the curve index is the corrected value // 2**6
    matrix = np.array([[589, -115, 44, -10008], [-98, 407, -53, -6510], [-23, -188, 584, -5141]], np.int64)
    matrix[:, 3] *= scale

    def expected(p):
        lin = np.clip(p["raw"].astype(np.int64) - black, 0, 65535)
        den = np.empty_like(lin)
        for dy in (0, 1):
            for dx in (0, 1):
                e = np.pad(lin[dy::2, dx::2], 1, mode="edge")
                near = np.stack([e[:-2, 1:-1], e[2:, 1:-1], e[1:-1, :-2], e[1:-1, 2:]])
                den[dy::2, dx::2] = np.clip(e[1:-1, 1:-1], near.min(0), near.max(0))
        e = np.pad(den, 1, mode="reflect")
        h, w = den.shape

        def nb(dy, dx):
            return e[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]

        horiz, vert = (nb(0, -1) + nb(0, 1) + 1) // 2, (nb(-1, 0) + nb(1, 0) + 1) // 2
        cross = (nb(-1, 0) + nb(1, 0) + nb(0, -1) + nb(0, 1) + 2) // 4
        diag = (nb(-1, -1) + nb(-1, 1) + nb(1, -1) + nb(1, 1) + 2) // 4
        py, px = np.indices((h, w)) % 2
        gr, red, blue, gb = ((py == sy) & (px == sx) for sy, sx in ((0, 0), (0, 1), (1, 0), (1, 1)))
        r = np.select([red, gr, gb], [den, horiz, vert], diag)
        g = np.where(py == px, den, cross)
        b = np.select([blue, gr, gb], [den, vert, horiz], diag)
        mixed = np.einsum("ck,kyx->cyx", matrix[:, :3], np.stack([r, g, b])) + matrix[:, 3, None, None]
        return {"out": p["curve"][np.clip(mixed // 256 // scale, 0, 1023)]}

    return pw.zoo.camera_pipe(12, 16, black_level=black, bits=16), expected


def zoo_unsharp():
    """Halide's apps/unsharp (the zoo's stages, `unsharp_mask`): gray, a 7-tap Gaussian along y then
    x with edges repeated, sharpen / gray times each channel.  Fed `input * 0.25 + 1`, so gray, which
    divides, stays away from 0 for random inputs."""
    from ptowsp.workloads.zoo.images import unsharp_mask

    wl = pw.Workload("unsharp")
    raw = wl.input("input", (3, 12, 20))
    shifted = wl.compute("shifted", (3, 12, 20), lambda c, y, x: raw[c, y, x] * 0.25 + 1.0)
    wl.output(unsharp_mask(wl, shifted))

    def expected(p):
        img = p["input"] * 0.25 + 1.0
        taps = np.exp(-np.arange(-3, 4) ** 2 / (2 * 1.5 ** 2))
        w = taps / taps.sum()
        gray = 0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2]
        h, wd = gray.shape
        padded = np.pad(gray, ((3, 3), (0, 0)), mode="edge")
        by = sum(w[i] * padded[i:i + h] for i in range(7))
        padded = np.pad(by, ((0, 0), (3, 3)), mode="edge")
        bx = sum(w[i] * padded[:, i:i + wd] for i in range(7))
        return {"out": ((2 * gray - bx) / gray)[None] * img}

    return wl, expected


OPERATOR_CASES += [zoo_blur, zoo_quantized_conv2d, zoo_camera_pipe, zoo_unsharp]
EXACT = {boundary_uint8, histogram_uint8, zoo_blur, zoo_quantized_conv2d, zoo_camera_pipe, *EXACT_CASES}  # integers

from tests.conformance.scan_cases import EXACT_SCANS, SCAN_CASES  # noqa: E402 - scans

OPERATOR_CASES += SCAN_CASES
EXACT |= EXACT_SCANS
