"""UI trees from Android's accessibility dumps, as typed nodes and as compact text.

Reads the XML of ``uiautomator dump`` (``<hierarchy><node class=... bounds="[x1,y1][x2,y2]">``)
and of Appium UiAutomator2's ``page_source`` (elements named by their class,
same attributes), and the fake driver's app XML (no bounds). The text form keeps
one line per node that carries meaning (text, description, id, or an action)
and drops pure layout containers, indenting by the depth of kept ancestors::

    [0] FrameLayout id=content bounds=[0,88][1080,2284]
      [1] TextView "Network & internet" id=title bounds=[198,1313][586,1376]
      [2] Switch "Wi-Fi" checkable checked clickable bounds=[880,1300][1036,1390]

Bounds are device pixels; ``[i]`` indexes :func:`parse_ui_tree`'s list.

:func:`ui_marks` numbers the same nodes as marks (:class:`guiagent.types.Mark`) for element
actions: the controls one acts on and the text one reads, with roles from the widget classes
(``Button`` -> ``button``, ``EditText`` -> ``textbox``) and boxes normalised to the screen;
:func:`ui_marks_and_taps` also says where to tap a mark whose centre another control covers.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np

from guiagent.types import Mark

__all__ = ["UINode", "parse_ui_tree", "format_ui_tree", "ui_tree_text", "UITreeError", "ui_marks", "ui_marks_and_taps",
           "role_of"]

_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
_FLAGS = ("clickable", "long-clickable", "checkable", "checked", "scrollable", "focused", "selected",
          "password")


class UITreeError(ValueError):
    """The dump is not an accessibility hierarchy (truncated, empty, not XML)."""


@dataclass(frozen=True)
class UINode:
    """One accessibility node. ``bounds`` is ``(x1, y1, x2, y2)`` in device pixels or ``None``."""

    index: int
    depth: int
    class_name: str
    text: str = ""
    content_desc: str = ""
    resource_id: str = ""
    package: str = ""
    bounds: tuple[int, int, int, int] | None = None
    flags: frozenset[str] = frozenset()
    enabled: bool = True
    drawing_order: int | None = None
    """the view's place in its parent's drawing order (AndroidX uiautomator's ``drawing-order``, API 24+), where
    the dump has it: views drawn later lie over earlier ones"""

    @property
    def center(self) -> tuple[int, int] | None:
        if self.bounds is None:
            return None
        x1, y1, x2, y2 = self.bounds
        return ((x1 + x2) // 2, (y1 + y2) // 2)

    @property
    def short_class(self) -> str:
        return self.class_name.rsplit(".", 1)[-1]

    @property
    def meaningful(self) -> bool:
        """Carries text, a description, an id or an action (layout-only containers do not)."""
        return bool(self.text or self.content_desc or self.resource_id
                    or self.flags & {"clickable", "long-clickable", "checkable", "scrollable"})

    def line(self) -> str:
        parts = [f"[{self.index}] {self.short_class}"]
        if self.text:
            parts.append(_quote(self.text))
        if self.content_desc and self.content_desc != self.text:
            parts.append(f"desc={_quote(self.content_desc)}")
        if self.resource_id:
            parts.append(f"id={self.resource_id.rsplit('/', 1)[-1]}")
        parts += [f for f in _FLAGS if f in self.flags]
        if not self.enabled:
            parts.append("disabled")
        if self.bounds is not None:
            parts.append("bounds=[{},{}][{},{}]".format(*self.bounds))
        return " ".join(parts)


def _quote(s: str) -> str:
    s = " ".join(s.split())  # newlines in a field would break the one-line-per-node format
    if len(s) > 200:
        s = s[:197] + "..."
    return '"' + s.replace('"', '\\"') + '"'


def _parse_bounds(value: str | None) -> tuple[int, int, int, int] | None:
    if not value:
        return None
    m = _BOUNDS.fullmatch(value.strip())
    return tuple(int(g) for g in m.groups()) if m else None  # type: ignore[return-value]


def _parse_order(value: str | None) -> int | None:
    v = (value or "").strip()
    return int(v) if v.isdigit() and len(v) <= 9 else None


def parse_ui_tree(xml_text: str | bytes) -> list[UINode]:
    """Every element below the root, in document order.

    Raises :class:`UITreeError` for text that is not XML (``uiautomator dump``
    prints ``ERROR: could not get idle state`` when the screen never settles).
    """
    if isinstance(xml_text, bytes):
        xml_text = xml_text.decode("utf-8", "replace")
    start = xml_text.find("<")
    if start < 0:
        raise UITreeError(f"not a UI hierarchy: {xml_text.strip()[:200]!r}")
    try:
        root = ET.fromstring(xml_text[start:].strip())
    except ET.ParseError as e:
        raise UITreeError(f"UI hierarchy is not well-formed XML ({e}): {xml_text[:120]!r}") from None
    nodes: list[UINode] = []

    def walk(el: ET.Element, depth: int) -> None:
        for child in el:
            a = child.attrib
            flags = frozenset(f for f in _FLAGS if a.get(f) == "true")
            nodes.append(UINode(
                index=len(nodes), depth=depth,
                class_name=a.get("class") or (child.tag if child.tag != "node" else "View"),
                text=a.get("text") or a.get("label") or "",
                content_desc=a.get("content-desc") or a.get("name") or "",
                resource_id=a.get("resource-id") or a.get("id") or "",
                package=a.get("package", ""),
                bounds=_parse_bounds(a.get("bounds")),
                flags=flags,
                enabled=a.get("enabled", "true") != "false",
                drawing_order=_parse_order(a.get("drawing-order")),
            ))
            walk(child, depth + 1)

    walk(root, 0)
    return nodes


def format_ui_tree(nodes: list[UINode]) -> str:
    """Compact text: meaningful nodes only, indented by the number of meaningful ancestors."""
    lines: list[str] = []
    stack: list[int] = []  # depths of kept ancestors
    for n in nodes:
        if not n.meaningful:
            continue
        while stack and stack[-1] >= n.depth:
            stack.pop()
        lines.append("  " * len(stack) + n.line())
        stack.append(n.depth)
    return "\n".join(lines)


def ui_tree_text(xml_text: str | bytes) -> str:
    """``format_ui_tree(parse_ui_tree(xml_text))``."""
    return format_ui_tree(parse_ui_tree(xml_text))


# --------------------------------------------------------------------------------------------- marks

#: widget class (short name, or its ending) -> role, the web's ARIA names where one fits
_ROLES = (
    ("RadioButton", "radio"), ("CheckedTextView", "checkbox"), ("CheckBox", "checkbox"),
    ("SwitchCompat", "switch"), ("SwitchMaterial", "switch"), ("Switch", "switch"), ("ToggleButton", "switch"),
    ("ImageButton", "button"), ("Button", "button"), ("EditText", "textbox"), ("AutoCompleteTextView", "textbox"),
    ("SearchView", "searchbox"), ("SeekBar", "slider"), ("RatingBar", "slider"), ("Spinner", "combobox"),
    ("TabView", "tab"), ("ImageView", "image"), ("TextView", "text"), ("WebView", "webview"),
)
_ACTS = frozenset({"clickable", "long-clickable", "checkable"})
_MAX_NAME = 200


def role_of(node: UINode) -> str:
    """The node's role: from its widget class, else ``clickable`` for a node that takes taps, else ``text``."""
    short = node.short_class
    for ending, role in _ROLES:
        if short == ending or short.endswith(ending):
            return role
    return "clickable" if node.flags & _ACTS else "text"


def _interactive(node: UINode) -> bool:
    return bool(node.flags & _ACTS) or role_of(node) in ("textbox", "searchbox", "slider", "combobox")


def ui_marks(nodes: list[UINode], screen_size: tuple[int, int]) -> "tuple[Mark, ...]":
    """The screen's marks (:func:`ui_marks_and_taps` without the tap points)."""
    return _ui_marks(nodes, screen_size, taps=False)[0]


#: the grid a covered mark's box is searched on for a point no later control covers (as the browser's search)
_GRID = 9


def ui_marks_and_taps(nodes: list[UINode], screen_size: tuple[int, int]
                      ) -> "tuple[tuple[Mark, ...], dict[int, tuple[float, float]]]":
    """The screen's marks from :func:`parse_ui_tree`'s nodes, numbered in document order from 0.

    Marked: nodes with bounds on the screen that one acts on (clickable, long-clickable or checkable,
    or a text field, slider or spinner) or that carry text or a description. As on the web
    (:func:`emulators.browser_support.build_marks`): a tappable container holding another control is
    dropped for that control (a settings row around its switch), and lends its text to a control
    without a name of its own; text inside a marked control is part of that control's name, not a
    mark of its own. A mark carries its node's states: ``checked`` (a checkable node that is),
    ``selected``, ``disabled``. ``screen_size`` is the screen in device pixels (bounds are normalised by it).

    The second value maps the id of a mark whose box centre another control covers to the point (normalised)
    of its box, nearest the centre on a 9 x 9 grid, that no such control covers: where an element action on it
    is tapped, so that the tap reaches the element and not the one drawn over it. A dump has no hit test, so
    this is a rule of thumb from Android's drawing order: a parent draws its children in order, each over the
    ones before, and a control (a node that takes taps) takes a tap on its bounds. A node's order among its
    siblings is the dump's ``drawing-order`` attribute where the dumper writes one (AndroidX uiautomator, API
    24+), else its place in the dump, which lists children in accessibility order (by position on the screen:
    a floating button or bottom bar, below or right of the list it lies over, comes after it, but a view on top
    that starts above or left of the one beneath does not). Elevation is not in the dump. Covers are the
    controls drawn after the mark, neither inside it nor around it; a mark covered whole, or not covered at
    its centre, is not in the map (its centre is tapped).
    """
    return _ui_marks(nodes, screen_size, taps=True)


def _ui_marks(nodes: list[UINode], screen_size: tuple[int, int], *, taps: bool
              ) -> "tuple[tuple[Mark, ...], dict[int, tuple[float, float]]]":
    w, h = screen_size
    if w <= 0 or h <= 0:
        raise ValueError(f"screen size must be positive, got {screen_size}")
    # parents from the depth sequence (document order)
    parent: list[int] = []
    stack: list[int] = []
    for n in nodes:
        while stack and nodes[stack[-1]].depth >= n.depth:
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(n.index)
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parent):
        kids.setdefault(p, []).append(i)

    def box(n: UINode) -> tuple[float, float, float, float] | None:
        if n.bounds is None:
            return None
        x1, y1, x2, y2 = n.bounds
        b = (max(0.0, x1 / w), max(0.0, y1 / h), min(1.0, x2 / w), min(1.0, y2 / h))
        return None if b[2] - b[0] <= 1e-6 or b[3] - b[1] <= 1e-6 else tuple(round(v, 5) for v in b)  # type: ignore

    def own_name(n: UINode) -> str:
        return " ".join((n.text or n.content_desc).split())

    def text_below(i: int, skip: int = -1) -> str:
        """The texts of the nodes under ``i`` (not ``skip``'s subtree), in document order."""
        out: list[str] = []
        todo = list(reversed(kids.get(i, ())))
        while todo:
            j = todo.pop()
            if j == skip:
                continue
            t = own_name(nodes[j])
            if t:
                out.append(t)
            todo.extend(reversed(kids.get(j, ())))
        return " ".join(out)

    def cut(t: str) -> str:
        return t if len(t) <= _MAX_NAME else t[:_MAX_NAME - 1] + "…"

    interactive = [_interactive(n) and box(n) is not None for n in nodes]

    below = [False] * len(nodes)  # a control somewhere under the node (children follow their parent)
    for i in range(len(nodes) - 1, -1, -1):
        below[i] = any(interactive[k] or below[k] for k in kids.get(i, ()))
    container = [interactive[i] and below[i] for i in range(len(nodes))]

    def control_above(i: int) -> int:
        """The nearest kept control (interactive, not a container) above node ``i``, or -1."""
        j = parent[i]
        while j >= 0:
            if interactive[j] and not container[j]:
                return j
            j = parent[j]
        return -1

    def container_above(i: int) -> int:
        j = parent[i]
        while j >= 0:
            if container[j]:
                return j
            if interactive[j]:
                return -1
            j = parent[j]
        return -1

    marks: list[Mark] = []
    node_of: list[int] = []  # the node of each mark
    for i, n in enumerate(nodes):
        b = box(n)
        if b is None or container[i]:
            continue
        if interactive[i]:
            name = own_name(n) or text_below(i)
            if not name:
                c = container_above(i)
                name = text_below(c, skip=i) if c >= 0 else ""
            if not name and n.resource_id:
                name = n.resource_id.rsplit("/", 1)[-1]
        elif own_name(n) and control_above(i) < 0:
            name = own_name(n)
        else:
            continue
        states = (("checked",) if {"checkable", "checked"} <= n.flags else ()) \
            + (("selected",) if "selected" in n.flags else ()) + (() if n.enabled else ("disabled",))
        marks.append(Mark(len(marks), role_of(n), cut(name), b, states))
        node_of.append(i)
    return tuple(marks), (_tap_points(marks, node_of, [box(n) for n in nodes], interactive, nodes, parent, kids)
                          if taps else {})


def _tap_points(marks: list[Mark], node_of: list[int], boxes: list, interactive: list[bool],
                nodes: list[UINode], parent: list[int], kids: dict[int, list[int]]) -> dict[int, tuple[float, float]]:
    """Mark id -> the point of its box nearest its centre that no control drawn over the mark covers (only for the
    marks whose centre one covers; see :func:`ui_marks_and_taps`)."""
    controls = [j for j, ok in enumerate(interactive) if ok]
    if not controls or not marks:
        return {}
    # each node's place in the drawing order: the path of its and its ancestors' orders among their siblings (the
    # dump's drawing-order attribute where it has one, else the place in the dump); a node is drawn over another,
    # neither inside the other, when its path sorts after the other's
    order: list[tuple[int, int]] = [(0, 0)] * len(nodes)
    for siblings in kids.values():
        for place, j in enumerate(siblings):
            d = nodes[j].drawing_order
            order[j] = (place if d is None else d, place)  # equal drawing orders: the dump's order
    key: list[tuple[tuple[int, int], ...]] = []
    for j in range(len(nodes)):  # parents come first in the dump
        key.append((key[parent[j]] if parent[j] >= 0 else ()) + (order[j],))

    def over(j: int, i: int) -> bool:
        kj, ki = key[j], key[i]
        related = kj[:len(ki)] == ki or ki[:len(kj)] == kj  # one inside the other (or the same node)
        return not related and kj > ki

    cb = np.array([boxes[j] for j in controls], dtype=float)
    out: dict[int, tuple[float, float]] = {}
    for mark, i in zip(marks, node_of):
        cx, cy = mark.center
        at_centre = np.nonzero((cb[:, 0] <= cx) & (cx <= cb[:, 2]) & (cb[:, 1] <= cy) & (cy <= cb[:, 3]))[0]
        if not any(over(controls[k], i) for k in at_centre):
            continue
        x0, y0, x1, y1 = mark.box
        part = np.nonzero((cb[:, 0] < x1) & (cb[:, 2] > x0) & (cb[:, 1] < y1) & (cb[:, 3] > y0))[0]
        covers = [boxes[controls[k]] for k in part if over(controls[k], i)]  # over some of the box
        grid = [(x0 + a * (x1 - x0) / (_GRID + 1), y0 + b * (y1 - y0) / (_GRID + 1))
                for a in range(1, _GRID + 1) for b in range(1, _GRID + 1)]  # the browser's grid
        grid.sort(key=lambda p: ((p[0] - cx) ** 2 + (p[1] - cy) ** 2, p[1], p[0]))
        free = next((p for p in grid if not any(c[0] <= p[0] <= c[2] and c[1] <= p[1] <= c[3] for c in covers)),
                    None)
        if free is not None:
            out[mark.id] = (round(free[0], 6), round(free[1], 6))
    return out
