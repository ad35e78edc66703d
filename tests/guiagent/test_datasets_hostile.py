"""Hostile and random input to every importer: one clear line and exit 2, never a traceback, nothing
half-imported; bounded time (hypothesis deadlines) and memory (a child's peak RSS).

Property-based with hypothesis: random JSON values in every field of UI-S1 and GUI-Odyssey records,
random bytes, random ``tf.train.Example`` features for AndroidControl, random rows for our Parquet
and Hugging Face exports. Each reader must give episodes or raise :class:`DatasetError`, nothing else.
"""

import copy
import json
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guiagent.datasets import DatasetError, import_dataset, read_dataset
from tests.guiagent.test_datasets import ac_example, png, write_tfrecord

SETTINGS = settings(max_examples=120, deadline=5000, suppress_health_check=[HealthCheck.too_slow])

json_leaf = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
             | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=8), c, max_size=5),
                          max_leaves=20)
ACTIONS = ["click", "long_press", "swipe", "type", "answer", "key", "open", "system_button", "wait", "terminate", "fly"]
KEYS = ["coordinate", "coordinate2", "bbox", "candidate_bbox", "direction", "text", "button", "time", "status"]


def maybe(value_strategy):
    """A plausible value most of the time (five in six), a random JSON value otherwise, so that examples
    get past the first check and reach every field."""
    return often(value_strategy, json_value)


def often(usual, rare, odds=5):
    """``usual`` ``odds`` times in ``odds + 1``, else ``rare`` (one_of would weigh the two alike)."""
    return st.integers(0, odds).flatmap(lambda i: rare if i == 0 else usual)


coordinate = often(st.lists(st.integers(0, 1100), min_size=2, max_size=2),
                   st.lists(st.integers(-100, 4000) | st.floats(allow_nan=True), max_size=3))
box = often(st.lists(st.integers(0, 2500), min_size=4, max_size=4), st.lists(st.integers(-100, 4000), max_size=5))
action_dict = st.fixed_dictionaries(
    {"action": maybe(st.sampled_from(ACTIONS))},
    optional={"coordinate": maybe(coordinate), "coordinate2": maybe(coordinate), "bbox": maybe(box),
              "candidate_bbox": maybe(st.lists(box, max_size=5)),
              "direction": maybe(st.sampled_from(["up", "down", "left", "right", "sideways"])),
              "text": maybe(st.text(max_size=30)), "button": maybe(st.sampled_from(["Back", "Home", "Enter", ""])),
              "time": maybe(st.floats(allow_nan=True, allow_infinity=True)),
              "status": maybe(st.sampled_from(["success", "fail", "maybe"]))})
uis1_step = st.fixed_dictionaries(
    {"action_content": maybe(action_dict)},
    optional={"check_options": maybe(action_dict), "screenshot": maybe(st.sampled_from(["a.png", "/x/b.png", ""])),
              "step_instruction": maybe(st.text(max_size=30)), "thought": maybe(st.text(max_size=10))})
uis1_episode = st.fixed_dictionaries(
    {"goal": maybe(st.text(max_size=30)), "steps": maybe(st.lists(uis1_step, min_size=1, max_size=4))},
    optional={"is_successful": maybe(st.booleans()), "episode_id": json_value})


pt = st.lists(st.integers(0, 1080), min_size=2, max_size=2)
valid_action = st.one_of(
    st.fixed_dictionaries({"action": st.sampled_from(["click", "long_press"]), "coordinate": pt},
                          optional={"bbox": st.just([10, 10, 500, 600]),
                                    "candidate_bbox": st.lists(st.just([0, 100, 1080, 900]), max_size=3)}),
    st.fixed_dictionaries({"action": st.just("swipe"), "coordinate": pt, "coordinate2": pt}),
    st.fixed_dictionaries({"action": st.just("swipe"), "direction": st.sampled_from(["up", "down", "left", "right"])}),
    st.fixed_dictionaries({"action": st.sampled_from(["type", "answer", "key", "open"]), "text": st.text(max_size=12)}),
    st.fixed_dictionaries({"action": st.just("system_button"), "button": st.sampled_from(["Back", "Home", "Enter"])}),
    st.fixed_dictionaries({"action": st.just("wait"), "time": st.integers(0, 5)}),
    st.fixed_dictionaries({"action": st.just("terminate"), "status": st.sampled_from(["success", "failure"])}),
)
valid_episode = st.fixed_dictionaries({
    "goal": st.text(max_size=20), "is_successful": st.booleans(), "episode_id": st.integers(0, 10**6),
    "steps": st.lists(st.fixed_dictionaries({"action_content": valid_action, "screenshot": st.just("s.png")},
                                            optional={"check_options": valid_action,
                                                      "step_instruction": st.text(max_size=20)}),
                      min_size=1, max_size=4)})


@st.composite
def mutated_episode(draw):
    """A valid episode with one value somewhere replaced by a random JSON value (or left as it is)."""
    ep = copy.deepcopy(draw(valid_episode))  # st.just values are shared between examples
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + (i,))

    walk(ep, ())
    path = draw(st.sampled_from(paths[1:] + [None]))
    if path is None:
        return ep
    node = ep
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = draw(json_value)
    return ep


def _only_dataset_errors(fn):
    """A reader's whole contract: it gives episodes, each a well-formed one (:func:`_an_episode`), or it
    raises :class:`DatasetError` with one line of its own; anything else fails the test."""
    try:
        got = list(fn())
    except DatasetError as e:
        text = str(e).strip()
        assert text and "\n" not in text and "Traceback" not in text, text
        return None
    for t in got:
        _an_episode(t)
    return got


def _an_episode(t) -> None:
    """``t`` is an episode the rest of guiagent can take: a typed trajectory with a text goal, steps in
    order, each a typed action (or a parse error) on a screen with a size and pixels (or a placeholder's
    size), and nothing a JSON file or the store cannot hold (no NaN, no infinity, no object)."""
    from guiagent.types import Action, Observation, Step, TaskSpec, Trajectory

    assert isinstance(t, Trajectory) and isinstance(t.task, TaskSpec), type(t)
    assert isinstance(t.episode_id, str) and t.episode_id and isinstance(t.task.goal, str)
    indices = [s.index for s in t.steps]
    assert all(isinstance(i, int) and i >= 0 for i in indices) and indices == sorted(set(indices)), indices
    for s in t.steps:
        assert isinstance(s, Step) and isinstance(s.observation, Observation)
        w, h = s.observation.size
        assert w > 0 and h > 0, (w, h)
        shot = s.observation.screenshot
        assert shot is None or (isinstance(shot, bytes) and shot), type(shot)
        assert s.action is None or isinstance(s.action, Action), type(s.action)
    data = t.to_dict(include_pixels=False)
    text = json.dumps(data, allow_nan=False)  # ValueError on a NaN or an infinity, TypeError on an object
    assert Trajectory.from_dict(json.loads(text)).to_dict(include_pixels=False) == json.loads(text)


@SETTINGS
@given(st.lists(often(uis1_episode, json_value), min_size=1, max_size=3),
       st.sampled_from(["auto", "1080x2400"]))
def test_uis1_random_records(episodes, placeholders):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.jsonl"
        p.write_text("".join(json.dumps(e) + "\n" for e in episodes))
        _only_dataset_errors(lambda: read_dataset("uis1", p, placeholders=placeholders))


@SETTINGS
@given(st.lists(mutated_episode(), min_size=1, max_size=3), st.sampled_from(["auto", "1080x2400"]))
def test_uis1_valid_records_with_one_field_made_hostile(episodes, placeholders):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.jsonl"
        p.write_text("".join(json.dumps(e) + "\n" for e in episodes))
        got = _only_dataset_errors(lambda: read_dataset("uis1", p, placeholders=placeholders))
        for t in got or ():
            for st_ in t.steps:  # whatever imports has a target the matcher can read
                from rl.match import match_action, step_target

                match_action(st_.action, step_target(st_), size=st_.observation.size)


@SETTINGS
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_uis1_random_bytes(lines):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.jsonl"
        p.write_bytes(b"\n".join(lines))
        _only_dataset_errors(lambda: read_dataset("uis1", p, placeholders="auto"))


odyssey_step = st.fixed_dictionaries(
    {"action": maybe(st.sampled_from(["CLICK", "LONG_PRESS", "SCROLL", "TYPE", "COMPLETE", "IMPOSSIBLE", "HOME",
                                      "BACK", "JUMP"])),
     "screenshot": maybe(st.sampled_from(["e_0.png", "missing.png"])),
     "info": maybe(st.lists(st.lists(st.integers(-10, 1100), max_size=3), max_size=3) | st.text(max_size=10))},
    optional={"ps": json_value, "step": json_value})
odyssey = st.fixed_dictionaries(
    {"episode_id": maybe(st.text(min_size=1, max_size=10)),
     "task_info": maybe(st.fixed_dictionaries({"instruction": maybe(st.text(max_size=20))})),
     "steps": maybe(st.lists(odyssey_step, min_size=1, max_size=4))},
    optional={"device_info": maybe(st.fixed_dictionaries({"w": maybe(st.integers(-5, 5000)),
                                                         "h": maybe(st.integers(-5, 5000))}))})


@SETTINGS
@given(often(odyssey, json_value), st.sampled_from([None, "auto", "90x160"]))
def test_guiodyssey_random_annotations(ann, placeholders):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "annotations").mkdir()
        (Path(d) / "screenshots").mkdir()
        (Path(d) / "screenshots" / "e_0.png").write_bytes(png(90, 160))
        (Path(d) / "annotations" / "e.json").write_text(json.dumps(ann))
        _only_dataset_errors(lambda: read_dataset("guiodyssey", d, placeholders=placeholders))


ac_action = st.fixed_dictionaries(
    {"action_type": maybe(st.sampled_from(["click", "long_press", "scroll", "open_app", "type", "input_text",
                                           "navigate_home", "navigate_back", "wait", "fly"]))},
    optional={"x": maybe(st.integers(-50, 300)), "y": maybe(st.integers(-50, 300)), "text": json_value,
              "app_name": json_value, "direction": maybe(st.sampled_from(["up", "down", "diagonal"]))})


@SETTINGS
@given(st.lists(often(ac_action, json_value), min_size=1, max_size=4), st.booleans(),
       st.sampled_from([0, 0, 0, -1, 1, 2]),
       st.binary(max_size=40))
def test_androidcontrol_random_examples(actions, instr, extra_shots, junk):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "android_control-x"
        raw = [a if not isinstance(a, (dict, list)) else a for a in actions]
        enc = [json.dumps(a).encode() for a in raw]
        write_tfrecord(p, [ac_example(1, enc, instr=instr, n_shots=len(enc) + extra_shots), junk])
        _only_dataset_errors(lambda: read_dataset("androidcontrol", p))


@SETTINGS
@given(st.binary(max_size=300))
def test_androidcontrol_random_bytes(data):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "android_control-y"
        p.write_bytes(data)
        _only_dataset_errors(lambda: read_dataset("androidcontrol", p))


COLS = ["episode_id", "suite", "task_id", "seed", "goal", "step_index", "screenshot", "width", "height", "action",
        "reward", "step_metadata", "task_params", "max_steps", "parse_error", "reward_parts"]
cell = (st.none() | st.integers(-5, 5) | st.text(max_size=12) | st.sampled_from(
    ['{"kind": "click", "x": 0.5, "y": 0.5}', '{"kind": "fly"}', "[[[[", '{"target": {"kind": "click"}}', "1e999"]))


@SETTINGS
@given(st.lists(st.fixed_dictionaries({c: cell for c in COLS}), min_size=1, max_size=4), st.booleans())
def test_parquet_random_rows(rows, real_png):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for r in rows:
        r["screenshot"] = png(4, 4) if real_png else str(r["screenshot"] or "x").encode()
        r["episode_id"] = str(r["episode_id"])
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.parquet"
        cols = {c: pa.array([str(r[c]) if r[c] is not None and c != "screenshot" else r[c] for r in rows])
                for c in COLS}
        pq.write_table(pa.table(cols), p)
        _only_dataset_errors(lambda: read_dataset("parquet", p))


@settings(max_examples=25, deadline=20000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({c: cell for c in COLS}), min_size=1, max_size=3))
def test_hf_random_rows(rows):
    datasets = pytest.importorskip("datasets")
    for r in rows:
        r["screenshot"] = png(4, 4)
        r["episode_id"] = str(r["episode_id"])
        for c in COLS:
            if c != "screenshot" and r[c] is not None:
                r[c] = str(r[c])
    with tempfile.TemporaryDirectory() as d:
        datasets.Dataset.from_list(rows).save_to_disk(str(Path(d) / "hf"))
        _only_dataset_errors(lambda: read_dataset("hf", Path(d) / "hf"))


# -- the bad-input list: one line on stderr, exit 2, nothing written, bounded memory ---------------


def png_header(w: int, h: int) -> bytes:
    """A PNG whose header declares ``w`` x ``h`` pixels (a few bytes of data: a decompression bomb's shape)."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b""))


# the child's own peak RSS: VmHWM of its address space (ru_maxrss would carry the forking parent's over exec)
_CHILD = ("import re, sys\nfrom guiagent.cli.data import main\nrc = main(sys.argv[1:])\n"
          "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
          "print('maxrss_kb', hwm, file=sys.stderr)\nsys.exit(rc)")


def _import(*args):
    p = subprocess.run([sys.executable, "-c", _CHILD, "import", *args], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("maxrss_kb")]
    rss = int(next(ln for ln in p.stderr.splitlines() if ln.startswith("maxrss_kb")).split()[1])
    return p.returncode, lines, rss


def _episode(shot):
    return json.dumps({"goal": "g", "steps": [{"action_content": {"action": "wait", "time": 1}, "screenshot": shot}]})


@pytest.mark.parametrize("case,msg", [
    ("bomb", "declares 2,500,000,000 pixels, more than the 40 Mpx"),
    ("big", "is 12000x12000 (144 Mpx), more than the 40 Mpx"),
    ("deep", "JSON nested too deeply"),
    ("latin1", "not UTF-8 text (byte 0xe9"),
    ("long_line", "line 1 is longer than 64 MiB"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, case, msg):
    src = tmp_path / f"{case}.jsonl"
    if case in ("bomb", "big"):
        (tmp_path / f"{case}.png").write_bytes(png_header(*((50000, 50000) if case == "bomb" else (12000, 12000))))
        src.write_text(_episode(f"{case}.png") + "\n")
    elif case == "deep":
        src.write_bytes(b"[" * 900_000 + b"\n")  # under the values cap (1,000,000): the parser's depth refuses it
    elif case == "latin1":
        src.write_bytes(b'{"goal": "caf\xe9", "steps": []}\n')
    else:
        with open(src, "wb") as f:
            f.write(b'{"goal": "' + b"a" * (65 * 2**20) + b'"}\n')
    rc, lines, rss = _import("--format", "uis1", str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and msg in lines[0] and "Traceback" not in lines[0], lines
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert rss < 600_000, f"peak memory {rss} kB"  # the file itself is at most 68 MB here


def test_a_decompression_bomb_inside_a_tfrecord_and_a_huge_declared_record(tmp_path):
    src = tmp_path / "android_control-bomb"
    bomb = png_header(50000, 50000)
    from guiagent.datasets.tfrecord import Example

    ex = Example()()
    f = ex.features.feature
    f["episode_id"].int64_list.value.append(1)
    f["goal"].bytes_list.value.append(b"g")
    for _ in range(2):
        f["screenshots"].bytes_list.value.append(bomb)
        f["screenshot_widths"].int64_list.value.append(50000)
        f["screenshot_heights"].int64_list.value.append(50000)
    f["actions"].bytes_list.value.append(b'{"action_type": "wait"}')
    write_tfrecord(src, [ex.SerializeToString()])
    rc, lines, _ = _import("--format", "androidcontrol", str(src), "--out", str(tmp_path / "o1"))
    assert rc == 2 and len(lines) == 1 and "more than the 40 Mpx" in lines[0] and not (tmp_path / "o1").exists()
    import crc32c

    def masked(b):
        c = crc32c.crc32c(b)
        return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    head = struct.pack("<Q", 2**62)
    (tmp_path / "huge.tfrecord").write_bytes(head + struct.pack("<I", masked(head)) + b"abc")
    rc, lines, rss = _import("--format", "androidcontrol", str(tmp_path / "huge.tfrecord"), "--out",
                             str(tmp_path / "o2"))
    assert rc == 2 and len(lines) == 1 and "a record may have" in lines[0] and rss < 400_000


def test_placeholders_and_swipe_convention_options_are_checked(tmp_path):
    src = tmp_path / "x.jsonl"
    src.write_text(_episode("nowhere.png") + "\n")
    for args, msg in ((["--placeholders", "12x"], "WIDTHxHEIGHT"), (["--placeholders", "9000x9000"], "40 Mpx"),
                      (["--swipe-convention", "sideways"], "auto, finger or scroll")):
        rc, lines, _ = _import("--format", "uis1", str(src), "--out", str(tmp_path / "o"), *args)
        assert rc == 2 and len(lines) == 1 and msg in lines[0], lines
    rc, lines, _ = _import("--format", "parquet", str(src), "--out", str(tmp_path / "o"), "--placeholders", "auto")
    assert rc == 2 and "uis1, guiodyssey" in lines[0]
    rc, lines, _ = _import("--format", "uis1", str(src), "--out", str(tmp_path / "o"), "--placeholders", "320x640")
    assert rc == 0, lines
    from guiagent.store import StoreReader

    t = next(StoreReader(tmp_path / "o").iter_trajectories())
    assert t.steps[0].observation.size == (320, 640) and t.steps[0].metadata["placeholder"] is True


def test_import_result_reports_swipes_against_instructions(tmp_path):
    """A file whose left/right finger paths contradict their instructions is imported and said so."""
    steps = [{"action_content": {"action": "swipe", "coordinate": [270, 1200], "coordinate2": [810, 1200]},
              "screenshot": "s.png", "step_instruction": "swipe left to see more",
              "check_options": {"action": "swipe", "direction": "right"}} for _ in range(6)]
    src = tmp_path / "x.jsonl"
    src.write_text(json.dumps({"goal": "g", "steps": steps}) + "\n")
    res = import_dataset("uis1", src, tmp_path / "o", placeholders="auto")
    check = res.notes.swipes.to_dict()
    assert check["action_vs_instruction"]["horizontal"] == [0, 6]
    assert check["target_vs_instruction"]["horizontal"] == [6, 0] and check["action_vs_target"]["horizontal"] == 6
    assert any("look reversed" in w for w in res.notes.warnings)
    p = subprocess.run([sys.executable, "-m", "guiagent", "data", "import", "--format", "uis1", str(src), "--out",
                        str(tmp_path / "o2"), "--placeholders", "auto", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "warning: " in p.stderr and "look reversed" in p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["swipe_check"]["swipes"] == 6


# -- damaged screenshots: every one is decoded at import, the final observation's included ----------


def _cli(capsys, *args):
    """``guiagent data import ARGS`` in this process: (exit status, stderr lines)."""
    from guiagent.cli.data import main

    rc = main(["import", *args])
    return rc, capsys.readouterr().err.strip().splitlines()


def _nothing_written(root):
    return not (root / "out").exists() and not [p for p in root.rglob(".*importing*")]


def noisy_png(w=60, h=120, seed=0):
    """A PNG that does not compress to a few bytes: cutting it anywhere truncates its pixel data."""
    import io
    import random

    from PIL import Image

    buf = io.BytesIO()
    Image.frombytes("RGB", (w, h), random.Random(seed).randbytes(w * h * 3)).save(buf, format="PNG")
    return buf.getvalue()


def test_a_damaged_uis1_screenshot_is_one_line_naming_line_and_step(tmp_path, capsys):
    (tmp_path / "ok.png").write_bytes(noisy_png())
    (tmp_path / "cut.png").write_bytes(noisy_png()[:100])  # a real PNG's first 100 bytes: the header reads
    steps = [{"action_content": {"action": "wait", "time": 1}, "screenshot": s} for s in ("ok.png", "cut.png")]
    (tmp_path / "a.jsonl").write_text(json.dumps({"goal": "g", "steps": steps}) + "\n")
    rc, lines = _cli(capsys, "--format", "uis1", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert "a.jsonl: line 1 step 1: the screenshot is damaged: its PNG data does not decode (image file is " \
           "truncated" in lines[0]
    assert _nothing_written(tmp_path)


@pytest.mark.parametrize("which,bad,msg", [
    (-1, b"\x00garbage\xff" * 20, "final observation (screenshot 2): the screenshot is not a readable image"),
    (-1, "cut", "final observation (screenshot 2): the screenshot is damaged"),
    (1, "cut", "step 1: the screenshot is damaged"),
])
def test_a_damaged_androidcontrol_screenshot_is_refused_the_final_one_too(tmp_path, capsys, which, bad, msg):
    from guiagent.datasets.tfrecord import parse_example

    ex = parse_example(ac_example(4, [{"action_type": "wait"}] * 2, w=60, h=120))
    ex.features.feature["screenshots"].bytes_list.value[which] = noisy_png()[:300] if bad == "cut" else bad
    src = tmp_path / "android_control-x"
    write_tfrecord(src, [ex.SerializeToString()])
    rc, lines = _cli(capsys, "--format", "androidcontrol", str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and f"android_control-x: record 0 (episode 4) {msg}" in lines[0], lines
    assert _nothing_written(tmp_path)


def test_a_damaged_guiodyssey_screenshot_is_refused(tmp_path, capsys):
    src = tmp_path / "ody"
    (src / "annotations").mkdir(parents=True)
    (src / "screenshots").mkdir()
    (src / "screenshots" / "s.png").write_bytes(noisy_png()[:-200])
    ann = {"episode_id": "e", "task_info": {"instruction": "x"},
           "steps": [{"step": 0, "screenshot": "s.png", "action": "CLICK", "info": [[500, 500]]}]}
    (src / "annotations" / "e.json").write_text(json.dumps(ann))
    rc, lines = _cli(capsys, "--format", "guiodyssey", str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and "e.json step 0: the screenshot is damaged" in lines[0], lines
    assert _nothing_written(tmp_path)


def _export_one_step(tmp_path, to):
    """A stored run of one one-step episode (a real screenshot), exported to the Parquet file ``to``."""
    from guiagent.store import Store
    from guiagent.store.export import export_parquet
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory

    with Store.open(tmp_path / "run") as s:
        run = s.create_run("r")
        s.write_trajectory(run, Trajectory("ep", TaskSpec("webapps", "t", 0, "g"), (
            Step(0, Observation(noisy_png(), 60, 120), Click(0.5, 0.5)),), success=1.0))
    export_parquet(tmp_path / "run", to)


def test_a_damaged_screenshot_in_our_export_is_refused(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _export_one_step(tmp_path, tmp_path / "x.parquet")
    table = pq.read_table(tmp_path / "x.parquet")
    cut = pa.array([noisy_png()[:-200]], type=table.schema.field("screenshot").type)
    pq.write_table(table.set_column(table.schema.get_field_index("screenshot"), "screenshot", cut),
                   tmp_path / "x.parquet")
    rc, lines = _cli(capsys, "--format", "parquet", str(tmp_path / "x.parquet"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and "episode ep, step 0): the screenshot is damaged" in lines[0], lines
    assert _nothing_written(tmp_path)


# -- files outside the data folder are never read -------------------------------------------------


@pytest.mark.parametrize("case", ["dotdot", "absolute", "link", "images_link", "link_inside"])
def test_uis1_reads_screenshots_only_from_inside_its_folder(tmp_path, capsys, case):
    secret = tmp_path / "secret" / "secret.png"
    secret.parent.mkdir()
    secret.write_bytes(noisy_png(seed=7))
    data, images = tmp_path / "data", tmp_path / "images"
    data.mkdir()
    images.mkdir()
    (data / "shots").mkdir()
    (data / "shots" / "mine.png").write_bytes(noisy_png(seed=1))
    shot = {"dotdot": "../secret/secret.png", "absolute": str(secret), "link": "link.png",
            "images_link": "/elsewhere/x.png", "link_inside": "link.png"}[case]
    if case == "link":
        (data / "link.png").symlink_to(secret)
    if case == "link_inside":
        (data / "link.png").symlink_to(data / "shots" / "mine.png")
    if case == "images_link":
        (images / "x.png").symlink_to(secret)
    (data / "a.jsonl").write_text(_episode(shot) + "\n")
    args = ("--format", "uis1", str(data / "a.jsonl"), "--out", str(tmp_path / "out"), "--images", str(images))
    rc, lines = _cli(capsys, *args)
    # a link is refused wherever it points, inside the folder too: an import follows no link
    why = {"absolute": "not found", "dotdot": "leads outside"}.get(case, "is a symbolic link (to ")
    assert rc == 2 and len(lines) == 1 and "a.jsonl: line 1 step 0: screenshot" in lines[0], lines
    assert why in lines[0], lines
    assert _nothing_written(tmp_path)
    # with placeholders on, a blank screenshot stands in for a path elsewhere; the outside file is never taken
    rc, lines = _cli(capsys, *args, "--placeholders", "60x120")
    if case != "absolute":
        assert rc == 2 and why in lines[0], lines
        return
    from guiagent.store import StoreReader

    (t,) = StoreReader(tmp_path / "out").iter_trajectories()
    assert t.steps[0].metadata["placeholder"] is True and t.steps[0].observation.screenshot != secret.read_bytes()


def test_uis1_refuses_a_pipe(tmp_path, capsys):
    import os

    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "a.jsonl").write_text(_episode("fifo.png") + "\n")
    rc, lines = _cli(capsys, "--format", "uis1", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and "fifo.png' is a FIFO (named pipe), not a regular file" in lines[0], lines
    assert _nothing_written(tmp_path)


def test_uis1_refuses_a_huge_screenshot_file_without_reading_it(tmp_path):
    with open(tmp_path / "h.png", "wb") as f:  # 600 MB, sparse: a real PNG and then nothing
        f.write(noisy_png())
        f.truncate(600 * 2**20)
    (tmp_path / "a.jsonl").write_text(_episode("h.png") + "\n")
    rc, lines, rss = _import("--format", "uis1", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and "is 629,145,600 bytes, more than the 64 MiB an import reads" in lines[0]
    assert rss < 400_000, f"peak memory {rss} kB"  # the file was never read
    assert _nothing_written(tmp_path)


@pytest.mark.parametrize("case", ["odyssey_screenshot", "odyssey_annotation", "androidcontrol_file"])
def test_guiodyssey_and_androidcontrol_read_only_from_inside_their_folder(tmp_path, capsys, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "s.png").write_bytes(noisy_png())
    ann = {"episode_id": "e", "task_info": {"instruction": "x"},
           "steps": [{"step": 0, "screenshot": "s.png", "action": "CLICK", "info": [[500, 500]]}]}
    (outside / "e.json").write_text(json.dumps(ann))
    write_tfrecord(outside / "android_control-0", [ac_example(1, [{"action_type": "wait"}])])
    src = tmp_path / "src"
    (src / "annotations").mkdir(parents=True)
    (src / "screenshots").mkdir()
    if case == "odyssey_screenshot":  # a screenshot linked in from elsewhere
        (src / "annotations" / "e.json").write_text(json.dumps(ann))
        (src / "screenshots" / "s.png").symlink_to(outside / "s.png")
        msg = "e.json step 0: screenshot "
    elif case == "odyssey_annotation":  # an annotation linked in
        (src / "screenshots" / "s.png").write_bytes(noisy_png())
        (src / "annotations" / "e.json").symlink_to(outside / "e.json")
        msg = "e.json: the annotation "
    else:  # a record file linked into the folder given
        (src / "android_control-0").symlink_to(outside / "android_control-0")
        msg = "android_control-0: a symbolic link (to "
    fmt = "androidcontrol" if case == "androidcontrol_file" else "guiodyssey"
    rc, lines = _cli(capsys, "--format", fmt, str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and msg in lines[0] and ("outside" in lines[0] or "no link" in lines[0]), lines
    assert _nothing_written(tmp_path)


def test_a_parquet_export_folder_reads_only_its_own_files(tmp_path, capsys):
    (tmp_path / "outside").mkdir()
    _export_one_step(tmp_path, tmp_path / "outside" / "x.parquet")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.parquet").symlink_to(tmp_path / "outside" / "x.parquet")
    rc, lines = _cli(capsys, "--format", "parquet", str(tmp_path / "src"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and "x.parquet: a symbolic link (to " in lines[0] and "no link" in lines[0], lines
    assert _nothing_written(tmp_path)
