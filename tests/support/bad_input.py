"""What the bad-input tests (tests/system/test_bad_*.py) share: the CLI's path, Hypothesis budgets and
strategies of arbitrary JSON and of text without lone surrogates."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st

CLI = str(Path(sys.executable).parent / "tpu-watchdog")
FEW = settings(max_examples=60, deadline=None)
SOME = settings(max_examples=150, deadline=None)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), st.just(10**400)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16,
)
clean_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)  # no lone surrogates
