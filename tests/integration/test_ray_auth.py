"""Agents obey only their controller, on Ray: the agent actor has no ``__ray_call__`` and
keeps no readable token; the embedded cluster runs with Ray's token authentication; and a
cluster started by a plain ``ray start --head`` with a token is drilled with Ray's own
token, while a wrong or missing one is exit 2 within seconds, naming the fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from drillbit.core import netns
from drillbit.core.proc import ProcRef
from drillbit.transport.raycluster import EmbeddedCluster

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]
HERE = Path(__file__).parent / "drills"

ATTACKER = textwrap.dedent("""
    # another client of the cluster (it has the cluster's token: a local user, a notebook)
    import json, sys
    from drillbit.transport.raycluster import loopback_env
    loopback_env()
    import ray
    ray.init(address=sys.argv[1], namespace="drillbit", log_to_driver=False, logging_level="ERROR",
             _node_ip_address="127.0.0.1")
    actor = ray.get_actor(sys.argv[2], namespace="drillbit")
    out = {}
    try:
        out["ray_call"] = repr(ray.get(actor.__ray_call__.remote(lambda self: vars(self)), timeout=20))
    except Exception as exc:
        out["ray_call_refused"] = type(exc).__name__
    out["no_token"] = ray.get(actor.call.remote("info", {}, None), timeout=20)
    out["wrong_token"] = ray.get(actor.call.remote("launch", {"argv": ["true"], "env": {}, "cwd": None,
                                                              "out_path": "/dev/null", "stop_timeout": 1.0},
                                                   "0" * 32), timeout=20)
    out["right_token"] = ray.get(actor.call.remote("clock", {}, sys.argv[3]), timeout=20)
    print(json.dumps(out))
""")


@pytest.fixture
def embedded(tmp_path):
    from drillbit.transport.raycluster import loopback_env

    loopback_env()
    cluster = EmbeddedCluster(tmp_path, nodes=1, cpus_per_node=1)
    address = cluster.start(ProcRef.of(psutil.Process()))
    yield address
    import ray

    if ray.is_initialized():
        ray.shutdown()
    cluster.stop()


def test_the_agent_actor_answers_only_its_token_and_has_no_ray_call(tmp_path, embedded):
    import ray

    from drillbit.agent.rayactor import AgentActor
    from drillbit.transport import rayauth

    ray.init(address=embedded, namespace="drillbit", log_to_driver=False, logging_level="ERROR",
             _node_ip_address="127.0.0.1")
    name = f"drillbit-agent-audit-{os.getpid()}"
    actor = ray.remote(num_cpus=0)(AgentActor).options(name=name, namespace="drillbit").remote(
        "node-0", str(tmp_path / "state"), 0.0, None, "the-drills-token")
    assert ray.get(actor.__ray_ready__.remote(), timeout=60)
    out = subprocess.run([sys.executable, "-c", ATTACKER, embedded, name, "the-drills-token"], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    # before: __ray_call__ ran the attacker's function in the agent and handed back its _token
    assert "ray_call" not in seen and "ray_call_refused" in seen, seen
    assert seen["no_token"]["error"]["kind"] == "refused" and seen["wrong_token"]["error"]["kind"] == "refused"
    assert seen["right_token"]["ok"]["t"] > 0
    assert "the-drills-token" not in out.stdout
    ray.kill(actor)
    # the embedded cluster itself refuses a client without its token (Ray's token authentication is on)
    assert os.environ.get(rayauth.MODE) == "token"
    probe = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        from drillbit.core.errors import ConfigError
        from drillbit.transport import rayauth
        try:
            rayauth.check(sys.argv[1], "local", "no token anywhere Ray looks", sent=False)
        except ConfigError as exc:
            print("refused:", exc)
        """), embedded], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"RAY_AUTH_MODE": "disabled"})
    assert "refused:" in probe.stdout and "requires Ray token authentication" in probe.stdout, probe


HEAD = textwrap.dedent("""
    # a plain `ray start --head`, with a token as `ray get-auth-token --generate` makes one, in a
    # private network namespace (ray start binds every interface); then drills against it
    set -u
    export HOME="$1" RAY_USAGE_STATS_ENABLED=0
    unset RAY_AUTH_MODE RAY_AUTH_TOKEN RAY_AUTH_TOKEN_PATH
    cd "$1"
    "$2/ray" get-auth-token --generate > /dev/null 2>&1
    "$2/ray" start --head --port 6390 --num-cpus 4 --include-dashboard false --block > head.log 2>&1 &
    head=$!
    for i in $(seq 90); do grep -q "Ray runtime started" head.log && break; sleep 1; done
    run() { "$BIN/drill" run kill-rank-fast --cluster "$1" --config drill.yaml --drills "$DRILLS" > "out-$2.txt" 2>&1;
            echo "$1 $?"; }
    BIN="$2" DRILLS="$3"
    run staging 1
    run wrong 2
    mv .ray/auth_token auth_token.kept
    run staging 3
    kill -TERM $head; wait $head
""")


@pytest.mark.skipif(not netns.available(), reason="needs a network namespace")
def test_a_default_ray_start_head_with_a_token_is_drilled_and_a_wrong_token_is_exit_2(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "drill.yaml").write_text(textwrap.dedent("""
        clusters:
          staging: {engine: ray, address: "127.0.0.1:6390", nodes: 1}
          wrong: {engine: ray, address: "127.0.0.1:6390", nodes: 1, ray_auth_token: "0000000000000000"}
    """))
    bindir = str(Path(sys.executable).parent)
    script = tmp_path / "head.sh"
    script.write_text(HEAD)
    out = subprocess.run([sys.executable, "-m", "drillbit.core.netns", "bash", str(script), str(home), bindir, str(HERE)],
                         capture_output=True, text=True, timeout=400)
    rows = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            rows.setdefault(parts[0], []).append(int(parts[1]))
    assert rows.get("staging", []) and rows.get("wrong"), out.stdout + out.stderr[-3000:]
    assert rows["staging"][0] == 0, (home / "out-1.txt").read_text()[-3000:]  # Ray's own ~/.ray/auth_token, sent
    # before: 20 s of InvalidAuthToken warnings, then "harness error", exit 5
    assert rows["wrong"] == [2], (home / "out-2.txt").read_text()[-3000:]
    assert "refused the Ray token from the cluster entry's ray_auth_token" in (home / "out-2.txt").read_text()
    assert rows["staging"][1:] == [2], (home / "out-3.txt").read_text()[-3000:]
    said = (home / "out-3.txt").read_text()
    assert "requires Ray token authentication" in said and "ray_auth_token" in said, said[-2000:]


def test_rays_environment_is_set_before_any_import_of_ray():
    """On a machine with a routed interface Ray rewrites a loopback cluster address to that
    interface's address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set before Ray was
    imported; the embedded cluster's token is the first thing to import Ray, and must set it
    (found when ray.init to 127.0.0.1 waited on 192.0.2.2 for minutes)."""
    code = ("from drillbit.transport import rayauth\n"
            "rayauth.use(rayauth.embedded_token())\n"
            "import ray._private.ray_constants as rc\n"
            "from ray._private.services import resolve_ip_for_localhost\n"
            "print(rc.ENABLE_RAY_CLUSTER, resolve_ip_for_localhost('127.0.0.1'))\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.split() == ["False", "127.0.0.1"], done.stdout + done.stderr[-2000:]
