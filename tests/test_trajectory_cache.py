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


def test_records_are_not_pickled_and_a_pickle_is_never_loaded(tmp_path):
    """A cache file from shared storage must not run code when read: records are encoded JSON; a planted pickle is
    refused with a clear error and its payload never runs."""
    import sqlite3

    from envs.trajectory_cache import TrajectoryCacheError

    p = tmp_path / "c.sqlite"
    c = TrajectoryCache(p, "ns")
    c.put("q", (0,), {"h": np.ones(2, dtype=np.float16), "t": (1, 2)})
    raw = sqlite3.connect(p).execute("SELECT value FROM steps").fetchone()[0]
    assert raw.startswith(b"KRJ1") and b"numpy" not in raw

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    db = sqlite3.connect(p)
    db.execute("INSERT OR REPLACE INTO steps VALUES (?, ?)", ("ns|evil|", pickle.dumps(Payload())))
    db.commit()
    with pytest.raises(TrajectoryCacheError, match=r"c\.sqlite: record 'ns\|evil\|': not a Kairos record"):
        TrajectoryCache(p, "ns").get("evil", ())
    assert not marker.exists()


def test_step_records_round_trip_exactly():
    from envs.records import decode, encode
    from envs.retrieval_env import StepRecord

    rec = StepRecord(text="Step 1 : a .", content="a .", is_answer=False, n_tokens=4, seconds=0.1 + 0.2,
                     features={"step_embedding": np.linspace(0, 1, 5).astype(np.float16),
                               "output": np.array([np.nan, np.inf, -1e-30], dtype=np.float32)},
                     signals={"minprob": 0.123456789012345}, mask={"output": 1.0},
                     before={"question": "Q", "front": (), "steps": ("s",), "ids": [1, 2], "done": False},
                     evidence=("e1",), passage_ids=("F1",))
    back = decode(encode(rec))
    assert isinstance(back, StepRecord) and back.seconds == rec.seconds and back.evidence == ("e1",)
    assert back.features["step_embedding"].dtype == np.float16
    np.testing.assert_array_equal(back.features["step_embedding"], rec.features["step_embedding"])
    np.testing.assert_array_equal(back.features["output"], rec.features["output"])
    assert back.before["steps"] == ("s",) and back.signals == rec.signals


def test_a_damaged_cache_mid_run_is_a_clear_error(tmp_path):
    from envs.trajectory_cache import TrajectoryCacheError

    p = tmp_path / "c.sqlite"
    c = TrajectoryCache(p, "ns", lru_size=1)
    for i in range(50):
        c.put("q", (i,), {"x": "y" * 500})
    c.close()
    data = bytearray(p.read_bytes())
    data[4096:12288] = b"\xff" * 8192  # overwrite pages after the header
    p.write_bytes(bytes(data))
    reader = TrajectoryCache(p, "ns", lru_size=1)
    with pytest.raises(TrajectoryCacheError, match=r"c\.sqlite: cannot read .*delete it"):
        for i in range(50):
            reader.get("q", (i,))


def test_namespace_holds_content_not_paths(tmp_path):
    """A moved copy of the artifact (or a clone elsewhere) shares the cache; a retrained probe in the same folder
    does not replay stale scores."""
    import shutil

    from envs.components import build_components
    from envs.core.microworld.artifact import default_artifact_path
    from envs.env_config import EnvConfig

    art = default_artifact_path()
    moved = tmp_path / "moved_world"
    shutil.copytree(art, moved)
    base = build_components(EnvConfig(split="dev", max_questions=2)).namespace
    assert build_components(EnvConfig(split="dev", max_questions=2, artifact=str(moved))).namespace == base

    probe = tmp_path / "probe"
    shutil.copytree(art / "probes" / "pulse", probe)
    with_probe = build_components(EnvConfig(split="dev", max_questions=2, probes={"p": str(probe)})).namespace
    w = probe / "weights.safetensors"
    w.write_bytes(w.read_bytes())  # same bytes, other mtime: same namespace
    assert build_components(EnvConfig(split="dev", max_questions=2, probes={"p": str(probe)})).namespace == with_probe
    meta = probe / "probe.json"
    meta.write_text(meta.read_text().replace('"threshold"', '"threshold" ', 1))  # "retrained": other bytes
    assert build_components(EnvConfig(split="dev", max_questions=2, probes={"p": str(probe)})).namespace != with_probe


#: trajectory-cache namespaces of micro-world envs, recorded before the env config was typed: a change
#: here invalidates every existing cache of such an env — only ever on purpose (a new RECORD_VERSION, a new artifact).
#: On purpose since: the envs that observe U_cons (the default rsus_components [ent, cons]) moved when U_cons's samples
#: were charged to their step (state_signals 4); "train-default" (RSUS[ent]) did not
PINNED_NAMESPACES = {
    "default": ({}, "f8f2418441fbad56"),
    # TrainConfig's default env (the microworld preset + its env_config defaults)
    "train-default": ({"task": "microworld", "reasoner": "micro", "retriever": "bm25", "split": "train",
                       "max_questions": 256, "rsus_components": ["ent"], "cache_path": "runs/train/cache.sqlite"},
                      "6c46ba38dd9c5f23"),
    # RSUS settings: the keys a config sets enter (an unset key stays out, as before the settings were typed)
    "rsus-options": ({"rsus_components": ["ent", "cons"], "rsus_options": {"cons_only_at_markers": False,
                                                                            "n_samples": 3, "agreement": "jaccard",
                                                                            "bm25_k": 2}}, "16a10d6de24bb91e"),
    "rsus-weights": ({"rsus_components": ["ent", "cons"], "rsus_options": {"weights": "paper"}}, "6aaba4d52751029a"),
    # the fact-disjoint condition selects questions: not part of the namespace
    "fact-holdout": ({"fact_holdout": {"share": 0.33, "seed": 0, "keep": "train"}}, "f8f2418441fbad56"),
    "querygen": ({"querygen": True, "query_modes": ["step", "info_need"],
                  "signals": ["pulse", "output", "rsus", "content"]}, "63fbe4aa9854685d"),
}


@pytest.mark.parametrize("name", sorted(PINNED_NAMESPACES))
def test_the_namespace_of_a_micro_world_env_is_pinned(name, monkeypatch):
    """The namespace is a hash of the EnvConfig's outcome fields (``envs.components._namespace``); typing the config
    (nested settings as dataclasses, presets applied on load) must not change it."""
    import agents.query
    from envs.components import build_components
    from envs.env_config import EnvConfig

    monkeypatch.setattr(agents.query, "tagger_name", lambda: "pattern")  # the POS tagger installed where recorded
    cfg, expected = PINNED_NAMESPACES[name]
    assert build_components(EnvConfig.from_dict(cfg)).namespace == expected
    if name == "train-default":
        from train.config import TrainConfig

        assert build_components(TrainConfig().env_config).namespace == expected


def test_a_new_file_opened_by_processes_at_once_is_opened_again_not_refused(tmp_path, monkeypatch):
    """Two shards opening a new cache race to switch it to WAL; SQLite answers the loser "database is locked" at
    once (no busy wait). The opener tries again; only a lock that outlasts its wait is the error."""
    import sqlite3

    import envs.trajectory_cache as tc

    real, calls = sqlite3.connect, []

    class Racing:  # the first connection loses the race on its first statement
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *a):
            if not calls or calls[-1] != "raced":
                calls.append("raced")
                raise sqlite3.OperationalError("database is locked")
            return self.db.execute(sql, *a)

        def close(self):
            calls.append("closed")
            self.db.close()

    monkeypatch.setattr(tc.sqlite3, "connect", lambda *a, **k: Racing(real(*a, **k)) if not calls else real(*a, **k))
    db = tc.open_store(tmp_path / "c.sqlite")
    assert calls == ["raced", "closed"] and db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()

    holder = real(str(tmp_path / "held.sqlite"), isolation_level=None)  # a lock held longer than the wait
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(tc.sqlite3, "connect", real)
    with pytest.raises(tc.TrajectoryCacheError, match="locked by another process"):
        tc.open_store(tmp_path / "held.sqlite", wait_s=0.3)
    holder.rollback()
