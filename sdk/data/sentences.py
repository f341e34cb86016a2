"""Seeded sentence grammar for the synthetic corpus: many varied English sentences, no data.

``make_sentence(rng, n_words)`` draws clauses from a small phrase-structure grammar over word
lists (about 10^12 distinct sentences), including questions, numbers, names and lists, until
the sentence has roughly ``n_words`` words. The same generator state gives the same sentence.
"""

from __future__ import annotations

import numpy as np

DETERMINERS = ["the", "a", "this", "that", "every", "one", "my", "your", "our", "their", "some"]
ADJECTIVES = (
    "old new small large quiet loud bright dark warm cold green red blue yellow heavy light "
    "quick slow happy sad careful strange simple clever tired busy empty full broken shiny "
    "wooden metal gentle rough smooth sharp soft early late narrow wide tall short young "
    "ancient modern rare common famous hidden open closed clean dusty wet dry sweet bitter "
    "golden silver noisy calm distant nearby friendly serious curious lucky"
).split()
NOUNS = (
    "dog cat bird horse teacher doctor farmer driver child student artist neighbour captain "
    "baker sailor pilot singer writer window table chair garden river bridge station market "
    "village city mountain forest island kitchen library museum letter story song picture "
    "bottle basket ladder hammer engine bicycle train boat lamp clock mirror pocket jacket "
    "shoe hat coffee bread apple orange lemon cheese soup tomato onion carrot potato road "
    "door wall roof floor field lake beach cloud storm summer winter morning evening "
    "computer phone camera radio ticket map key box bag coin stone tree flower leaf"
).split()
PLURALS = {n: (n[:-1] + "ies" if n.endswith("y") and n[-2] not in "aeiou"
               else n + "es" if n.endswith(("s", "sh", "ch", "x", "o")) else n + "s")
           for n in NOUNS}
PLURALS.update({"child": "children", "leaf": "leaves", "shoe": "shoes", "radio": "radios",
                "piano": "pianos", "photo": "photos"})
VERBS_PAST = (
    "found lost carried painted opened closed cleaned fixed moved pushed pulled watched "
    "followed answered borrowed bought sold built broke dropped lifted washed visited "
    "noticed described remembered ignored counted checked packed covered filled emptied "
    "chased caught threw kicked held shared showed wrote read sang drew"
).split()
VERBS_BASE = (
    "find carry paint open close clean fix move push pull watch follow answer borrow buy "
    "sell build drop lift wash visit notice describe remember count check pack cover fill "
    "chase catch throw hold share show write read draw"
).split()
ADVERBS = (
    "slowly quickly carefully quietly loudly happily suddenly gently easily rarely often "
    "finally almost nearly really simply"
).split()
PLACES = [
    "near the {noun}", "behind the {noun}", "under the {adj} {noun}", "in the {noun}",
    "across the {noun}", "next to the {noun}", "at the {noun}", "on top of the {noun}",
    "outside the {noun}", "beside the {adj} {noun}",
]
TIMES = (
    ["yesterday", "today", "last night", "this morning", "on monday", "on friday evening",
     "in the afternoon", "before lunch", "after dinner", "at {num} o'clock", "in {month}",
     "every {day}", "{num} days ago", "next week", "at midnight", "at dawn"]
)
MONTHS = ("january february march april may june july august september october november "
          "december").split()
DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
NAMES = (
    "anna ben clara david emma frank grace henry isla jack kate liam maria noah olivia peter "
    "quinn rosa sam tara umar vera will xena yusuf zoe"
).split()
CONNECTORS = ["and", "but", "so", "because", "while", "although", "before", "after", "then"]


def _pick(rng: np.random.Generator, words: list[str]) -> str:
    return words[int(rng.integers(len(words)))]


def _fill(rng: np.random.Generator, pattern: str) -> str:
    return pattern.format(
        noun=_pick(rng, NOUNS), adj=_pick(rng, ADJECTIVES), num=int(rng.integers(2, 13)),
        month=_pick(rng, MONTHS), day=_pick(rng, DAYS),
    )


def _noun_phrase(rng: np.random.Generator) -> str:
    r = rng.random()
    if r < 0.2:
        return _pick(rng, NAMES)
    if r < 0.35:
        return f"{int(rng.integers(2, 100))} {PLURALS[_pick(rng, NOUNS)]}"
    if r < 0.65:
        return f"{_pick(rng, DETERMINERS)} {_pick(rng, ADJECTIVES)} {_pick(rng, NOUNS)}"
    return f"{_pick(rng, DETERMINERS)} {_pick(rng, NOUNS)}"


def _clause(rng: np.random.Generator) -> str:
    kind = int(rng.integers(6))
    subj, obj = _noun_phrase(rng), _noun_phrase(rng)
    place, when = _fill(rng, _pick(rng, PLACES)), _fill(rng, _pick(rng, TIMES))
    if kind == 0:
        return f"{subj} {_pick(rng, VERBS_PAST)} {obj}"
    if kind == 1:
        return f"{subj} {_pick(rng, ADVERBS)} {_pick(rng, VERBS_PAST)} {obj} {place}"
    if kind == 2:
        return f"{subj} {_pick(rng, VERBS_PAST)} {obj} {when}"
    if kind == 3:
        return f"{when} {subj} {_pick(rng, VERBS_PAST)} {obj}"
    if kind == 4:
        return f"the {_pick(rng, NOUNS)} {place} was {_pick(rng, ADJECTIVES)}"
    return f"{subj} and {_noun_phrase(rng)} {_pick(rng, VERBS_PAST)} {obj}"


def _question(rng: np.random.Generator) -> str:
    kind = int(rng.integers(3))
    if kind == 0:
        return f"did {_noun_phrase(rng)} {_pick(rng, VERBS_BASE)} {_noun_phrase(rng)}"
    if kind == 1:
        return f"where is the {_pick(rng, ADJECTIVES)} {_pick(rng, NOUNS)}"
    return f"can you {_pick(rng, VERBS_BASE)} {_noun_phrase(rng)} {_fill(rng, _pick(rng, TIMES))}"


def make_sentence(rng: np.random.Generator, n_words: int = 10) -> str:
    """A sentence of about ``n_words`` words (at least one clause), ending in . or ?."""
    if rng.random() < 0.15:
        parts = [_question(rng)]
        end = "?"
    elif rng.random() < 0.1:
        parts = [f"please {_pick(rng, VERBS_BASE)} {_noun_phrase(rng)}"]
        end = "."
    else:
        parts = [_clause(rng)]
        end = "."
    while end == "." and sum(len(p.split()) for p in parts) < n_words:
        parts.append(_pick(rng, CONNECTORS) + " " + _clause(rng))
    text = parts[0]
    for p in parts[1:]:
        text += (", " if rng.random() < 0.5 else " ") + p
    return text[0].upper() + text[1:] + end
