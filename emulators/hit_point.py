"""The point a tap reaches an element by, as JavaScript for the page: shared by the browser device and the
MiniWoB++ oracles, and kept apart from the browser support module so that the oracles (listed with the
suites by ``import emulators``) load nothing of Playwright's."""

from __future__ import annotations

__all__ = ["UNCOVERED_POINT_JS"]

#: JS ``(el, b)``: the point, in CSS pixels, where a tap reaches the element ``el`` inside its box ``b``
#: (``[x0, y0, x1, y1]``, CSS pixels) when something else is drawn over the box's centre; ``null`` where the
#: centre (and the pixels around it) is the element's own, as a person's tap there would find it, and ``null``
#: again where no point is (covered whole, or not hit-testable). The point nearest the centre of a 9 x 9 grid
#: over the box. How the browser device taps an element action (``BrowserDevice``) and where the MiniWoB++
#: oracles tap, so that an oracle's tap turned into an element action names the element it hit.
UNCOVERED_POINT_JS = """(el, b) => {
    if (!el || !el.isConnected) return null;
    const root = el.getRootNode && el.getRootNode().elementFromPoint ? el.getRootNode() : document;
    // the node hit is the element or inside it, through slots and shadow roots (a web component's slotted
    // label is the component's own, though not its child)
    const within = (n) => {
        for (let i = 0; n && i < 1000; i++) { if (n === el) return true; n = n.assignedSlot || n.parentNode || n.host; }
        return false;
    };
    const hit = (x, y) => within(root.elementFromPoint(x, y));
    // the pixel and its four neighbours: a point on the border of the covering element is not the element's
    // (a tap's hit test need not round as elementFromPoint does)
    const hits = (x, y) => hit(x, y) && hit(x - 1, y) && hit(x + 1, y) && hit(x, y - 1) && hit(x, y + 1);
    const cx = (b[0] + b[2]) / 2, cy = (b[1] + b[3]) / 2;
    if (hits(cx, cy)) return null;
    const grid = [];
    for (let i = 1; i < 10; i++) for (let j = 1; j < 10; j++) {
        const x = b[0] + (b[2] - b[0]) * i / 10, y = b[1] + (b[3] - b[1]) * j / 10;
        grid.push([(x - cx) ** 2 + (y - cy) ** 2, x, y]);
    }
    grid.sort((p, q) => p[0] - q[0]);  // nearest first: the first that hits is the one
    for (const [, x, y] of grid) if (hits(x, y)) return [x, y];
    return null;
}"""
