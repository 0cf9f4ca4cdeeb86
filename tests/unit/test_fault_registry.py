"""Fault plugins are checked when they are registered, with a message that names the fix."""
from __future__ import annotations

import pytest

from drillbit.errors import DrillError
from drillbit.faults import check_plugin, registry
from drillbit.faults.base import Fault


def test_builtin_faults_registered_under_their_names():
    assert {"kill-rank", "hang-collective", "slow-rank", "throttle-clocks", "corrupt-checkpoint",
            "restore-hang", "dataloader-hang", "fail-node-replacement"} <= set(registry())
    assert all(cls.name == name for name, cls in registry().items())


def test_plugin_without_heal_is_refused_naming_the_method():
    class NoHeal(Fault):
        name = "no-heal"

        def plan(self, targets, params): ...
        def inject(self, target, params): ...
        def confirm(self, handle): ...

    with pytest.raises(DrillError, match=r"mypkg:NoHeal: implement `heal`"):
        check_plugin("mypkg:NoHeal", NoHeal)


def test_plugin_that_is_not_a_fault_is_refused():
    with pytest.raises(DrillError, match="not a subclass of drillbit.faults.base.Fault"):
        check_plugin("mypkg:thing", object)
