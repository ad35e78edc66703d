"""Replies of today's open GUI models, as their own repositories and issue threads show them.

Each table holds model text copied from the source named in the comment above it (only
whitespace inside JSON may differ), and what the format must make of it: an action in
normalised coordinates or a ParseError code.
"""

from __future__ import annotations

import pytest

from guiagent.types import (
    Answer, Click, DoubleClick, Drag, Finish, Hover, Key, LongPress, NavigateBack, NavigateHome, OpenApp,
    ParseError, RightClick, Scroll, Type, Wait,
)

from grounding import get_format
from grounding.coords import smart_resize
from tests.grounding.test_formats import _check

DESK = (1920, 1080)

# ----------------------------------------------------------------------------- UI-TARS-2 (Seed XML)

# bytedance/UI-TARS-desktop: multimodal/gui-agent/action-parser/test/xmlParser.test.ts (cases 3, 4, 7, 8, 9,
# 10, 15, 18), test/xmlFormatParserTagValues.test.ts (<answer>), and the Seed parser docstring of the
# MobileWorld Seed agent (a missing </parameter>; bare "x y" points inside <tool_call>).
UITARS2_REAL = [
    ("<thinkt>To find shrimp and crab recipes, I'll first open the web browser to search for relevant "
     "recipes. "
     "The browser icon is typically located in the taskbar or applications menu. I'll click on the "
     "browser icon "
     "to launch it and then proceed to search for shrimp and crab recipes.</thinkt><seed:tool_call>\n"
     "<function=click>\n<parameter=point><point>17 58</point></parameter>\n</function>\n</seed:tool_call>",
     Click(0.017, 0.058)),
    ("<thinkt>The search bar is now active, so I'll type \"shrimp and crab recipes\" into it to find "
     "relevant "
     "recipes.</thinkt><seed:tool_call>\n<function=type>\n<parameter=content>shrimp and crab "
     "recipes</parameter>\n"
     "</function>\n</seed:tool_call>", Type("shrimp and crab recipes")),
    ("<think_never_used>用户想要用GUI Action查一下天气，我来想一想该做哪些步骤，首先要打开浏览器。找到了浏览器图标，"
     "我现在就双击打开它吧！</think_never_used><seed:tool_call>\n<function=left_double>\n"
     "<parameter=point><point>18 58</point></parameter>\n</function>\n</seed:tool_call>"
     "", DoubleClick(0.018, 0.058)),
    ("<thinkt>用户想要输出一个wait gui action，不要带任何参数。</thinkt><seed:tool_call>\n<function=wait>\n</function>\n"
     "</seed:tool_call>", Wait()),
    ("<thinkt>No funtion</thinkt><seed:tool_call>\n</seed:tool_call>", "malformed"),
    ("<thinkt>需要模拟向上滚动的动作，使用scroll工具，direction设为up，point可以随便选一个页面内的坐标，比如"
     "<point>500 500</point>。这样就能完成向上滚动的操作了。</thinkt><seed:tool_call>\n<function=scroll>\n"
     "<parameter=direction>up</parameter>\n<parameter=point><point>500 500</point></parameter>\n</function>\n"
     "</seed:tool_call>", Scroll("up", 0.5, 0.5)),
    ("<thinkt>需要模拟向上滚动的动作</thinkt>\n<seed:tool_call>\n<function name='scroll'>\n"
     "<parameter name='direction'>up</parameter>\n<parameter name='point'>500 500</parameter>\n</function>\n"
     "</seed:tool_call>", Scroll("up", 0.5, 0.5)),
    ("<thinkt>需要模拟向上滚动的动作</thinkt><seed:tool_call>\n<function=scroll>\n<parameter=direction>up</parameter>\n"
     "<parameter=point><point>500 500</point></parameter>\n</function>\n<function=type>\n"
     "<parameter=content>hello</parameter>\n<parameter=point><point>200 126</point></parameter>\n"
     "</function>\n"
     "<function=wait>\n</function>\n</seed:tool_call>", "multiple_actions"),
    ("<answer>42</answer>", Answer("42")),
    ("<answer>0</answer>", Answer("0")),
    ("<tool_call>\n<function=click>\n<parameter=point>500 300</parameter>\n</function>\n</tool_call>",
     Click(0.5, 0.3)),
    ("<tool_call><function=scroll><parameter=point><point>486 500</point><parameter=direction>"
     "down</parameter>"
     "</function></tool_call>", Scroll("down", 0.486, 0.5)),
]

# the Seed GUI action space (UI-TARS-desktop multimodal/seed-gui-agent/src/constants.ts and the computer-use
# prompt of the Doubao UI-TARS API) in XML form, plus near misses
UITARS2_SPACE = [
    ("<seed:tool_call><function=right_single><parameter=point><point>250 750</point></parameter></function>"
     "</seed:tool_call>", RightClick(0.25, 0.75)),
    ("<seed:tool_call><function=hover><parameter=point>(100,900)</parameter></function></seed:tool_call>",
     Hover(0.1, 0.9)),
    ("<seed:tool_call><function=long_press><parameter=point><point>100 900</point></parameter></function>"
     "</seed:tool_call>", LongPress(0.1, 0.9)),
    ("<seed:tool_call><function=drag><parameter=start_point><point>458 328</point></parameter>"
     "<parameter=end_point><point>350 309</point></parameter></function></seed:tool_call>",
     Drag(0.458, 0.328, 0.35, 0.309)),
    ("<seed:tool_call><function=type><parameter=content>hello\\n</parameter><parameter=point><point>200 126"
     "</point></parameter></function></seed:tool_call>", Type("hello", 0.2, 0.126, submit=True)),
    ("<seed:tool_call><function=hotkey><parameter=key>ctrl c</parameter></function></seed:tool_call>",
     Key("Control+c")),
    ("<seed:tool_call><function=press_back></function></seed:tool_call>", NavigateBack()),
    ("<seed:tool_call><function=press_home></function></seed:tool_call>", NavigateHome()),
    ("<seed:tool_call><function=open_app><parameter=app_name>Settings</parameter></function>"
     "</seed:tool_call>",
     OpenApp("Settings")),
    ("<seed:tool_call><function=finished><parameter=content>The total is $42</parameter></function>"
     "</seed:tool_call>", Answer("The total is $42")),
    ("<seed:tool_call><function=finished><parameter=content>没有找到</parameter><parameter=status>失败</parameter>"
     "</function></seed:tool_call>", Finish("failure", "没有找到")),
    ("<seed:tool_call><function=finished></function></seed:tool_call>", Finish("success")),
    ("<seed:tool_call><function=call_user><parameter=content>需要登录</parameter></function></seed:tool_call>",
     Finish("failure", "需要登录")),
    ("I will click the browser icon.", "no_action"),
    ("<seed:tool_call><function=tap><parameter=point>1 2</parameter></function></seed:tool_call>",
     "unknown_action"),
    ("<seed:tool_call><function=click><parameter=point>(x1,y1)</parameter></function></seed:tool_call>",
     "bad_arguments"),
    ("<seed:tool_call><function=click><parameter=button>left</parameter></function></seed:tool_call>",
     "bad_arguments"),
    ("<seed:tool_call><function=click>garbage<parameter=point>1 2</parameter></function></seed:tool_call>",
     "bad_arguments"),
    ("<seed:tool_call><function=click><parameter=point><point>1001 5</point></parameter></function>"
     "</seed:tool_call>", "bad_coordinates"),
    ("<seed:tool_call><function=scroll><parameter=direction>sideways</parameter></function></seed:tool_call>",
     "bad_arguments"),
    ("<seed:tool_call>\n<function=click>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=wait>\n"
     "</function>\n</seed:tool_call>", "multiple_actions"),
]


@pytest.mark.parametrize("text,expected", UITARS2_REAL + UITARS2_SPACE)
def test_uitars2_replies(text, expected):
    _check(get_format("uitars2").parse(text, DESK), expected)


def test_uitars2_thought_and_printed_form():
    fmt = get_format("uitars2")
    assert fmt.thought(UITARS2_REAL[2][0]).startswith("用户想要用GUI Action")
    assert fmt.format(DoubleClick(0.018, 0.058), DESK, "open it") == (
        "<think>open it</think>\n<seed:tool_call>\n<function=left_double>\n"
        "<parameter=point><point>18 58</point></parameter>\n</function>\n</seed:tool_call>")


# ----------------------------------------------------------------------------- GUI-Owl / Mobile-Agent-v3

OWL_PHONE = (1080, 2340)  # the screenshots of X-PLUG/MobileAgent issues #180 and #182
_oh, _ow = smart_resize(2340, 1080, 28, 3136, 10035200)  # Mobile-Agent-v3's resize limits -> 1092 x 2352


def _owl(x: int, y: int) -> tuple[float, float]:
    return x / _ow, y / _oh


# X-PLUG/MobileAgent: Mobile-Agent-v3/android_world_v3/android_world/agents/function_call_mobile_answer.py
# (the generated-text example), .../agents/gui_owl.py (its reply layout: <thinking>, the tool call, then
# <conclusion>; "tap" rewritten to "click"; the terminate call it issues after an answer) and issue #182
# (a Mobile-Agent-v3 operator reply, "Action: {...}").
GUIOWL_REAL = [
    ('balabala<tool_call>\n{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [100, '
     '200]}}\n'
     "</tool_call>", Click(*_owl(100, 200))),
    ("<thinking>\nThe user wants to open the Amap app. The icon is at the bottom left corner of the screen.\n"
     '</thinking>\n<tool_call>\n{"name": "mobile_use", "arguments": {"action": "tap", "coordinate": '
     '[254, 830]}}\n'
     "</tool_call>\n<conclusion>\nTap the Amap icon to open the app.\n</conclusion>", Click(*_owl(254, 830))),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "terminate", "status": "success"}}\n'
     '</tool_call>',
     Finish("success")),
    ("### Thought ###\n用户请求打开京东App。根据当前屏幕显示，京东App图标位于“拼多多”和“淘宝”图标之间。因此，下一步操作应该是点击"
     "京东App的图标来打开它。\n\n### Action ###\n{\"action\": \"click\", \"coordinate\": [254, 830]}\n\n"
     "### Description ###\n点击京东App的图标以打开该应用程序。", Click(*_owl(254, 830))),
    ('Action: {"action": "click", "coordinate": [254, 830]}', Click(*_owl(254, 830))),
    ('{"action": "system_button", "button": "Home"}', NavigateHome()),
    ('{"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]}',
     "ok-swipe"),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "open", "text": "clock"}}\n</tool_call>',
     OpenApp("clock")),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "open_app", "text": "markor"}}\n'
     '</tool_call>',
     OpenApp("markor")),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "answer", "text": "3"}}\n</tool_call>',
     Answer("3")),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "long_press", "coordinate": [546, 1176], '
     '"time": 2}}\n</tool_call>', LongPress(*_owl(546, 1176), duration_ms=2000)),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "type", "text": "Hello\\n"}}\n</tool_call>',
     Type("Hello", submit=True)),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [1093, 10]}}\n'
     "</tool_call>", "bad_coordinates"),
    ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "double_click", "coordinate": [1, 2]}}\n'
     "</tool_call>", "unknown_action"),
]


@pytest.mark.parametrize("text,expected", GUIOWL_REAL)
def test_guiowl_replies(text, expected):
    got = get_format("guiowl").parse(text, OWL_PHONE)
    if expected == "ok-swipe":
        assert not isinstance(got, ParseError) and got.kind == "swipe"
        assert (got.x1, got.y1, got.x2, got.y2) == pytest.approx((*_owl(540, 1800), *_owl(540, 600)))
    else:
        _check(got, expected)


def test_guiowl_thought_frame_and_printed_form():
    fmt = get_format("guiowl")
    assert fmt.thought(GUIOWL_REAL[1][0]).startswith("The user wants to open the Amap app")
    assert fmt.thought(GUIOWL_REAL[3][0]).startswith("用户请求打开京东App")
    assert fmt.frame.extent(OWL_PHONE) == (1092, 2352)
    assert fmt.format(Click(0.5, 0.5), OWL_PHONE, "tap it") == (
        '<thinking>\ntap it\n</thinking>\n<tool_call>\n{"name": "mobile_use", "arguments": {"action": '
        '"click", '
        '"coordinate": [546, 1176]}}\n</tool_call>')
    assert "The screen's resolution is 1092x2352." in fmt.system_prompt(OWL_PHONE)


# ----------------------------------------------------------------------------- MAI-UI

PHONE = (1080, 2400)

# Tongyi-MAI/MAI-UI: src/mai_naivigation_agent.py (the reply layout its parser expects and that it writes
# back into the history: <thinking>, then compact JSON in <tool_call>; coordinates / 999; thinking models'
# bare "</think>") and src/prompt.py (the action space examples, e.g. {"action": "open", "text": "微信"}).
# The repository publishes no captured replies, so these are the shapes its own code reads and writes.
MAIUI_REAL = [
    ('<thinking>\n点击搜索框\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"click",'
     '"coordinate":[499,99]}}\n</tool_call>', Click(499 / 999, 99 / 999)),
    ('用户要打开微信，直接使用open动作。</think>\n<tool_call>\n{"name": "mobile_use", "arguments": {"action": "open", '
     '"text": "微信"}}\n</tool_call>', OpenApp("微信")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"AWAKE",'
     '"text":"淘宝"}}\n'
     "</tool_call>", OpenApp("淘宝")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"swipe",'
     '"direction":"up"}}\n</tool_call>', Scroll("down")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"swipe",'
     '"direction":"left","coordinate":[500,300]}}\n</tool_call>', Scroll("right", 500 / 999, 300 / 999)),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"drag",'
     '"start_coordinate":[100,200],"end_coordinate":[900,200]}}\n</tool_call>',
     Drag(100 / 999, 200 / 999, 900 / 999, 200 / 999)),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"system_button",'
     '"button":"back"}}\n</tool_call>', NavigateBack()),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"system_button",'
     '"button":"enter"}}\n</tool_call>', Key("Enter")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"wait"}}\n'
     '</tool_call>',
     Wait()),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"terminate",'
     '"status":"fail"}}\n</tool_call>', Finish("failure")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"answer",'
     '"text":"明天晴"}}\n</tool_call>', Answer("明天晴")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"ask_user",'
     '"text":"请问要发给谁？"}}\n</tool_call>', Finish("failure", "请问要发给谁？")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"INFO",'
     '"text":"哪个地址？"}}\n</tool_call>', Finish("failure", "哪个地址？")),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"double_click",'
     '"coordinate":[0,999]}}\n</tool_call>', DoubleClick(0.0, 1.0)),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"click",'
     '"coordinate":[400,100,600,300]}}\n</tool_call>', Click(500 / 999, 200 / 999)),  # a box: its centre
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"click",'
     '"coordinate":[1000,5]}}\n</tool_call>', "bad_coordinates"),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"swipe",'
     '"direction":"diagonal"}}\n</tool_call>', "bad_arguments"),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mobile_use","arguments":{"action":"click"}}\n'
     '</tool_call>',
     "bad_arguments"),
    ('<thinking>\nx\n</thinking>\n<tool_call>\n{"name":"mcp_search","arguments":{"query":"weather"}}\n'
     '</tool_call>',
     "unknown_action"),
]


@pytest.mark.parametrize("text,expected", MAIUI_REAL)
def test_maiui_replies(text, expected):
    _check(get_format("maiui").parse(text, PHONE), expected)


def test_maiui_thought_and_printed_form():
    fmt = get_format("maiui")
    assert fmt.thought(MAIUI_REAL[0][0]) == "点击搜索框"
    assert fmt.thought(MAIUI_REAL[1][0]) == "用户要打开微信，直接使用open动作。"
    assert fmt.format(Scroll("down"), PHONE, "see more") == (
        '<thinking>\nsee more\n</thinking>\n<tool_call>\n{"name": "mobile_use", "arguments": {"action": '
        '"swipe", '
        '"direction": "up"}}\n</tool_call>')
    assert fmt.format(Click(1.0, 0.5), PHONE).count("[999, 500]") == 1
    assert '{"action": "system_button", "button": "back, home, menu or enter"}' in fmt.system_prompt()
