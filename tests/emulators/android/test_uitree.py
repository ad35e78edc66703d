"""Accessibility XML (checked-in uiautomator dumps) -> typed nodes and compact text."""

from __future__ import annotations

import pytest

from emulators.android.uitree import UITreeError, parse_ui_tree, ui_tree_text

from .conftest import FIXTURES


def test_settings_dump_nodes():
    nodes = parse_ui_tree((FIXTURES / "settings_home.xml").read_bytes())
    by_text = {n.text: n for n in nodes if n.text}
    net = by_text["Network & internet"]  # &amp; decoded
    assert net.bounds == (198, 935, 700, 998)
    assert net.center == (449, 966)
    assert net.resource_id == "android:id/title" and net.package == "com.android.settings"
    switch = next(n for n in nodes if n.short_class == "Switch")
    assert {"checkable", "checked", "clickable"} <= switch.flags
    search = next(n for n in nodes if n.content_desc == "Search settings")
    assert "clickable" in search.flags and search.text == ""
    assert nodes[0].depth == 0 and nodes[0].class_name == "android.widget.FrameLayout"
    assert len(nodes) == 30


def test_settings_dump_text_drops_layout_and_indents():
    text = ui_tree_text((FIXTURES / "settings_home.xml").read_text())
    lines = text.splitlines()
    assert lines[0] == "[2] FrameLayout id=content bounds=[0,88][1080,2284]"
    assert '        [9] TextView "Network & internet" id=title bounds=[198,935][700,998]' in lines
    assert "[28] Switch id=switch_widget clickable checkable checked bounds=[880,1990][1036,2090]" in text
    assert '[4] Button desc="Search settings" clickable' in text
    # the outer FrameLayout/LinearLayout carry nothing and are dropped
    assert "[0] " not in text and "[1] " not in text


def test_markor_dump_escapes_and_flags():
    text = ui_tree_text((FIXTURES / "markor_editor.xml").read_text())
    assert '[3] TextView "Café \\"notes\\" & <plans>"' in text
    assert '[4] Button "Save" disabled bounds=[880,100][1060,220]' in text
    # a multi-line field stays on one line
    assert '[5] EditText "line one line two" id=document__fragment__edit__highlighting_editor ' \
           'clickable long-clickable scrollable focused' in text
    assert "[7] EditText id=password clickable password" in text


def test_appium_page_source_and_fake_app_format():
    # Appium/fake-driver XML names elements by class and may lack bounds
    text = ui_tree_text((FIXTURES / "appium_fake_app.xml").read_text())
    assert '[1] TextView "Notes" id=title bounds=[40,100][600,180]' in text
    assert "[3] Button \"Save\" id=save clickable" in text
    src = ('<?xml version="1.0"?><hierarchy index="0" class="hierarchy" rotation="0" width="1080" '
           'height="2337"><android.widget.FrameLayout index="0" package="p" '
           'class="android.widget.FrameLayout" '
           'text="" clickable="false" bounds="[0,0][1080,2337]" displayed="true"><android.widget.Button '
           'index="0" package="p" class="android.widget.Button" text="OK" clickable="true" '
           'bounds="[10,20][110,70]"/></android.widget.FrameLayout></hierarchy>')
    assert ui_tree_text(src) == '[1] Button "OK" clickable bounds=[10,20][110,70]'


@pytest.mark.parametrize("bad", [
    "ERROR: could not get idle state.",
    "",
    "<hierarchy><node bounds='[0,0][1,1]'>",
])
def test_not_a_dump_raises_typed_error(bad):
    with pytest.raises(UITreeError):
        parse_ui_tree(bad)


def test_dump_with_shell_noise_before_xml():
    xml = (FIXTURES / "markor_editor.xml").read_text()
    noisy = "UI hierchary dumped to: /dev/tty\n" + xml
    assert parse_ui_tree(noisy) == parse_ui_tree(xml)


# ----------------------------------------------------------------------------- marks

from emulators.android.uitree import role_of, ui_marks  # noqa: E402


def test_marks_of_a_real_settings_dump():
    marks = ui_marks(parse_ui_tree((FIXTURES / "settings_home.xml").read_bytes()), (1080, 2400))
    assert [(m.id, m.role, m.name) for m in marks] == [
        (0, "text", "Settings"), (1, "button", "Search settings"),
        (2, "clickable", "Network & internet Mobile, Wi‑Fi, hotspot"),
        (3, "clickable", "Connected devices Bluetooth, pairing"), (4, "clickable", "Apps Recent apps, default apps"),
        (5, "clickable", "Display Dark theme, font size, brightness"),
        (6, "text", "Wi-Fi"),
        (7, "switch", "Wi-Fi"),  # the row around it holds a control: the switch is the mark, named by the row
    ]
    assert marks[7].states == ("checked",) and all(m.states == () for m in marks[:7])  # checkable and checked
    assert marks[1].box == pytest.approx((912 / 1080, 374 / 2400, 1044 / 1080, 506 / 2400), abs=1e-5)
    # the title/summary texts inside the tappable rows are those rows' names, not marks of their own
    assert "Network & internet" not in [m.name for m in marks]


def test_marks_of_the_appium_fake_app_and_markor():
    marks = ui_marks(parse_ui_tree((FIXTURES / "appium_fake_app.xml").read_text()), (1080, 2400))
    assert [(m.role, m.name) for m in marks] == [("text", "Notes"), ("textbox", "note_body"), ("button", "Save"),
                                                  ("checkbox", "Pin note")]
    markor = ui_marks(parse_ui_tree((FIXTURES / "markor_editor.xml").read_text()), (1080, 2400))
    assert ("button", "Navigate up") in [(m.role, m.name) for m in markor]
    assert all(0 <= v <= 1 for m in markor for v in m.box)


@pytest.mark.parametrize("cls, flags, role", [
    ("android.widget.Button", (), "button"), ("com.google.android.material.button.MaterialButton", (), "button"),
    ("android.widget.ImageButton", (), "button"), ("android.widget.EditText", (), "textbox"),
    ("androidx.appcompat.widget.AppCompatEditText", (), "textbox"), ("android.widget.RadioButton", (), "radio"),
    ("android.widget.Switch", (), "switch"), ("androidx.appcompat.widget.SwitchCompat", (), "switch"),
    ("android.widget.CheckBox", (), "checkbox"), ("android.widget.SeekBar", (), "slider"),
    ("android.widget.TextView", (), "text"), ("android.widget.LinearLayout", ("clickable",), "clickable"),
    ("android.view.View", (), "text"),
])
def test_roles_from_widget_classes(cls, flags, role):
    from emulators.android.uitree import UINode

    assert role_of(UINode(0, 0, cls, flags=frozenset(flags))) == role


def test_marks_skip_off_screen_and_boundless_nodes_and_survive_deep_trees():
    xml = ('<hierarchy><node class="android.widget.Button" text="Off" clickable="true" bounds="[0,3000][100,3100]"/>'
           '<node class="android.widget.Button" text="No bounds" clickable="true"/>'
           '<node class="android.widget.Button" text="On" clickable="true" bounds="[-50,0][100,100]"/></hierarchy>')
    assert [(m.name, m.box) for m in ui_marks(parse_ui_tree(xml), (1000, 2000))] == [("On", (0.0, 0.0, 0.1, 0.05))]
    deep = "<hierarchy>" + '<node class="android.widget.FrameLayout" bounds="[0,0][10,10]">' * 600 \
        + '<node class="android.widget.Button" text="Deep" clickable="true" bounds="[0,0][10,10]"/>' \
        + "</node>" * 600 + "</hierarchy>"
    assert [m.name for m in ui_marks(parse_ui_tree(deep), (10, 10))] == ["Deep"]
    with pytest.raises(ValueError):
        ui_marks([], (0, 10))


def test_marks_carry_checked_selected_and_disabled():
    xml = ('<hierarchy>'
           '<node class="android.widget.CheckBox" text="Sync" checkable="true" checked="true" clickable="true" '
           'bounds="[0,0][100,100]"/>'
           '<node class="android.widget.CheckBox" text="Backup" checkable="true" checked="false" clickable="true" '
           'bounds="[0,100][100,200]"/>'
           '<node class="android.widget.TextView" text="Tab" selected="true" clickable="true" bounds="[0,200][100,300]"/>'
           '<node class="android.widget.Button" text="Send" enabled="false" clickable="true" bounds="[0,300][100,400]"/>'
           '</hierarchy>')
    marks = ui_marks(parse_ui_tree(xml), (100, 400))
    assert [(m.name, m.states) for m in marks] == [("Sync", ("checked",)), ("Backup", ()), ("Tab", ("selected",)),
                                                   ("Send", ("disabled",))]


FAB_OVER_LIST = (
    '<hierarchy>'
    '<node class="android.widget.FrameLayout" bounds="[0,0][1000,2000]">'
    '<node class="androidx.recyclerview.widget.RecyclerView" scrollable="true" bounds="[0,0][1000,2000]">'
    '<node class="android.widget.LinearLayout" clickable="true" bounds="[0,1700][1000,1900]">'
    '<node class="android.widget.TextView" text="Alice" bounds="[40,1700][600,1900]"/></node>'
    '<node class="android.widget.LinearLayout" clickable="true" bounds="[0,1500][1000,1700]">'
    '<node class="android.widget.TextView" text="Bob" bounds="[40,1500][600,1700]"/></node>'
    '</node>'
    '<node class="android.widget.ImageButton" content-desc="Create contact" clickable="true" '
    'bounds="[300,1650][700,1950]"/>'
    '<node class="android.widget.Button" text="Hidden" clickable="true" bounds="[350,1700][650,1900]"/>'
    '<node class="android.widget.Button" text="Cover" clickable="true" bounds="[300,1650][700,1950]"/>'
    '</node></hierarchy>')


def test_a_mark_whose_centre_a_later_control_covers_is_tapped_where_none_does():
    """Android draws a view over the views before it: the floating button after the list covers the middle of
    the row "Alice"; an element action on the row taps the nearest point of its box nothing covers. A control
    covered whole ("Hidden", under "Cover") keeps its centre; so does a row nothing covers at its centre, a
    later control covering it only in part."""
    from emulators.android.uitree import ui_marks_and_taps

    marks, taps = ui_marks_and_taps(parse_ui_tree(FAB_OVER_LIST), (1000, 2000))
    by = {m.name: m for m in marks}
    assert set(by) == {"Alice", "Bob", "Create contact", "Hidden", "Cover"}
    alice, fab = by["Alice"], by["Create contact"]
    assert fab.contains(*alice.center) and set(taps) == {alice.id}  # "Bob" is covered at its bottom edge only
    x, y = taps[alice.id]
    assert alice.contains(x, y) and not fab.contains(x, y) and not by["Cover"].contains(x, y)
    # the nearest free point: just left or right of the cover, at the row's middle height
    assert abs(y - alice.center[1]) < 0.02 and (x < 0.3 or x > 0.7)
    assert ui_marks(parse_ui_tree(FAB_OVER_LIST), (1000, 2000)) == marks  # the marks alone, the same


def test_real_dumps_have_no_covered_marks():
    """The checked-in dumps (a settings list, the Appium fake app, Markor's editor) draw nothing over a control's
    centre: no tap moves."""
    from emulators.android.uitree import ui_marks_and_taps

    for name, size in (("settings_home.xml", (1080, 2400)), ("appium_fake_app.xml", (1080, 2400)),
                       ("markor_editor.xml", (1080, 2400))):
        marks, taps = ui_marks_and_taps(parse_ui_tree((FIXTURES / name).read_bytes()), size)
        assert marks and taps == {}, name


def test_the_dumps_drawing_order_decides_what_lies_over_what():
    """Where the dump gives each view's drawing order (AndroidX uiautomator, ``drawing-order``), that order, not
    the dump's (accessibility order, by position), says which of two overlapping views is on top: a banner listed
    before the button beneath it but drawn after it covers the button's centre; with the orders the other way
    round, the button is on top and keeps its centre."""
    from emulators.android.uitree import ui_marks_and_taps

    def dump(banner_order, button_order):
        return ('<hierarchy><node class="android.widget.FrameLayout" bounds="[0,0][1000,1000]">'
                f'<node class="android.widget.Button" text="Banner" clickable="true" drawing-order="{banner_order}" '
                'bounds="[0,0][1000,300]"/>'
                f'<node class="android.widget.Button" text="Send" clickable="true" drawing-order="{button_order}" '
                'bounds="[400,200][600,360]"/></node></hierarchy>')

    marks, taps = ui_marks_and_taps(parse_ui_tree(dump(2, 1)), (1000, 1000))
    send = next(m for m in marks if m.name == "Send")
    assert set(taps) == {send.id} and taps[send.id][1] > 0.3  # below the banner's bottom edge
    assert parse_ui_tree(dump(2, 1))[1].drawing_order == 2
    marks, taps = ui_marks_and_taps(parse_ui_tree(dump(1, 2)), (1000, 1000))
    assert taps == {}  # the button drawn last: on top, tapped at its centre
    # without the attribute, the dump's order: the later button is on top
    plain = dump(1, 2).replace(' drawing-order="1"', "").replace(' drawing-order="2"', "")
    assert ui_marks_and_taps(parse_ui_tree(plain), (1000, 1000))[1] == {}
    assert parse_ui_tree(dump("x", "-1"))[1].drawing_order is None  # not a number: the dump's order
