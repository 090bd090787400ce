"""Flame graphs from `perf script` output, as self-contained SVG.

    perf script -i perf.data | python3 -m lab.flame --title "..." -o out.svg

Each sample's call stack (root first) is folded into a tree; a frame's width
is its share of the samples, children sit above their caller. Hovering a
frame shows its name, sample count and share (an SVG <title>). Frames under
`--min-share` percent are left out, so the file stays small.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
import sys
from dataclasses import dataclass, field
from typing import Iterable, TextIO

WIDTH = 1200
FRAME_HEIGHT = 16
FONT_SIZE = 11
CHAR_WIDTH = 6.2
MARGIN = 10
HEADER = 40

OFFSET = re.compile(r"\+0x[0-9a-f]+$")


@dataclass
class Node:
    name: str
    samples: int = 0
    children: dict[str, "Node"] = field(default_factory=dict)

    def child(self, name: str) -> "Node":
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = Node(name)
        return node


def frame_name(line: str, inlined: bool = False) -> str | None:
    """`7f12.. symbol+0x1f (/path/dso)` -> `symbol`; None for unknown frames
    and, unless `inlined`, for frames the compiler inlined (DWARF unwinding
    lists them; they make stacks several times deeper)."""
    parts = line.strip().split(None, 1)
    if len(parts) < 2:
        return None
    text = parts[1]
    if text.endswith(" (inlined)") and not inlined:
        return None
    if text.endswith(")") and " (" in text:
        text = text[: text.rindex(" (")]
    text = OFFSET.sub("", text.strip())
    if not text or text == "[unknown]":
        return None
    return text


def samples(lines: Iterable[str], inlined: bool = False) -> Iterable[tuple[str, list[str]]]:
    """(thread name, frames root first) for each sample of `perf script`."""
    header: str | None = None
    frames: list[str] = []
    for line in lines:
        if not line.strip():
            if header is not None:
                yield header, list(reversed(frames))
            header, frames = None, []
            continue
        if header is None:
            header = line.split()[0] if line.split() else "?"
            continue
        name = frame_name(line, inlined)
        if name is not None:
            frames.append(name)
    if header is not None:
        yield header, list(reversed(frames))


CODEC = "HTTP codec (Strait's h1_server, h1_client, h1_codec, relay; hyper, h2, httparse, http, bytes)"
LAYERS = [
    ("kernel (syscalls, TCP/IP on loopback)", lambda sym, dso: "kernel" in dso),
    # Strait's own HTTP/1.1 server and client (since `69556a9` and `0b47349`) in the
    # codec's row with hyper, which they replaced, so graphs from before and after compare.
    (CODEC,
     lambda sym, dso: re.match(r"<?&?(hyper|h2|httparse|http|bytes)::", sym) is not None
     or re.match(r"<?&?strait_proxy::(h1_server|h1_client|h1_codec|relay)::", sym) is not None),
    ("runtime (tokio, mio)", lambda sym, dso: re.match(r"<?&?(tokio|mio)::", sym) is not None),
    ("allocator (mimalloc)", lambda sym, dso: re.match(r"_?mi_", sym) is not None),
    ("Strait (strait_*)", lambda sym, dso: re.match(r"<?&?strait_", sym) is not None),
]
OTHER = "unattributed (no known frame on the stack)"


def _frame(line: str) -> tuple[str, str]:
    parts = line.strip().split(None, 1)
    text = parts[1] if len(parts) > 1 else ""
    dso = ""
    if text.endswith(")") and " (" in text:
        dso = text[text.rindex(" (") + 2 : -1]
        text = text[: text.rindex(" (")]
    return OFFSET.sub("", text), dso


def leaf_layers(lines: Iterable[str], thread: str | None = None) -> list[tuple[str, float]]:
    """Share of samples by layer: the innermost frame that belongs to a known
    layer (inlined frames count: they are the code that ran), so std, core
    and libc helpers (memcpy, atomics, locks) count for the layer that
    called them."""
    counts: dict[str, int] = {}
    total = 0
    header: str | None = None
    layer: str | None = None

    def count() -> None:
        nonlocal total
        if header is None or (thread is not None and header != thread):
            return
        total += 1
        name = layer or OTHER
        counts[name] = counts.get(name, 0) + 1

    for line in lines:
        if not line.strip():
            count()
            header, layer = None, None
            continue
        if header is None:
            header = line.split()[0] if line.split() else "?"
            continue
        if layer is None:
            sym, dso = _frame(line)
            layer = next((name for name, test in LAYERS if test(sym, dso)), None)
    count()
    total = max(total, 1)
    return sorted(((name, n * 100.0 / total) for name, n in counts.items()), key=lambda item: -item[1])


def fold(lines: Iterable[str], thread: str | None = None, inlined: bool = False) -> Node:
    root = Node("all")
    for comm, frames in samples(lines, inlined):
        if thread is not None and comm != thread:
            continue
        root.samples += 1
        node = root.child(comm)
        node.samples += 1
        for name in frames:
            node = node.child(name)
            node.samples += 1
    return root


def color(name: str) -> str:
    digest = hashlib.md5(name.encode()).digest()
    if "[k]" in name or name.startswith(("__", "do_", "tcp_", "ip_", "sock_", "sys_", "entry_")):
        # Kernel and libc-ish frames in orange, the rest warm red/yellow.
        return f"rgb({220 + digest[0] % 35},{120 + digest[1] % 60},{40 + digest[2] % 30})"
    return f"rgb({205 + digest[0] % 50},{60 + digest[1] % 130},{40 + digest[2] % 40})"


def depth_of(node: Node) -> int:
    return 1 + max((depth_of(child) for child in node.children.values()), default=0)


def render(root: Node, title: str, min_share: float, out: TextIO) -> None:
    total = max(root.samples, 1)
    depth = depth_of(root)
    height = HEADER + depth * FRAME_HEIGHT + MARGIN
    scale = (WIDTH - 2 * MARGIN) / total
    out.write(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="{FONT_SIZE}">\n'
    )
    out.write(f'<rect width="{WIDTH}" height="{height}" fill="#fdfdf6"/>\n')
    out.write(
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{html.escape(title)}</text>\n'
    )
    out.write(
        f'<text x="{MARGIN}" y="36" font-size="10" fill="#555">{root.samples} samples; '
        "width = share of samples, callers below callees; hover a frame for its numbers</text>\n"
    )

    def draw(node: Node, x: float, level: int) -> None:
        width = node.samples * scale
        if node.samples * 100.0 / total < min_share:
            return
        y = height - MARGIN - (level + 1) * FRAME_HEIGHT
        share = node.samples * 100.0 / total
        label = html.escape(node.name)
        out.write(
            f'<g><title>{label} ({node.samples} samples, {share:.2f}%)</title>'
            f'<rect x="{x:.1f}" y="{y}" width="{max(width - 0.5, 0.1):.1f}" height="{FRAME_HEIGHT - 1}" '
            f'fill="{color(node.name)}" rx="2"/>'
        )
        fits = int((width - 6) / CHAR_WIDTH)
        if fits >= 3:
            text = node.name if len(node.name) <= fits else node.name[: fits - 2] + ".."
            out.write(f'<text x="{x + 3:.1f}" y="{y + FRAME_HEIGHT - 4}">{html.escape(text)}</text>')
        out.write("</g>\n")
        child_x = x
        for child in sorted(node.children.values(), key=lambda n: n.name):
            draw(child, child_x, level + 1)
            child_x += child.samples * scale

    draw(root, MARGIN, 0)
    out.write("</svg>\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", help="perf script output (default: stdin)")
    parser.add_argument("-o", "--output", required=True, help="SVG file to write")
    parser.add_argument("--title", default="flame graph")
    parser.add_argument("--thread", help="only samples of this thread (perf's comm)")
    parser.add_argument("--inlined", action="store_true", help="keep frames the compiler inlined")
    parser.add_argument("--layers", action="store_true", help="also print self time by layer")
    parser.add_argument("--min-share", type=float, default=0.1, help="omit frames under this percent")
    args = parser.parse_args(argv)
    source = open(args.input, encoding="utf-8", errors="replace") if args.input else sys.stdin
    with source:
        root = fold(source, args.thread, args.inlined)
    if root.samples == 0:
        print("no samples", file=sys.stderr)
        return 1
    with open(args.output, "w", encoding="utf-8") as out:
        render(root, args.title, args.min_share, out)
    if args.layers and args.input:
        with open(args.input, encoding="utf-8", errors="replace") as source:
            for name, share in leaf_layers(source, args.thread):
                print(f"{share:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
