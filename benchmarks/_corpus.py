"""A deterministic corpus for bench_heads.py: sentences of 10–30 words, with commas and end marks."""

from __future__ import annotations

import random

WORDS = """the a an this that these those some every each my your our their his her its one two three
cat dog bird child teacher city river mountain book letter window garden market house road story song
friend doctor farmer painter student scientist engine machine model language question answer idea plan
morning evening winter summer night day year week moment history music water light paper table door
runs walks reads writes sees finds builds opens closes carries follows watches helps brings makes takes
gives keeps leaves shows tells asks learns remembers forgets changes moves turns holds
quickly slowly quietly carefully often never always again today tomorrow yesterday together alone
old new small large bright dark quiet loud early late warm cold green blue red long short happy tired
in on under over near with without after before during through behind across between around
and but because while although when if so then yet""".split()
MARKS = ".", ".", ".", "?", "!"


def sentences(count: int, seed: int = 13) -> list[str]:
    """`count` sentences of 10 to 30 words, the same for the same seed."""
    generator = random.Random(seed)
    lines = []
    for _ in range(count):
        words = [generator.choice(WORDS) for _ in range(generator.randint(10, 30))]
        for index in range(2, len(words) - 2):
            if generator.random() < 0.08:
                words[index] += ","
        words[0] = words[0].capitalize()
        lines.append(" ".join(words) + generator.choice(MARKS))
    return lines


def write_corpus(path, count: int, seed: int = 13) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(sentences(count, seed)) + "\n")
