"""A raw-to-RGB camera pipeline in the spirit of Halide's apps/camera_pipe: black level, hot-pixel
suppression, demosaic, colour correction and a tone curve, uint16 Bayer in, uint8 RGB out."""

from __future__ import annotations

from ptowsp.errors import ShapeError
from ptowsp.te import cast, clamp, const, maximum, minimum, saturating_cast, where
from ptowsp.workloads.workload import Workload

# Halide's matrix_7000 (daylight), rows r, g, b: coefficients for (r, g, b) and an offset in
# 10-bit units.  The pipeline uses it in Q8.8 fixed point, each entry round(value * 256).
COLOR_MATRIX = (
    (2.2997, -0.4478, 0.1706, -39.0923),
    (-0.3826, 1.5906, -0.2080, -25.4311),
    (-0.0888, -0.7344, 2.2832, -20.0826),
)


def camera_pipe(height: int = 256, width: int = 320, black_level: int = 25, bits: int = 10) -> Workload:
    """raw (uint16 GRBG Bayer, `bits` significant bits), curve (uint8, 1024) -> out (3, height, width) uint8.

    1. `linear[p, i, j]` (4, h/2, w/2): the raw image split into its Gr, R, B, Gb planes (Halide's
       deinterleave), minus `black_level` with saturation at 0 (int32 difference, saturating_cast to uint16).
    2. `denoised`: hot-pixel suppression, each value clamped to the min and max of its 4 same-colour
       neighbours (distance 2 in the image, 1 in its plane, over a repeat_edge view of the plane).
    3. `r`, `g`, `b` (h, w) uint16: bilinear demosaic, the formula picked by `pw.where` on y % 2 and
       x % 2; averages of 2 or 4 neighbours widen to uint32 and round, (a + b + 1) // 2.  A neighbour
       outside the image is read mirrored about the edge pixel (numpy.pad's "reflect"), which keeps
       its Bayer colour: the planes' repeat_edge view does this.
    4. `corrected[c, y, x]` int32: M[c] . (r, g, b) + offset[c] with M in Q8.8 (COLOR_MATRIX * 256,
       the offset scaled to `bits`), then // 256, then // 2**(bits - 10) and clamped to [0, 1023].
    5. `out[c, y, x] = curve[corrected[c, y, x]]`: the tone curve, a gather from a 1024-entry table.

    Simplified from Halide's app: the demosaic is bilinear, not gradient-directed; the colour matrix is
    fixed (no interpolation by colour temperature); the curve is an input, not computed from gamma and
    contrast, and the black level is subtracted before demosaicing rather than inside the curve; no
    sharpening; the output keeps the input's size instead of cropping the borders.
    """
    if height < 2 or width < 2 or height % 2 or width % 2:
        raise ShapeError(f"camera_pipe needs an even height and width (whole Bayer quads), got {height}x{width}")
    if not 10 <= bits <= 16:
        raise ShapeError(f"camera_pipe takes a raw of 10 to 16 bits, got {bits}")
    scale = 2 ** (bits - 10)  # the curve's 1024 entries cover the top 10 bits
    matrix = [[round(v * 256) for v in row[:3]] + [round(row[3] * 256) * scale] for row in COLOR_MATRIX]
    wl = Workload("camera_pipe")
    raw = wl.input("raw", (height, width), "uint16")
    curve = wl.input("curve", (1024,), "uint8")

    # plane p holds the Bayer site (p // 2, p % 2) of each 2x2 quad: 0 Gr, 1 R, 2 B, 3 Gb
    linear = wl.compute("linear", (4, height // 2, width // 2), lambda p, i, j: saturating_cast(
        cast(raw[2 * i + p // 2, 2 * j + p % 2], "int32") - black_level, "uint16"))
    le = linear.boundary("repeat_edge")

    def suppress(p, i, j):
        near = (le[p, i - 1, j], le[p, i + 1, j], le[p, i, j - 1], le[p, i, j + 1])
        return clamp(linear[p, i, j], minimum(minimum(near[0], near[1]), minimum(near[2], near[3])),
                     maximum(maximum(near[0], near[1]), maximum(near[2], near[3])))

    denoised = wl.compute("denoised", (4, height // 2, width // 2), suppress)
    de = denoised.boundary("repeat_edge")

    def at(y, x):  # the denoised Bayer image at any (y, x), mirrored about the edge: same colour site
        return cast(de[2 * (y % 2) + x % 2, y // 2, x // 2], "uint32")

    def avg2(a, b):
        return cast((a + b + 1) // 2, "uint16")

    def avg4(a, b, c, d):
        return cast((a + b + c + d + 2) // 4, "uint16")

    def sites(y, x):  # (center, horizontal, vertical, cross, diagonal) and the Bayer site tests
        c = at(y, x)
        horiz, vert = avg2(at(y, x - 1), at(y, x + 1)), avg2(at(y - 1, x), at(y + 1, x))
        cross = avg4(at(y - 1, x), at(y + 1, x), at(y, x - 1), at(y, x + 1))
        diag = avg4(at(y - 1, x - 1), at(y - 1, x + 1), at(y + 1, x - 1), at(y + 1, x + 1))
        even_y, even_x = y % 2 == 0, x % 2 == 0
        return cast(c, "uint16"), horiz, vert, cross, diag, even_y, even_x

    def red(y, x):  # R sits at (even, odd); Gr's red neighbours are left/right, Gb's above/below
        c, horiz, vert, _, diag, ey, ex = sites(y, x)
        return where(ey, where(ex, horiz, c), where(ex, diag, vert))

    def green(y, x):  # G sits where the parities agree; elsewhere the 4 neighbours are green
        c, _, _, cross, _, ey, ex = sites(y, x)
        return where(ey == ex, c, cross)

    def blue(y, x):  # B sits at (odd, even); Gr's blue neighbours are above/below, Gb's left/right
        c, horiz, vert, _, diag, ey, ex = sites(y, x)
        return where(ey, where(ex, vert, diag), where(ex, c, horiz))

    planes = [wl.compute(name, (height, width), fn) for name, fn in (("r", red), ("g", green), ("b", blue))]

    def correct(ch, y, x):
        def coef(k):  # row ch of the matrix, column k, chosen per channel
            m0, m1, m2 = (const(row[k], "int32") for row in matrix)
            return where(ch == 0, m0, where(ch == 1, m1, m2))

        rgb = [cast(t[y, x], "int32") for t in planes]
        mixed = (coef(0) * rgb[0] + coef(1) * rgb[1] + coef(2) * rgb[2] + coef(3)) // 256
        return clamp(mixed // scale if scale > 1 else mixed, 0, 1023)

    corrected = wl.compute("corrected", (3, height, width), correct)
    wl.output(wl.compute("out", (3, height, width), lambda ch, y, x: curve[corrected[ch, y, x]]))
    return wl
