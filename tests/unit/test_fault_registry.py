"""Fault plugins are checked when they are registered, with a message that names the fix."""
from __future__ import annotations

import pytest

from drillbit.core.errors import DrillError
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


def _plugin(binds: tuple, params_fields: dict, needs_checkpoint: bool = False):
    from pydantic import create_model

    from drillbit.faults.base import Params as BaseParams

    model = create_model("BoundParams", __base__=BaseParams, **params_fields)

    class Bound(Fault):
        name = "bound"
        Params = model

        def plan(self, targets, params): ...
        def inject(self, target, params): ...
        def confirm(self, handle): ...
        def heal(self, target, params, state): ...

    Bound.binds = binds
    Bound.needs_checkpoint = needs_checkpoint
    return Bound


def test_a_binding_needs_its_params_and_a_known_name():
    with pytest.raises(DrillError, match="binds 'launcher' needs the param\\(s\\) launcher"):
        check_plugin("mypkg:Bound", _plugin(("launcher",), {}))
    with pytest.raises(DrillError, match="binds 'pool' is not a binding"):
        check_plugin("mypkg:Bound", _plugin(("pool",), {}))
    with pytest.raises(DrillError, match="needs_checkpoint without binds 'checkpoint'"):
        check_plugin("mypkg:Bound", _plugin((), {}, needs_checkpoint=True))
    check_plugin("mypkg:Bound", _plugin(("launcher",), {"launcher": (str | None, None)}))


def test_the_profile_fills_only_what_a_fault_declares(tmp_path, monkeypatch):
    """A param named like a binding is not filled unless the fault binds it: nothing is
    guessed from a name. kill-node binds the launcher; kill-rank has none to take."""
    from drillbit.loop.bind import job_params
    from drillbit.spec.config import BUILTIN_JOBS
    from drillbit.spec.models import DrillSpec

    job = BUILTIN_JOBS["reference"].model_copy(update={"launcher": r"my-launcher\b"})
    spec = DrillSpec.model_validate({"name": "k", "class": "fail-stop", "summary": "s",
                                     "fault": {"type": "kill-node", "trigger": {"at_step": 5}}})
    assert job_params(spec, job, tmp_path).launcher == r"my-launcher\b"
    unbound = _plugin((), {"launcher": (str | None, None)})
    monkeypatch.setattr("drillbit.loop.bind.get_fault", lambda name: unbound())
    assert job_params(spec, job, tmp_path).launcher is None
