import pickle
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from envs.trajectory_cache import TrajectoryCache, namespace_of


def test_put_get_namespaces_and_persistence(tmp_path):
    p = tmp_path / "c.sqlite"
    a = TrajectoryCache(p, namespace_of("reasonerA", {"k": 1}))
    b = TrajectoryCache(p, namespace_of("reasonerB", {"k": 1}))
    a.put("q", (0,), {"x": np.arange(3)})
    assert b.get("q", (0,)) is None
    assert a.get("q", (1,)) is None
    reopened = TrajectoryCache(p, a.namespace)
    assert list(reopened.get("q", (0,))["x"]) == [0, 1, 2]
    assert len(reopened) == 1 and reopened.hits == 1


def test_pickles_across_processes(tmp_path):
    c = TrajectoryCache(tmp_path / "c.sqlite", "ns")
    c.put("q", (), 5)
    clone = pickle.loads(pickle.dumps(c))
    assert clone.get("q", ()) == 5


def test_survives_a_killed_writer(tmp_path):
    p = tmp_path / "c.sqlite"
    code = textwrap.dedent(f"""
        import os, signal
        from envs.trajectory_cache import TrajectoryCache
        c = TrajectoryCache({str(p)!r}, "ns")
        for i in range(50):
            c.put("q", (i,), {{"i": i}})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGKILL
    c = TrajectoryCache(p, "ns")
    assert len(c) == 50 and c.get("q", (49,)) == {"i": 49}


def test_corrupt_file_is_a_clear_error(tmp_path):
    p = tmp_path / "c.sqlite"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ValueError, match="not a usable SQLite file"):
        TrajectoryCache(p, "ns")
