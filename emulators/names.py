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
_EXTENSIONS = ("pdf", "txt", "docx", "xlsx", "csv", "zip", "png", "jpg", "mp3", "wav", "odt", "pptx")


def made_up_name(rng: random.Random, like: str, avoid: frozenset[str] = frozenset()) -> str:
    """A name no screen shows, shaped as ``like``: as many words (and hyphenated parts), each capitalised
    where ``like``'s is, of one to three made-up syllables; a file name (``jazz_mix.mp3``) gives one of the same kind
    (``rulo_ket.pdf``: parts joined by ``_``, an extension). Never one of ``avoid`` (case ignored).

        >>> made_up_name(random.Random(1), "Wi-Fi"), made_up_name(random.Random(1), "road_trip.mp3")
        ('Dit-Vofot', 'dit_vofot.png')
    """
    def word(cap: bool) -> str:
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
