"""How fast a tiny model trained from scratch learns to point at the element a goal names, by route.

Run::

    guiagent model init --size tiny --out runs/tiny
    python bench/grounding_probe.py --model runs/tiny --refer id      # "element": <its number>
    python bench/grounding_probe.py --model runs/tiny --refer name    # "name": <its name, as listed>
    python bench/grounding_probe.py --model runs/tiny --refer id --digit-weight 20
    python bench/grounding_probe.py --model runs/tiny --refer id-after-name

Text only (no screenshot), so that only the route differs: each step draws a fresh batch of launcher
screens (the nine webapps app names in a random order, numbered as the marks format lists them,
``[3] link: Clock``) and a goal naming one of them (``Open the Clock app.``), in the tiny model's
compact marks prompt, and fine-tunes on the reply that taps it. No screen repeats, so nothing can be
memorised: the model learns the lookup or stays at chance (1/9).

Routes: ``id``, the reply gives the element's number (what the index-only marks format asks);
``id-after-name``, the list writes ``link: Clock [3]`` and the reply first copies the row
(``"thought": "Clock [3]"``) then gives the number: the copy-what-follows pattern of an induction
head; ``name``, the reply names the element as the list writes it (``"name": "Clock"``, resolved
on the screen by ``grounding.marks.MarksFormat.parse_on``). ``--digit-weight`` weighs the loss on the
number's digit tokens (the reply's other tokens are boilerplate).

``--names unseen`` draws each screen's nine names from made-up words (``Velom``, ``Tarisu``) and the
held-out screens' from words no training screen has: the model can only succeed by copying the name
the goal spells, as MiniWoB++'s random-layout tasks ask. Compare the tokenizers with models built by
``guiagent model init --words prefixed`` (GPT-2 splitting: ``ĠVelom`` in the goal, ``V el om`` after a
quote) and ``--words bare`` (the same tokens in both places). A model given the copy warm-up first
(``guiagent model init --words bare --copy-steps 1000``) copies them: 79% held-out after 100 steps and
85% after 600 on 2026-11-27, against 0% for the same model without it (docs/training.md, "Goal-conditioned
grounding").

Every ``--every`` steps it prints the greedy accuracy on 100 held-out screens (the digit the model
ranks first, or for ``name`` the name in its greedy reply) and the wall time. Last stdout line: one
JSON object with the accuracy curve.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

APPS = ("Contacts", "Settings", "Clock", "Notes", "Files", "Calendar", "Messages", "Expenses", "Tasks")


_ONSETS = ("b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "pl")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")


def made_up_word(rng: random.Random) -> str:
    """A pronounceable word of 2-3 syllables, capitalised (``Velom``)."""
    w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 3)))
    return (w + rng.choice(("", "n", "m", "s", "x"))).capitalize()


def is_held_out(word: str) -> bool:
    """A fixed half of the made-up words is kept for the held-out screens."""
    return sum(map(ord, word)) % 2 == 1


def screen_names(rng: random.Random, names: str, held_out: bool) -> list[str]:
    if names == "apps":
        out = list(APPS)
        rng.shuffle(out)
        return out
    out: list[str] = []
    while len(out) < len(APPS):
        w = made_up_word(rng)
        if is_held_out(w) == held_out and w not in out:
            out.append(w)
    return out


def example(rng: random.Random, refer: str, system: str, tok, names: str = "apps",
            held_out: bool = False) -> tuple[str, str, object]:
    names = screen_names(rng, names, held_out)
    goal = rng.choice(names)
    i = names.index(goal)
    if refer == "id-after-name":
        rows = "\n".join(f"link: {n} [{k}]" for k, n in enumerate(names))
        target = '{"thought": "%s [%d]", "action": {"kind": "click_element", "element": %d}}' % (goal, i, i)
    else:
        rows = "\n".join(f"[{k}] link: {n}" for k, n in enumerate(names))
        target = ('{"action": {"kind": "click_element", "name": "%s"}}' % goal if refer == "name" else
                  '{"action": {"kind": "click_element", "element": %d}}' % i)
    user = f"Goal: Open the {goal} app.\nElements (id role: name):\n{rows}"
    prompt = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                     tokenize=False, add_generation_prompt=True)
    return prompt, target, goal if refer == "name" else i


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a tiny model folder (guiagent model init)")
    ap.add_argument("--refer", choices=("id", "id-after-name", "name"), default="id")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--digit-weight", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--names", choices=("apps", "unseen"), default="apps",
                    help="apps: the nine app names; unseen: made-up words, held-out screens' words never trained on")
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from grounding import get_format

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForImageTextToText.from_pretrained(a.model, dtype=torch.float32)
    system = get_format("marks", compact=True, refer="name" if a.refer == "name" else "id").system_prompt()
    digits = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]

    def batch(rng: random.Random):
        rows = []
        for _ in range(a.batch):
            p, t, _ = example(rng, a.refer, system, tok, a.names)
            pi, ti = tok(p)["input_ids"], tok(t + "<|im_end|>")["input_ids"]
            rows.append((pi + ti, [-100] * len(pi) + ti))
        n = max(len(r[0]) for r in rows)
        x = torch.full((len(rows), n), tok.pad_token_id)
        y = torch.full((len(rows), n), -100)
        m = torch.zeros((len(rows), n), dtype=torch.long)
        for k, (ids, lab) in enumerate(rows):
            x[k, :len(ids)], y[k, :len(lab)], m[k, :len(ids)] = torch.tensor(ids), torch.tensor(lab), 1
        return x, y, m

    def accuracy() -> float:
        rng, ok = random.Random(10_000 + a.seed), 0
        with torch.no_grad():
            for _ in range(100):
                p, t, gold = example(rng, a.refer, system, tok, a.names, held_out=True)
                if a.refer == "name":
                    ids = tok(p)["input_ids"]
                    out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)
                    reply = tok.decode(out[0, len(ids):], skip_special_tokens=True)
                    ok += f'"name": "{gold}"' in reply
                    continue
                cut = t.index(" [") + 2 if a.refer == "id-after-name" else t.rindex(": ") + 2
                logits = model(input_ids=torch.tensor([tok(p + t[:cut])["input_ids"]])).logits[0, -1]
                ok += int(torch.stack([logits[d] for d in digits]).argmax()) == gold
        return ok / 100

    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    rng, t0, curve = random.Random(a.seed), time.time(), []
    for step in range(1, a.steps + 1):
        x, y, m = batch(rng)
        logits = model(input_ids=x, attention_mask=m).logits[:, :-1].float()
        lab = y[:, 1:]
        per = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1),
                                                ignore_index=-100, reduction="none").view_as(lab)
        w = (lab != -100).float()
        if a.digit_weight != 1.0:
            is_digit = torch.zeros_like(lab, dtype=torch.bool)
            for d in digits:
                is_digit |= lab == d
            w = w * torch.where(is_digit, a.digit_weight, 1.0)
        loss = (per * w).sum() / w.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if step % a.every == 0 or step == a.steps:
            acc = accuracy()
            curve.append({"step": step, "accuracy": acc, "seconds": round(time.time() - t0, 1)})
            print(f"step {step}: loss {loss.item():.3f}, held-out accuracy {acc:.2f} ({time.time() - t0:.0f} s, "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
    words = json.load(open(os.path.join(a.model, "tokenizer.json")))["pre_tokenizer"]
    print(json.dumps({"refer": a.refer, "names": a.names, "bare_words": "Split" in json.dumps(words),
                      "digit_weight": a.digit_weight, "lr": a.lr, "batch": a.batch,
                      "chance": round(1 / len(APPS), 3), "curve": curve}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
