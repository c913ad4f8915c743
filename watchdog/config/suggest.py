"""The known names close to a mistyped one, for "did you mean ...?" in configuration errors. Pure.

Only close names are suggested, or none: a far-fetched guess sends the reader the wrong way (DRAIN_GRACE
once got TPU_WATCHDOG_HOOKS_ON_DRAIN_END).
"""

from __future__ import annotations

import re

from watchdog.config.schema import ENV_PREFIX


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[._]", name.removeprefix(ENV_PREFIX).lower()) if w]


def _word_like(typed: str, known: str) -> bool:
    """The same word give or take a typo: a letter off (grce, hook), or two swapped (drian)."""
    import difflib  # only with a name to suggest for: every command that reads the config starts without it

    return sorted(typed) == sorted(known) or difflib.SequenceMatcher(None, typed, known).ratio() >= 0.75


def _all_like(words: list[str], among: list[str]) -> bool:
    return all(any(_word_like(word, other) for other in among) for word in words)


def suggest(unknown: str, known: list[str]) -> str:
    """' (did you mean X?)' naming only names that are close to `unknown`, or '' (a far-fetched guess
    sends the reader the wrong way): the one spelled almost the same, underscores aside (LOGLEVEL), else
    the fewest-worded names holding each of its words (GRACE: both graces), else the names it holds whole
    (LISTEN_ADDR), if there are at most three."""
    import difflib  # as in `_word_like`

    typed = _words(unknown)
    if not typed or all(len(w) < 3 for w in typed):
        return ""
    spelled = max(
        (difflib.SequenceMatcher(None, "".join(typed), "".join(_words(n))).ratio(), n) for n in known
    )
    if spelled[0] >= 0.85:
        matches = [spelled[1]]
    else:
        holding = [n for n in known if _all_like(typed, _words(n))]
        fewest = min((len(_words(n)) for n in holding), default=0)
        matches = [n for n in holding if len(_words(n)) == fewest]
        if not matches:  # a word too many (LISTEN_ADDR, CONFIG_FILE): the names it holds whole
            matches = [n for n in known if _all_like(_words(n), typed)]
    if not 1 <= len(matches) <= 3:
        return ""
    return f" (did you mean {' or '.join(repr(m) for m in matches)}?)"
