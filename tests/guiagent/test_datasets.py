"""Recorded-data importers: AndroidControl TFRecord, UI-S1 JSONL, GUI-Odyssey, our own exports.

Every fixture file is written here in the published schema (nothing is downloaded).
"""

import gzip
import io
import json
import subprocess
import sys

import pytest
from PIL import Image

from guiagent.cli.data import main as data_main
from guiagent.datasets import DatasetError, import_dataset, read_dataset
from guiagent.store import Store, StoreReader
from guiagent.store.export import export_hf_dataset, export_parquet
from guiagent.types import (
    Click,
    Finish,
    Key,
    LongPress,
    NavigateBack,
    NavigateHome,
    Observation,
    OpenApp,
    ParseError,
    Scroll,
    Step,
    Swipe,
    TaskSpec,
    Trajectory,
    Type,
    Wait,
)


def png(w, h, color=(10, 20, 30)):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, format="PNG")
    return buf.getvalue()


# -- AndroidControl --------------------------------------------------------------------------


def ac_example(eid, actions, *, w=100, h=200, n_shots=None, instr=True):
    from guiagent.datasets.tfrecord import Example

    n = len(actions) + 1 if n_shots is None else n_shots
    ex = Example()()
    f = ex.features.feature
    f["episode_id"].int64_list.value.append(eid)
    f["goal"].bytes_list.value.append(f"goal {eid}".encode())
    for i in range(n):
        f["screenshots"].bytes_list.value.append(png(w, h, (i * 30, 0, eid % 255)))
        f["screenshot_widths"].int64_list.value.append(w)
        f["screenshot_heights"].int64_list.value.append(h)
        f["accessibility_trees"].bytes_list.value.append(b"\x0a\x00")
    for a in actions:
        f["actions"].bytes_list.value.append(a if isinstance(a, bytes) else json.dumps(a).encode())
        if instr:
            f["step_instructions"].bytes_list.value.append(f"do {a}".encode()[:40])
    return ex.SerializeToString()


def write_tfrecord(path, records, *, gz=True):
    """A TFRecord file as TensorFlow writes it (AndroidControl's are GZIP-compressed as a whole)."""
    data = b"".join(_frame(r) for r in records)
    path.write_bytes(gzip.compress(data) if gz else data)


def _frame(rec):
    """TFRecord framing: length, masked crc32c of the length, data, masked crc32c of the data."""
    import struct

    import crc32c

    def masked(b):
        c = crc32c.crc32c(b)
        return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    ln = struct.pack("<Q", len(rec))
    return ln + struct.pack("<I", masked(ln)) + rec + struct.pack("<I", masked(rec))


AC_ACTIONS = [
    {"action_type": "open_app", "app_name": "Zoho Meeting"},
    {"action_type": "click", "x": 50, "y": 100},
    {"action_type": "long_press", "x": 0, "y": 200},
    {"action_type": "scroll", "direction": "down"},
    {"action_type": "input_text", "text": "hello"},
    {"action_type": "type", "text": "hi", "x": 25, "y": 50},
    {"action_type": "navigate_back"},
    {"action_type": "navigate_home"},
    {"action_type": "wait"},
]



def _import_cli(*args: str) -> subprocess.CompletedProcess:
    """``guiagent data import ARGS`` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "guiagent", "data", "import", *args], capture_output=True,
                          text=True, timeout=120)


def test_androidcontrol_episodes_map_to_typed_actions(tmp_path):
    src = tmp_path / "android_control-00000-of-00020"
    write_tfrecord(src, [ac_example(7, AC_ACTIONS), ac_example(8, AC_ACTIONS[:2], w=120, h=240)])
    trajs = list(read_dataset("androidcontrol", src))
    assert [t.episode_id for t in trajs] == ["androidcontrol-7", "androidcontrol-8"]
    t = trajs[0]
    assert (
        t.task.goal == "goal 7" and t.task.suite == "androidcontrol" and t.num_steps == 9 and t.success == 1.0
    )
    assert [s.action for s in t.steps] == [
        OpenApp("Zoho Meeting"),
        Click(0.5, 0.5),
        LongPress(0.0, 1.0),
        Scroll("down"),
        Type("hello"),
        Type("hi", 0.25, 0.25, submit=True),
        NavigateBack(),
        NavigateHome(),
        Wait(1.0),
    ]
    assert t.steps[1].observation.size == (100, 200) and t.final_observation is not None
    assert (
        t.steps[0].thought.startswith("do ") and t.steps[0].metadata["step_instruction"] == t.steps[0].thought
    )
    # plain (uncompressed) files read the same
    plain = tmp_path / "x.tfrecord"
    write_tfrecord(plain, [ac_example(7, AC_ACTIONS)], gz=False)
    assert list(read_dataset("androidcontrol", plain))[0].steps == t.steps
    res = import_dataset("androidcontrol", src, tmp_path / "run")
    assert (res.episodes, res.steps) == (2, 11)
    back = StoreReader(tmp_path / "run").load_trajectory("androidcontrol-8")
    assert back.agent == "import:androidcontrol" and back.steps[1].action == Click(50 / 120, 100 / 240)
    assert back.steps[0].observation.screenshot == trajs[1].steps[0].observation.screenshot


@pytest.mark.parametrize(
    "records,msg",
    [
        ([b"\x01\x02garbage"], "record 0"),
        (["ok", "BADJSON"], "record 1 .*step 0: the action is not JSON"),
        (["ok", "SHOTS"], "record 1 .*actions for 2 screenshots"),
        (["ok", "UNKNOWN"], "record 1 .*unknown action_type 'fly'"),
        (["ok", "OUTSIDE"], "record 1 .*outside the screen"),
        (["ok", "NOX"], "record 1 .*click action without 'x'"),
    ],
)
def test_androidcontrol_bad_records_name_file_and_record_and_leave_nothing(tmp_path, records, msg):
    made = {
        "ok": ac_example(1, AC_ACTIONS[:2]),
        "BADJSON": ac_example(2, [b"{not json"]),
        "SHOTS": ac_example(3, AC_ACTIONS[:2], n_shots=2),
        "UNKNOWN": ac_example(4, [{"action_type": "fly"}]),
        "OUTSIDE": ac_example(5, [{"action_type": "click", "x": 500, "y": 10}]),
        "NOX": ac_example(6, [{"action_type": "click", "y": 10}]),
    }
    src = tmp_path / "android_control-bad"
    write_tfrecord(src, [made.get(r, r) if isinstance(r, str) else r for r in records])
    with pytest.raises(DatasetError, match=msg) as e:
        import_dataset("androidcontrol", src, tmp_path / "out")
    assert str(src) in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["android_control-bad"]  # no run dir, no temp dir


def test_example_proto_is_wire_compatible_with_tensorflow():
    from guiagent.datasets.tfrecord import Example

    # bytes written by TensorFlow's generated tf.train.Example for {"a": bytes_list ["x"]} and
    # {"n": int64_list [1, 300]} (packed, as in feature.proto)
    ex = Example()()
    ex.features.feature["a"].bytes_list.value.append(b"x")
    assert ex.SerializeToString() == b"\n\x0c\n\n\n\x01a\x12\x05\n\x03\n\x01x"
    ex2 = Example()()
    ex2.features.feature["n"].int64_list.value.extend([1, 300])
    assert ex2.SerializeToString() == b"\n\x0e\n\x0c\n\x01n\x12\x07\x1a\x05\n\x03\x01\xac\x02"
    back = Example().FromString(ex2.SerializeToString())
    assert list(back.features.feature["n"].int64_list.value) == [1, 300]


def test_androidcontrol_target_box_from_the_accessibility_tree(tmp_path):
    forest_pb2 = pytest.importorskip("android_env.proto.a11y.android_accessibility_forest_pb2")
    forest = forest_pb2.AndroidAccessibilityForest()
    nodes = forest.windows.add().tree.nodes
    boxes = (((0, 0, 100, 200), False), ((10, 80, 90, 120), True), ((40, 90, 60, 110), False))
    for (x0, y0, x1, y1), clickable in boxes:
        n = nodes.add(is_clickable=clickable, is_visible_to_user=True)
        n.bounds_in_screen.left, n.bounds_in_screen.top = x0, y0
        n.bounds_in_screen.right, n.bounds_in_screen.bottom = x1, y1
    from guiagent.datasets.tfrecord import parse_example

    clicks = [{"action_type": "click", "x": 50, "y": 100}, {"action_type": "click", "x": 5, "y": 5}]
    ex = parse_example(ac_example(9, clicks))
    trees = ex.features.feature["accessibility_trees"].bytes_list.value
    for i in range(len(trees)):
        trees[i] = forest.SerializeToString()
    src = tmp_path / "android_control-tree"
    write_tfrecord(src, [ex.SerializeToString()])
    (t,) = list(read_dataset("androidcontrol", src))
    # the clickable element wins over the smaller non-clickable one and the full-screen container
    assert t.steps[0].metadata["target"]["boxes"] == [pytest.approx([0.1, 0.4, 0.9, 0.6])]
    assert t.steps[1].metadata["target"]["boxes"] == [pytest.approx([0.0, 0.0, 1.0, 1.0])]  # only the container
    assert t.steps[0].metadata["target"]["point"] == [0.5, 0.5] and t.steps[0].metadata["episode_id"] == 9


def test_androidcontrol_truncated_file(tmp_path):
    src = tmp_path / "android_control-trunc"
    write_tfrecord(src, [ac_example(1, AC_ACTIONS[:2])], gz=False)
    src.write_bytes(src.read_bytes()[:-30])
    with pytest.raises(DatasetError, match=r"android_control-trunc: record 0: truncated"):
        list(read_dataset("androidcontrol", src))
    data = bytearray(gzip.decompress(gzip.compress(b"")) + _frame(ac_example(1, AC_ACTIONS[:2])))
    data[40] ^= 0xFF
    src.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"record 0: data CRC mismatch"):
        list(read_dataset("androidcontrol", src))


# -- UI-S1 JSONL -----------------------------------------------------------------------------


def uis1_files(tmp_path, lines=None):
    img = tmp_path / "images"
    img.mkdir(exist_ok=True)
    for i in range(6):
        (img / f"0_{i}.png").write_bytes(png(1080, 2400, (i * 20, 5, 5)))
    steps = [
        {
            "action_content": {"action": "open", "text": "Zoho Meeting"},
            "screenshot": "/datasets/AC/images/0_0.png",
        },
        {
            "action_content": {
                "action": "click",
                "coordinate": [540.0, 1200.0],
                "bbox": [360, 1100, 720, 1300],
            },
            "screenshot": "images/0_1.png",
            "thought": "tap the meeting",
        },
        {
            "action_content": {
                "action": "swipe",
                "coordinate": [540.0, 600.0],
                "coordinate2": [540.0, 1800.0],
            },
            "screenshot": "images/0_2.png",
        },
        {"action_content": {"action": "type", "text": "Welsh cakes"}, "screenshot": "images/0_3.png"},
        {"action_content": {"action": "system_button", "button": "Back"}, "screenshot": "images/0_4.png"},
        {"action_content": {"action": "terminate", "status": "success"}, "screenshot": "images/0_5.png"},
    ]
    lines = lines or [
        {"goal": "Open Zoho and view meetings", "is_successful": True, "steps": steps},
        {
            "goal": "wait",
            "is_successful": False,
            "steps": [{"action_content": {"action": "wait", "time": 2}, "screenshot": "images/0_0.png"}],
        },
    ]
    p = tmp_path / "train.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return p


def test_uis1_jsonl_episodes(tmp_path):
    src = uis1_files(tmp_path)
    with pytest.raises(
        DatasetError, match=r"line 1 step 0: screenshot '/datasets/AC/images/0_0.png' not found"
    ):
        list(read_dataset("uis1", src))
    a, b = list(read_dataset("uis1", src, images_dir=tmp_path / "images"))
    assert a.task.goal == "Open Zoho and view meetings" and a.success == 1.0 and b.success == 0.0
    assert [s.action for s in a.steps] == [
        OpenApp("Zoho Meeting"),
        Click(0.5, 0.5),
        Swipe(0.5, 0.75, 0.5, 0.25),
        Type("Welsh cakes"),
        NavigateBack(),
        Finish("success"),
    ]
    assert a.steps[1].metadata["target"]["boxes"] == [pytest.approx(
        [360 / 1080, 1100 / 2400, 720 / 1080, 1300 / 2400]
    )]
    assert a.steps[1].thought == "tap the meeting" and b.steps[0].action == Wait(2.0)
    # the imported swipe is the finger path: it reveals content below, like a "scroll down"
    from rl.match import match_action

    assert match_action(Scroll("down"), a.steps[2].action, size=(1080, 2400)).matched
    assert (
        data_main(
            [
                "import",
                "--format",
                "uis1",
                str(src),
                "--out",
                str(tmp_path / "run"),
                "--images",
                str(tmp_path / "images"),
            ]
        )
        == 0
    )
    assert StoreReader(tmp_path / "run").count_episodes() == 2


@pytest.mark.parametrize(
    "line,msg",
    [
        ("{not json", "line 1: not JSON"),
        (json.dumps({"goal": "g", "steps": []}), "line 1: an episode needs"),
        (
            json.dumps(
                {
                    "goal": "g",
                    "steps": [{"action_content": {"action": "jump"}, "screenshot": "images/0_0.png"}],
                }
            ),
            "line 1 step 0: unknown action 'jump'",
        ),
        (
            json.dumps(
                {
                    "goal": "g",
                    "steps": [
                        {
                            "action_content": {"action": "click", "coordinate": [1]},
                            "screenshot": "images/0_0.png",
                        }
                    ],
                }
            ),
            "coordinate must be",
        ),
    ],
)
def test_uis1_bad_lines(tmp_path, line, msg):
    src = uis1_files(tmp_path)
    src.write_text(
        src.read_text().splitlines()[1] + "\n" + line + "\n"
    )  # a good line first, then the bad one
    msg = msg.replace("line 1", "line 2")
    with pytest.raises(DatasetError, match=msg):
        import_dataset("uis1", src, tmp_path / "run")
    assert not (tmp_path / "run").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# -- GUI-Odyssey -----------------------------------------------------------------------------


def test_guiodyssey_episodes(tmp_path):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "screenshots").mkdir()
    for i in range(6):
        (tmp_path / "screenshots" / f"e1_{i}.png").write_bytes(png(90, 160, (i, i, i)))
    steps = [
        {"step": 0, "screenshot": "e1_0.png", "action": "CLICK", "info": [[500, 250]], "ps": ""},
        {
            "step": 1,
            "screenshot": "e1_1.png",
            "action": "SCROLL",
            "info": [[500, 800], [500, 200]],
            "ps": "[[500, 800], [500, 500], [500, 200]]",
        },
        {"step": 2, "screenshot": "e1_2.png", "action": "TYPE", "info": "New York", "ps": ""},
        {"step": 3, "screenshot": "e1_3.png", "action": "CLICK", "info": "HOME", "ps": ""},
        {"step": 4, "screenshot": "e1_4.png", "action": "LONG_PRESS", "info": [[0, 1000]], "ps": ""},
        {"step": 5, "screenshot": "e1_5.png", "action": "COMPLETE", "info": "", "ps": "done"},
    ]
    ann = {
        "episode_id": "e1",
        "device_info": {
            "product": "p",
            "release_version": "34",
            "sdk_version": "x",
            "h": 160,
            "w": 90,
            "device_name": "Pixel 8 Pro",
        },
        "task_info": {
            "category": "Multi_Apps",
            "app": ["DuckDuckGo", "TickTick"],
            "meta_task": "Search {}",
            "task": "Search NY",
            "instruction": "Use DuckDuckGo to search NY",
        },
        "step_length": 6,
        "steps": steps,
    }
    (tmp_path / "annotations" / "e1.json").write_text(json.dumps(ann))
    (t,) = list(read_dataset("guiodyssey", tmp_path))
    assert t.task.goal == "Use DuckDuckGo to search NY" and t.task.params["category"] == "Multi_Apps"
    assert [s.action for s in t.steps] == [
        Click(0.5, 0.25),
        Swipe(0.5, 0.8, 0.5, 0.2),
        Type("New York"),
        NavigateHome(),
        LongPress(0.0, 1.0),
        Finish("success"),
    ]
    assert t.success == 1.0 and t.steps[0].observation.size == (90, 160)
    steps[2]["action"] = "TELEPORT"
    (tmp_path / "annotations" / "e1.json").write_text(json.dumps(ann))
    with pytest.raises(DatasetError, match=r"e1.json step 2: unknown action 'TELEPORT'"):
        import_dataset("guiodyssey", tmp_path, tmp_path / "run")


# -- our own exports, back again ------------------------------------------------------------


def _stored_run(tmp_path):
    store = Store.open(tmp_path / "src")
    run = store.create_run("r")
    spec = TaskSpec("webapps", "open_app", 3, "open the clock", max_steps=7, params={"app": "clock"})
    t1 = Trajectory(
        "ep1",
        spec,
        (
            Step(
                0,
                Observation(png(30, 60), 30, 60, tree="<tree/>", url="http://x"),
                Click(0.25, 0.5),
                response='{"action": ...}',
                thought="tap",
                reward=0.5,
                reward_parts={"task": 0.0, "progress": 0.5},
                milestones=(True, False),
                policy_version=2,
                latency_ms=12.5,
                metadata={"target_box": [0, 0, 1, 1]},
            ),
            Step(
                1,
                Observation(png(30, 60, (1, 2, 3)), 30, 60, last_action_error="nope"),
                None,
                response="???",
                parse_error=ParseError("malformed", "bad", "???"),
                reward=-0.1,
                reward_parts={"parse": -0.1},
            ),
            Step(
                2,
                Observation(png(30, 60, (9, 9, 9)), 30, 60),
                Key("Enter"),
                reward=1.0,
                terminated=True,
                action_error="slow",
            ),
        ),
        success=1.0,
        agent="model",
        group_id="g1",
        metadata={"note": "x"},
    )
    t2 = Trajectory(
        "ep2",
        TaskSpec("webapps", "go_home", 4, "go home"),
        (Step(0, Observation(png(30, 60, (4, 4, 4)), 30, 60), NavigateHome(), truncated=True),),
        status="aborted",
        abort_reason="worker died",
        agent="model",
    )
    store.write_trajectory(run, t1)
    store.write_trajectory(run, t2)
    store.close()
    return tmp_path / "src", [t1, t2]


def _same(a, b):
    assert a.episode_id == b.episode_id and a.task == b.task and a.steps == b.steps
    assert (a.success, a.status, a.abort_reason, a.agent, a.group_id, dict(a.metadata)) == (
        b.success,
        b.status,
        b.abort_reason,
        b.agent,
        b.group_id,
        dict(b.metadata),
    )


@pytest.mark.parametrize("kind", ["parquet", "hf"])
def test_export_imports_back_losslessly(tmp_path, kind):
    src, originals = _stored_run(tmp_path)
    if kind == "parquet":
        export_parquet(src, tmp_path / "x.parquet")
        exp = tmp_path / "x.parquet"
    else:
        pytest.importorskip("datasets")
        export_hf_dataset(src, tmp_path / "hf")
        exp = tmp_path / "hf"
    res = import_dataset(kind, exp, tmp_path / "back")
    assert (res.episodes, res.steps) == (2, 4)
    reader = StoreReader(tmp_path / "back")
    for t in originals:
        _same(reader.load_trajectory(t.episode_id), t)


def test_out_dir_is_never_clobbered_and_cli_errors_are_one_line(tmp_path):
    src = uis1_files(tmp_path)
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(DatasetError, match="already exists and is not empty"):
        import_dataset("uis1", src, out, images_dir=str(tmp_path / "images"))
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    p = _import_cli("--format", "uis1", str(src), "--out", str(tmp_path / "new"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "not found" in p.stderr
    assert not (tmp_path / "new").exists()
    p = _import_cli("--format", "uis1", str(src), "--out", str(tmp_path / "new"), "--images",
                    str(tmp_path / "images"), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["episodes"] == 2


# -- episode ids: one limit for every format, which the web UI opens --------------------------------


def _odyssey_annotation(src, eid):
    (src / "annotations").mkdir(parents=True, exist_ok=True)
    (src / "screenshots").mkdir(exist_ok=True)
    (src / "screenshots" / "s.png").write_bytes(png(90, 160))
    ann = {"episode_id": eid, "device_info": {"w": 90, "h": 160}, "task_info": {"instruction": "open it"},
           "steps": [{"step": 0, "screenshot": "s.png", "action": "CLICK", "info": [[500, 500]], "ps": ""}]}
    (src / "annotations" / "e.json").write_text(json.dumps(ann))


def test_episode_ids_over_the_limit_are_refused_in_one_line_before_anything_is_written(tmp_path):
    """GUI-Odyssey checked its raw id against 200 characters and then wrote ``guiodyssey-`` before it;
    our exports took any length. Every format now writes ids of at most MAX_EPISODE_ID characters,
    prefix included, and names a longer one (the web UI opens every id an import writes)."""
    from guiagent.datasets._common import MAX_EPISODE_ID

    prefix = "guiodyssey-"
    ok = "cat/" + "k" * (MAX_EPISODE_ID - len(prefix) - 4)
    _odyssey_annotation(tmp_path / "ody-ok", ok)
    import_dataset("guiodyssey", tmp_path / "ody-ok", tmp_path / "ody-ok-run")
    (ep,) = StoreReader(tmp_path / "ody-ok-run").list_episodes().items
    assert ep.episode_id == prefix + ok and len(ep.episode_id) == MAX_EPISODE_ID
    _odyssey_annotation(tmp_path / "ody-long", ok + "k")
    with pytest.raises(DatasetError, match=rf"e\.json: episode_id 'cat/k+\.\.\. is {MAX_EPISODE_ID + 1} characters "
                                           rf"long with the '{prefix}' prefix; an import takes at most {MAX_EPISODE_ID}"):
        import_dataset("guiodyssey", tmp_path / "ody-long", tmp_path / "ody-long-run")
    assert not (tmp_path / "ody-long-run").exists()
    # our own exports: the store takes any id, the import back does not
    with Store.open(tmp_path / "src") as s:
        run = s.create_run("r")
        for eid in ("p" * MAX_EPISODE_ID, "q" * (MAX_EPISODE_ID + 1)):
            s.write_trajectory(run, Trajectory(eid, TaskSpec("webapps", "t", 0, "g"), (
                Step(0, Observation(png(30, 60), 30, 60), Click(0.5, 0.5)),), success=1.0))
    export_parquet(tmp_path / "src", tmp_path / "x.parquet")
    p = _import_cli("--format", "parquet", str(tmp_path / "x.parquet"), "--out", str(tmp_path / "back"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"is {MAX_EPISODE_ID + 1} characters long; an import takes at most {MAX_EPISODE_ID}" in lines[0]
    assert not (tmp_path / "back").exists()
    # a format whose ids the importer makes up (uis1-<file>-<line>): the check under every reader
    src = uis1_files(tmp_path)
    long_src = src.with_name("u" * 250 + ".jl")
    src.rename(long_src)
    with pytest.raises(DatasetError, match=r"episode 1: episode_id 'uis1-u+\.\.\. is 2\d\d characters long"):
        import_dataset("uis1", long_src, tmp_path / "uis1-run", images_dir=str(tmp_path / "images"))
    assert not (tmp_path / "uis1-run").exists()


# -- one id, one episode: a repeated id is bad input, refused before anything is written ------------


def _cli_lines(capsys, *args):
    rc = data_main(["import", *args])
    return rc, capsys.readouterr().err.strip().splitlines()


def test_an_episode_id_twice_in_one_source_is_one_line_and_exit_2(tmp_path, capsys):
    ac = tmp_path / "ac"
    ac.mkdir()
    write_tfrecord(ac / "android_control-0", [ac_example(1, AC_ACTIONS[:1]), ac_example(1, AC_ACTIONS[:2])])
    rc, lines = _cli_lines(capsys, "--format", "androidcontrol", str(ac / "android_control-0"), "--out",
                           str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert "android_control-0: record 1: episode_id 1 is also the episode_id of " in lines[0]
    assert lines[0].endswith("android_control-0: record 0; an id may name one episode only")
    write_tfrecord(ac / "android_control-0", [ac_example(1, AC_ACTIONS[:1])])
    write_tfrecord(ac / "android_control-1", [ac_example(2, AC_ACTIONS[:1]), ac_example(1, AC_ACTIONS[:1])])
    rc, lines = _cli_lines(capsys, "--format", "androidcontrol", str(ac), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and "android_control-1: record 1: episode_id 1 is also" in lines[0], lines
    # GUI-Odyssey: two annotations with one id (a number in one, text in the other: both write guiodyssey-5)
    for name, eid in (("a", 5), ("b", "5")):
        _odyssey_annotation(tmp_path / "ody", eid)
        (tmp_path / "ody" / "annotations" / "e.json").rename(tmp_path / "ody" / "annotations" / f"{name}.json")
    rc, lines = _cli_lines(capsys, "--format", "guiodyssey", str(tmp_path / "ody"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert "b.json: episode_id '5' is also the episode_id of a.json; an id may name one episode only" in lines[0]
    # our exports: the same episode in two files of one folder
    with Store.open(tmp_path / "run") as s:
        run = s.create_run("r")
        s.write_trajectory(run, Trajectory("ep", TaskSpec("webapps", "t", 0, "g"), (
            Step(0, Observation(png(30, 60), 30, 60), Click(0.5, 0.5)),), success=1.0))
    (tmp_path / "pq").mkdir()
    for name in ("a", "b"):
        export_parquet(tmp_path / "run", tmp_path / "pq" / f"{name}.parquet")
    rc, lines = _cli_lines(capsys, "--format", "parquet", str(tmp_path / "pq"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert "episode 2: episode id 'ep' is also the id of episode 1; an id may name one episode only" in lines[0]
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".*"))
