"""Scripted solvers for MiniWoB++ tasks.

An oracle reads the page's DOM (the agent may not) and plans its actions as a
generator: each ``next()`` runs after the previous action was executed and the
page settled, so a plan can look again before each step (menus that appear later,
state that changed). Actions use normalised screen coordinates like an agent's.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator

from emulators.hit_point import UNCOVERED_POINT_JS
from guiagent.types import Action, Click, Key, Scroll, Type

__all__ = ["ORACLES", "MAX_STEPS", "next_action"]

Plan = Iterator[Action]

#: task id -> plan factory ``(device, utterance) -> iterator of actions``
ORACLES: dict[str, Callable[[Any, str], Plan]] = {}
#: the step budget of each task of the benchmark set (other pages keep the default 15): twice the longest
#: oracle episode over the recipe's 1,000 demonstrations (training seeds 0-39 of each task), plus one, so an
#: agent may waste one step per step the task needs. The reference environment bounds an episode by its
#: 10-second countdown instead, which this suite silences. Figures measured before this table gave every
#: task 15 steps (a failing episode of a one-click task ran all 15).
MAX_STEPS: dict[str, int] = {
    "choose-list": 5, "click-button": 3, "click-button-sequence": 5, "click-checkboxes": 11,
    "click-checkboxes-large": 27, "click-checkboxes-transfer": 9, "click-collapsible": 5, "click-collapsible-2": 9,
    "click-dialog": 3, "click-dialog-2": 3, "click-link": 3, "click-option": 5, "click-tab": 3, "click-tab-2": 7,
    "click-tab-2-hard": 13, "click-test": 3, "click-test-2": 3, "click-widget": 3, "enter-password": 7,
    "enter-text": 5, "enter-text-dynamic": 5, "focus-text": 3, "focus-text-2": 3, "login-user": 7,
    "login-user-popup": 11,
}


def next_action(plan: Plan) -> Action | None:
    return next(plan, None)


def oracle(*names: str) -> Callable[[Callable[[Any, str], Plan]], Callable[[Any, str], Plan]]:
    def register(fn: Callable[[Any, str], Plan]) -> Callable[[Any, str], Plan]:
        for name in names:
            ORACLES[name] = fn
        return fn
    return register


# The centre of the element (of its first line's box when it wraps), or, when another element covers the centre (some pages place
# buttons at random and let them overlap), the point nearest the centre that hits it, off the other's border: where the browser
# device taps an element action (UNCOVERED_POINT_JS), so that the tap turned into an element action names the element it hit.
_CENTER_JS = """(a) => {
    const el = (%s);
    if (!el) return null;
    // a link wrapped over two lines: its first line's box (the element list's box for it)
    const rects = el.getClientRects();
    const r = rects.length > 1 && rects[0].width > 0 ? rects[0] : el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return null;
    const p = (UNCOVERED)(el, [r.left, r.top, r.right, r.bottom]) || [(r.left + r.right) / 2, (r.top + r.bottom) / 2];
    return [p[0] / innerWidth, p[1] / innerHeight];
}""".replace("UNCOVERED", UNCOVERED_POINT_JS)


def _center(dev: Any, expr: str, arg: Any = None) -> tuple[float, float] | None:
    """Normalised centre of the element the JS expression ``expr`` (seeing ``a`` = ``arg``) yields."""
    return dev.evaluate(_CENTER_JS % expr, arg)


def _click(dev: Any, expr: str, arg: Any = None) -> Plan:
    """Scroll the element into sight with Scroll actions if needed, then click it."""
    for _ in range(6):
        c = _center(dev, expr, arg)
        if c is None:
            raise LookupError(f"oracle: no element for {expr!r} ({arg!r})")
        x, y = c
        if 0.0 <= x <= 1.0 and 0.0 <= y <= 1.0:
            yield Click(x, y)
            return
        yield Scroll("down" if y > 1 else "up", amount=min(1.0, max(0.2, abs(y - 0.5))))
    raise LookupError(f"oracle: could not scroll {expr!r} into view")


def _by_text(selector: str) -> str:
    """JS: the first ``selector`` element whose trimmed text equals ``a``."""
    return (f"[...document.querySelectorAll({selector!r})]"
            ".find(e => e.textContent.trim() === a)")


def _quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def _bold(dev: Any) -> list[str]:
    return dev.evaluate("() => [...document.querySelectorAll('#query .bold')].map(e => e.textContent)")


def _type_into(dev: Any, expr: str, text: str) -> Plan:
    c = _center(dev, expr)
    if c is None:
        raise LookupError(f"oracle: no field {expr!r}")
    yield Type(text, x=c[0], y=c[1])


SUBMIT = "document.querySelector('#subbtn')"


@oracle("click-test")
def _click_test(dev: Any, utt: str) -> Plan:
    yield from _click(dev, SUBMIT)


@oracle("click-test-2")
def _click_test_2(dev: Any, utt: str) -> Plan:
    label = re.search(r"button (\w+)", utt).group(1)
    yield from _click(dev, _by_text("button"), label)


@oracle("click-button-sequence")
def _click_button_sequence(dev: Any, utt: str) -> Plan:
    for label in re.findall(r"button (\w+)", utt):
        yield from _click(dev, _by_text("button"), label)


@oracle("click-button")
def _click_button(dev: Any, utt: str) -> Plan:
    yield from _click(dev, _by_text("#area button"), _quoted(utt)[0])


@oracle("click-link")
def _click_link(dev: Any, utt: str) -> Plan:
    yield from _click(dev, _by_text("#area .alink"), _quoted(utt)[0])


@oracle("click-dialog")
def _click_dialog(dev: Any, utt: str) -> Plan:
    yield from _click(dev, "document.querySelector('.ui-dialog-titlebar button')")


@oracle("click-dialog-2")
def _click_dialog_2(dev: Any, utt: str) -> Plan:
    label = _quoted(utt)[0]
    if label == "x":
        yield from _click(dev, "document.querySelector('.ui-dialog-titlebar button')")
    else:
        yield from _click(dev, _by_text(".ui-dialog-buttonpane button"), label)


def _checkbox_names(utt: str) -> list[str]:
    m = re.match(r"Select (.*) and click Submit\.", utt)
    body = m.group(1) if m else ""
    return [] if body == "nothing" else [s.strip() for s in body.split(",") if s.strip()]


_LABEL_INPUT = ("[...document.querySelectorAll('#area label')]"
                ".find(l => l.textContent.trim() === a)?.querySelector('input')")


@oracle("click-checkboxes", "click-checkboxes-large", "click-checkboxes-transfer")
def _click_checkboxes(dev: Any, utt: str) -> Plan:
    wanted = set(_checkbox_names(utt))
    labels = dev.evaluate("() => [...document.querySelectorAll('#area label')]"
                          ".map(l => [l.textContent.trim(), l.querySelector('input').checked])")
    for name, checked in labels:
        if (name in wanted) != checked:
            yield from _click(dev, _LABEL_INPUT, name)
    yield from _click(dev, SUBMIT)


@oracle("click-option")
def _click_option(dev: Any, utt: str) -> Plan:
    name = re.match(r"Select (.*) and click Submit\.", utt).group(1)
    yield from _click(dev, _LABEL_INPUT, name)
    yield from _click(dev, SUBMIT)


@oracle("click-tab")
def _click_tab(dev: Any, utt: str) -> Plan:
    n = re.search(r"Tab #(\d)", utt).group(1)
    yield from _click(dev, _by_text("#area ul li a"), f"Tab #{n}")


@oracle("enter-text", "enter-text-2", "enter-text-dynamic")
def _enter_text(dev: Any, utt: str) -> Plan:
    text = _bold(dev)[0]
    if "upper case" in utt:
        text = text.upper()
    elif "lower case" in utt:
        text = text.lower()
    yield from _type_into(dev, "document.querySelector('#tt')", text)
    yield from _click(dev, SUBMIT)


@oracle("enter-password")
def _enter_password(dev: Any, utt: str) -> Plan:
    password = _bold(dev)[0]
    for field in ("#password", "#verify"):
        yield from _type_into(dev, f"document.querySelector('{field}')", password)
    yield from _click(dev, SUBMIT)


@oracle("login-user")
def _login_user(dev: Any, utt: str) -> Plan:
    user, password = _quoted(utt)[:2]
    yield from _type_into(dev, "document.querySelector('#username')", user)
    yield from _type_into(dev, "document.querySelector('#password')", password)
    yield from _click(dev, SUBMIT)


@oracle("focus-text")
def _focus_text(dev: Any, utt: str) -> Plan:
    yield from _click(dev, "document.querySelector('#tt')")


@oracle("focus-text-2")
def _focus_text_2(dev: Any, utt: str) -> Plan:
    pos = {"1st": 1, "2nd": 2, "3rd": 3}[re.search(r"the (\w+) input", utt).group(1)]
    yield from _click(dev, f"document.querySelector('#tt{pos}')")


@oracle("choose-list")
def _choose_list(dev: Any, utt: str) -> Plan:
    target = re.match(r"Select (.*) from the list and click Submit\.", utt).group(1)
    # type the option's text into the <select>: the tap focuses it and the keys select the option
    # whose text they spell (its native popup does not draw headless); an action on a listed
    # element, as the marks format writes it (type into the list, by the option's name)
    yield from _type_into(dev, "document.querySelector('#options')", target)
    yield from _click(dev, "document.querySelector('#area button')")


@oracle("use-autocomplete", "use-autocomplete-nodelay")
def _use_autocomplete(dev: Any, utt: str) -> Plan:
    bold = _bold(dev)
    start, end = bold[0], (bold[1] if len(bold) > 1 else "")
    items = dev.evaluate("() => ITEMS")
    answer = next(i for i in items if i.startswith(start) and i.endswith(end))
    yield from _type_into(dev, "document.querySelector('#tags')", start)
    # the menu opens after the widget's delay; the device settled on that timer
    item = _center(dev, _by_text(".ui-autocomplete li"), answer)
    if item is not None and 0 <= item[1] <= 1:
        yield Click(*item)
    else:
        yield Type(answer[len(start):])
        yield Key("Escape")
    yield from _click(dev, SUBMIT)


@oracle("click-collapsible", "click-collapsible-nodelay")
def _click_collapsible(dev: Any, utt: str) -> Plan:
    yield from _click(dev, "document.querySelector('#area h3')")
    yield from _click(dev, SUBMIT)


@oracle("click-widget")
def _click_widget(dev: Any, utt: str) -> Plan:
    kind = _quoted(utt)[0]
    yield from _click(dev, "document.querySelector(`#area [data-type=\"${a}\"]`)", kind)


@oracle("grid-coordinate")
def _grid_coordinate(dev: Any, utt: str) -> Plan:
    coords = re.search(r"\(-?\d+,-?\d+\)", utt).group(0)
    yield from _click(dev, "[...document.querySelectorAll('circle.plot-point')].find(c => c.id === a)", coords)


@oracle("enter-date")
def _enter_date(dev: Any, utt: str) -> Plan:
    month, day, year = _bold(dev)[0].split("/")
    # an <input type=date> takes digits segment by segment (en-US: mm dd yyyy) from the
    # segment clicked: click the month segment at the field's left end
    x, y = dev.evaluate("() => { const r = document.querySelector('#tt').getBoundingClientRect();"
                        " return [(r.left + 8) / innerWidth, (r.top + r.bottom) / 2 / innerHeight]; }")
    yield Type(month + day + year, x=x, y=y)
    yield from _click(dev, SUBMIT)


@oracle("search-engine")
def _search_engine(dev: Any, utt: str) -> Plan:
    query, pos = _bold(dev)[:2]
    index = int(re.match(r"\d+", pos).group(0)) - 1
    yield from _type_into(dev, "document.querySelector('#search-text')", query)
    yield from _click(dev, "document.querySelector('#search')")
    page = index // 3 + 1
    if page > 1:
        yield from _click(dev, _by_text("#pagination a"), str(page))
    yield from _click(dev, "document.querySelectorAll('#page-content a.search-title')[a]", index % 3)


@oracle("identify-shape")
def _identify_shape(dev: Any, utt: str) -> Plan:
    # common/shapes.js draws letters and digits as <text>, shapes as rect/circle/polygon
    kind = dev.evaluate("""() => {
        const el = document.querySelector('#area_svg').firstElementChild;
        const tag = el.tagName.toLowerCase();
        if (tag === 'text') return /^[0-9]$/.test(el.textContent.trim()) ? 'digit' : 'letter';
        return {rect: 'rectangle', circle: 'circle', polygon: 'triangle'}[tag];
    }""")
    yield from _click(dev, "document.querySelector(`#area-buttons button[data-type=\"${a}\"]`)", kind)


#: JS: whether a ``.alink`` whose text is ``a`` is visible now (in the open tab or section)
_LINK_SHOWN = ("[...document.querySelectorAll('#area .alink')]"
               ".find(e => e.textContent.trim() === a && e.getClientRects().length > 0)")


@oracle("click-tab-2", "click-tab-2-hard", "click-tab-2-easy", "click-tab-2-medium")
def _click_tab_2(dev: Any, utt: str) -> Plan:
    """What a person without the page's source does: look in the open tab; if the link is not
    there, open the tabs one after the other, from the left, until it shows."""
    target = _quoted(utt)[0]
    tabs = dev.evaluate("() => [...document.querySelectorAll('#area ul li a')].map(a => a.textContent.trim())")
    for tab in [None, *tabs]:
        if tab is not None:
            if dev.evaluate("(t) => [...document.querySelectorAll('#area ul li')].find("
                            "li => li.textContent.trim() === t)?.getAttribute('aria-selected') === 'true'", tab):
                continue  # the tab already open was looked at first
            yield from _click(dev, _by_text("#area ul li a"), tab)
        if dev.evaluate(f"(a) => !!({_LINK_SHOWN})", target):
            yield from _click(dev, _LINK_SHOWN, target)
            return
    raise LookupError(f"oracle: no tab shows the link {target!r}")


@oracle("click-collapsible-2", "click-collapsible-2-nodelay")
def _click_collapsible_2(dev: Any, utt: str) -> Plan:
    """Open the sections one after the other, from the top, until the link shows; click it."""
    target = _quoted(utt)[0]
    sections = dev.evaluate("() => [...document.querySelectorAll('#area h3')].map(h => h.textContent.trim())")
    for section in sections:
        yield from _click(dev, _by_text("#area h3"), section)
        if dev.evaluate(f"(a) => !!({_LINK_SHOWN})", target):
            yield from _click(dev, _LINK_SHOWN, target)
            return
    raise LookupError(f"oracle: no section shows the link {target!r}")


@oracle("login-user-popup")
def _login_user_popup(dev: Any, utt: str) -> Plan:
    """As ``login-user``; a field may open a popup when it takes focus (the typing then fails: the
    popup disables the form): dismiss it with Cancel and type again."""
    user, password = _quoted(utt)[:2]
    for field, text in (("#username", user), ("#password", password)):
        yield from _type_into(dev, f"document.querySelector('{field}')", text)
        if dev.evaluate("() => !!document.querySelector('#popup-cancel')"):
            yield from _click(dev, "document.querySelector('#popup-cancel')")
            yield from _type_into(dev, f"document.querySelector('{field}')", text)
    yield from _click(dev, SUBMIT)
