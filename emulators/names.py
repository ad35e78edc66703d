"""Made-up names: the names a screen may show in place of a real one, shaped like it.

Training with them (renamed demonstrations in the warm start, renamed targets in RL rollouts) leaves a
model no name to memorise: it has to copy the goal's name to the screen's element, which is what carries
over to targets it never saw.
"""

from __future__ import annotations

import random
import re

__all__ = ["made_up_name"]


#: the pieces of a made-up name (:func:`made_up_name`): syllables of a consonant, a vowel and maybe a
#: consonant, and the extensions of file names
_ONSETS, _VOWELS, _CODAS = "bcdfghjklmnprstvwz", "aeiou", "klmnrst"
#: real words a made-up name's word may be (``words`` of them): names on screens are mostly words, which a
#: tokenizer often holds as one token each, where made-up syllables split into pieces; a model that copied
#: only syllables in training copies such names badly. None is a word of a name of the webapps phone.
_WORDS = tuple("""camera gallery photo alarm timer weather maps radio garden market river window paper letter
travel recipes books games news health fitness wallet store video podcast library scanner compass notebook
journal projects reports archive backup drafts invoices receipts brightness volume network battery privacy
security keyboard language accounts update theme fonts printer hotspot calculator translator recorder lamp
mail inbox email contact event song play pause screen search""".split())
_EXTENSIONS = ("pdf", "txt", "docx", "xlsx", "csv", "zip", "png", "jpg", "mp3", "wav", "odt", "pptx")


def made_up_name(rng: random.Random, like: str, avoid: frozenset[str] = frozenset(), words: float = 0.5) -> str:
    """A name no screen shows, shaped as ``like``: as many words (and hyphenated parts), each capitalised
    where ``like``'s is; each word a real one with probability ``words`` (never a word of a name in
    ``avoid``), else one to three made-up syllables; a file name (``jazz_mix.mp3``) gives one of the same
    kind (``rulo_ket.pdf``: parts joined by ``_``, an extension). Never one of ``avoid`` (case ignored).

        >>> made_up_name(random.Random(1), "Wi-Fi"), made_up_name(random.Random(6), "road_trip.mp3")
        ('Garden-Screen', 'vil_pilo.pptx')
    """
    if not 0.0 <= words <= 1.0:
        raise ValueError(f"words must be between 0 and 1, got {words}")
    taken = {part for a in avoid for part in re.split(r"[\s_.-]+", a.casefold()) if part}
    real = [w for w in _WORDS if w not in taken]

    def word(cap: bool) -> str:
        if real and rng.random() < words:
            w = rng.choice(real)
            return w.capitalize() if cap else w
        w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + (rng.choice(_CODAS) if rng.random() < 0.3 else "")
                    for _ in range(rng.randint(1, 3)))
        return w.capitalize() if cap else w

    banned = {a.casefold() for a in avoid}
    file = re.fullmatch(r"([^\s.]+)\.(\w{2,5})", like)
    for _ in range(100):
        if file:
            stem = "_".join(word(False) for _ in file.group(1).split("_"))
            name = f"{stem}.{rng.choice(_EXTENSIONS)}"
        else:
            name = " ".join("-".join(word(p[:1].isupper()) for p in w.split("-")) for w in like.split()) or word(True)
        if name.casefold() not in banned and name != like:
            return name
    raise ValueError(f"no made-up name like {like!r} outside the names to avoid")
