"""`--dist loadgroup` as tests/conftest.py means it: each module of a group on one worker, in the run order.

pytest-xdist's own loadgroup puts a test in a group by appending '@NAME' (its xdist_group mark) to the test's
node id, through `item._nodeid`; pytest 9.2 keeps node ids in another attribute, so the append is lost and
every test of a group went to whichever worker was free (the .deb built and its container booted on three
workers, the two multi-host JAX jobs side by side). This scheduler does not depend on that: the controller
reads the group from the test's path (tests/conftest.py's ONE_WORKER), and hands the units out in collection
order, which tests/conftest.py sorts (RUN_FIRST), instead of xdist's default of the biggest groups first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling


class GroupsByPath(LoadGroupScheduling):
    """Units of work: one per group of `groups` (module path -> group name), one per other test."""

    def __init__(self, config: pytest.Config, log: Any, groups: Mapping[str, str]) -> None:
        super().__init__(config, log)
        self.groups = groups

    def _split_scope(self, nodeid: str) -> str:
        # A group name has no '::', so it never equals a test's node id.
        return self.groups.get(nodeid.partition("::")[0], nodeid)

    def schedule(self) -> None:
        # The units in collection order: xdist's reorder would put the biggest groups before the soak.
        self.config.option.loadscopereorder = False
        super().schedule()
