"""Which of many strings occur in a text, found in one read of the text.

Testing `string in text` for each of n strings reads the text up to n times. Here each string is
indexed by the one of its runs of `RUN` characters that is rarest among the runs of all the
strings (the string itself when shorter), and compared with the text only where that run occurs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import chain

RUN = 4  # characters in the runs strings are indexed by


@dataclass(frozen=True)
class Substrings:
    """Strings indexed by one run of each; `found_in` says which of them a text holds."""

    anchors: Mapping[str, tuple[tuple[str, int], ...]]  # run -> (string, the run's offset in it)
    lengths: tuple[int, ...]  # of the runs: RUN, and those of strings shorter than RUN

    @classmethod
    def of(cls, strings: Iterable[str]) -> Substrings:
        """The index of `strings`."""
        runs = {string: _runs(string) for string in set(strings)}
        shared = Counter(chain.from_iterable(runs.values()))
        anchors: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for string, each in runs.items():
            run = min(each, key=shared.__getitem__)
            anchors[run].append((string, each.index(run)))
        return cls(
            {run: tuple(anchored) for run, anchored in anchors.items()},
            tuple(sorted({len(run) for run in anchors})),
        )

    def found_in(self, text: str) -> set[str]:
        """The indexed strings that occur in `text`."""
        found: set[str] = set()
        for start in range(len(text) + 1):  # the end too: the empty string is there
            for length in self.lengths:
                for string, offset in self.anchors.get(text[start : start + length], ()):
                    begin = start - offset
                    if begin >= 0 and string not in found and text.startswith(string, begin):
                        found.add(string)
        return found


def _runs(string: str) -> list[str]:
    """The runs of RUN characters in `string`, in order (the string itself when shorter)."""
    return [string[at : at + RUN] for at in range(max(1, len(string) - RUN + 1))]
