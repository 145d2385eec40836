"""Static renderers of a :class:`~components.graph_view.GraphPicture`: SVG and PNG (Pillow).

Same layout and edge styles as the interactive view, for downloads and reports.
"""
from __future__ import annotations

import html
import io
import re

import numpy as np

from .graph_view import DASH, DELETED_EDGE, DELETED_NODE, GraphPicture, edge_style

def _canvas_coords(pic: GraphPicture, width: float, height: float, legend_h: float,
                   scale: float = 1.0) -> np.ndarray:
    """Node centres on the canvas below the legend, leaving room for node labels."""
    left, right, top, bottom = 18 * scale, 36 * scale, 22 * scale, 16 * scale
    w, h = width - left - right, height - legend_h - top - bottom
    pos = pic.positions if len(pic.positions) else np.zeros((0, 2))
    if not len(pos):
        return pos
    return np.stack([left + pos[:, 0] * w, top + pos[:, 1] * h], axis=1)


def _legend_rows(pic: GraphPicture, width: int) -> list[list[tuple[str, str, str]]]:
    rows, row, used = [], [], 0
    for entry in pic.legend:
        need = 26 + 6.5 * len(entry[0])
        if row and used + need > width - 10:
            rows.append(row)
            row, used = [], 0
        row.append(entry)
        used += need
    if row:
        rows.append(row)
    return rows


def to_svg(pic: GraphPicture, width: int = 480, height: int = 400, title: str = "") -> str:
    """A static SVG of the picture (same layout and styles as the interactive view)."""
    rows = _legend_rows(pic, width)
    legend_h = 18 * len(rows) + (22 if title else 0) + 6
    xy = _canvas_coords(pic, width, height, legend_h)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' font-family='sans-serif'>",
           f"<rect width='{width}' height='{height}' fill='white'/>"]
    y0 = 6
    if title:
        out.append(f"<text x='8' y='{y0 + 14}' font-size='14' font-weight='bold'>"
                   f"{html.escape(title)}</text>")
        y0 += 22
    for r, row in enumerate(rows):
        x = 8
        y = y0 + 12 + 18 * r
        for text, colour, kind in row:
            c = html.escape(colour)
            if kind == "edge":
                out.append(f"<line x1='{x}' y1='{y - 4}' x2='{x + 18}' y2='{y - 4}' stroke='{c}' "
                           f"stroke-width='3'/>")
            elif kind == "target":
                out.append(f"<circle cx='{x + 7}' cy='{y - 4}' r='6' fill='white' stroke='{c}' "
                           f"stroke-width='3'/>")
            elif kind == "deleted":
                out.append(f"<line x1='{x}' y1='{y - 4}' x2='{x + 18}' y2='{y - 4}' stroke='{c}' "
                           f"stroke-width='3' stroke-dasharray='4 3'/>")
            elif kind == "hollow":
                out.append(f"<circle cx='{x + 7}' cy='{y - 4}' r='5' fill='white' stroke='{c}' "
                           f"stroke-width='2' stroke-dasharray='3 2'/>")
            else:
                out.append(f"<circle cx='{x + 7}' cy='{y - 4}' r='5' fill='{c}'/>")
            out.append(f"<text x='{x + 22}' y='{y}' font-size='11' fill='#333'>"
                       f"{html.escape(text)}</text>")
            x += 26 + int(6.5 * len(text))
    order = sorted(range(len(pic.pairs)), key=lambda j: edge_style(pic, j)[2])
    for j in order:
        u, v = pic.pairs[j]
        colour, width_, _ = edge_style(pic, j)
        stroke, opacity = _svg_colour(colour)
        dash = f" stroke-dasharray='{DASH[0]} {DASH[1]}'" if pic.is_removed(j) else ""
        out.append(f"<line x1='{xy[u, 0]:.1f}' y1='{legend_h + xy[u, 1]:.1f}' "
                   f"x2='{xy[v, 0]:.1f}' y2='{legend_h + xy[v, 1]:.1f}' stroke='{stroke}' "
                   f"stroke-opacity='{opacity}' stroke-width='{width_:.1f}' "
                   f"stroke-linecap='round'{dash}/>")
    for i in range(pic.num_nodes):
        is_target = pic.target is not None and i == pic.target
        r = 10 if is_target else 6
        cx, cy = xy[i, 0], legend_h + xy[i, 1]
        gone = pic.node_removed(i)
        fill = DELETED_NODE if gone else pic.node_colors[i]
        stroke = DELETED_EDGE if gone else "#111" if is_target else "white"
        dash = " stroke-dasharray='3 2'" if gone else ""
        out.append(f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='{r}' "
                   f"fill='{html.escape(fill)}' stroke='{stroke}' "
                   f"stroke-width='{3 if is_target or gone else 1}'{dash}><title>"
                   f"{html.escape(pic.node_titles[i] + (' · deleted' if gone else ''))}"
                   f"</title></circle>")
        if pic.num_nodes <= 60 or is_target:
            out.append(f"<text x='{cx + r + 1:.1f}' y='{cy - r:.1f}' font-size='9' fill='#222'>"
                       f"{html.escape(pic.node_labels[i])}</text>")
    out.append("</svg>")
    return "\n".join(out)


def _svg_colour(colour: str) -> tuple[str, float]:
    m = re.fullmatch(r"rgba\((\d+),(\d+),(\d+),([\d.]+)\)", colour.replace(" ", ""))
    if m:
        r, g, b, a = m.groups()
        return f"rgb({r},{g},{b})", float(a)
    return colour, 1.0


def _rgb(colour: str) -> tuple[int, int, int, int]:
    m = re.fullmatch(r"rgba\((\d+),(\d+),(\d+),([\d.]+)\)", colour.replace(" ", ""))
    if m:
        r, g, b, a = m.groups()
        return int(r), int(g), int(b), int(round(float(a) * 255))
    c = colour.lstrip("#")
    if len(c) == 3:
        c = "".join(ch * 2 for ch in c)
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16), 255


def _dashes(a: tuple[float, float], b: tuple[float, float], on: float, off: float
            ) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """The segments of a dashed line from ``a`` to ``b`` (Pillow draws solid lines only)."""
    (x0, y0), (x1, y1) = a, b
    length = float(np.hypot(x1 - x0, y1 - y0))
    if length < 1e-9:
        return [(a, b)]
    out, t = [], 0.0
    while t < length:
        e = min(length, t + on)
        out.append(((x0 + (x1 - x0) * t / length, y0 + (y1 - y0) * t / length),
                    (x0 + (x1 - x0) * e / length, y0 + (y1 - y0) * e / length)))
        t = e + off
    return out


def to_png(pic: GraphPicture, width: int = 960, height: int = 800, title: str = "") -> bytes:
    """A static PNG of the picture (Pillow; same layout and styles)."""
    from PIL import Image, ImageDraw, ImageFont

    scale = width / 480.0
    try:
        font = ImageFont.load_default(size=max(8, int(round(11 * scale))))
        small = ImageFont.load_default(size=max(7, int(round(9 * scale))))
    except TypeError:  # old Pillow: one fixed-size bitmap font
        font = small = ImageFont.load_default()
    img = Image.new("RGBA", (width, height), (255, 255, 255, 255))
    layer = Image.new("RGBA", (width, height), (255, 255, 255, 0))
    draw = ImageDraw.Draw(layer)
    rows = _legend_rows(pic, int(width / scale))
    legend_h = int((18 * len(rows) + (22 if title else 0) + 6) * scale)
    xy = _canvas_coords(pic, width, height, legend_h, scale)
    order = sorted(range(len(pic.pairs)), key=lambda j: edge_style(pic, j)[2])
    for j in order:
        u, v = pic.pairs[j]
        colour, w, _ = edge_style(pic, j)
        ends = [(xy[u, 0], legend_h + xy[u, 1]), (xy[v, 0], legend_h + xy[v, 1])]
        for a, b in (_dashes(*ends, DASH[0] * scale, DASH[1] * scale) if pic.is_removed(j)
                     else [ends]):
            draw.line([a, b], fill=_rgb(colour), width=max(1, int(round(w * scale))))
    img = Image.alpha_composite(img, layer)
    draw = ImageDraw.Draw(img)
    for i in range(pic.num_nodes):
        is_target = pic.target is not None and i == pic.target
        r = (10 if is_target else 6) * scale
        cx, cy = xy[i, 0], legend_h + xy[i, 1]
        gone = pic.node_removed(i)
        draw.ellipse([cx - r, cy - r, cx + r, cy + r],
                     fill=_rgb(DELETED_NODE if gone else pic.node_colors[i]),
                     outline=_rgb(DELETED_EDGE) if gone else
                     (17, 17, 17, 255) if is_target else (255, 255, 255, 255),
                     width=int(3 * scale) if is_target or gone else 1)
        if pic.num_nodes <= 60 or is_target:
            draw.text((cx + r + 1, cy - r - 10 * scale), pic.node_labels[i], fill=(34, 34, 34, 255),
                      font=small)
    y = 6 * scale
    if title:
        draw.text((8 * scale, y), title, fill=(0, 0, 0, 255), font=font)
        y += 22 * scale
    for r_i, row in enumerate(rows):
        x = 8 * scale
        yy = y + 18 * scale * r_i + 6 * scale
        for text, colour, kind in row:
            if kind in ("edge", "deleted"):
                ends = [(x, yy + 4), (x + 18 * scale, yy + 4)]
                for a, b in (_dashes(*ends, 4 * scale, 3 * scale) if kind == "deleted"
                             else [ends]):
                    draw.line([a, b], fill=_rgb(colour), width=int(3 * scale))
            elif kind == "hollow":
                draw.ellipse([x, yy - 2, x + 12 * scale, yy - 2 + 12 * scale],
                             fill=(255, 255, 255, 255), outline=_rgb(colour),
                             width=int(2 * scale))
            else:
                draw.ellipse([x, yy - 2, x + 12 * scale, yy - 2 + 12 * scale],
                             fill=_rgb(colour) if kind != "target" else (255, 255, 255, 255),
                             outline=_rgb(colour), width=int(2 * scale))
            draw.text((x + 22 * scale, yy - 2 * scale), text, fill=(51, 51, 51, 255), font=font)
            x += (26 + 6.5 * len(text)) * scale
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="PNG")
    return buf.getvalue()
