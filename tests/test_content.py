"""Content in the observation (question / step / context embeddings) and the policy's PCA projection of it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from envs.core.config import ConfigError

CONTENT = {"split": "dev", "rsus_components": ["ent"], "signals": ["pulse", "output", "rsus", "content"]}
FIELDS = ("question_embedding", "step_embedding", "context_embedding")


def _env(**kw):
    from envs.registration import make_env

    return make_env("microworld", {**CONTENT, **kw})


def test_content_fields_shape_and_question_is_first_context():
    env = _env(content_layers=[3, 6])
    hidden = env.c.reasoner.world.model.config.hidden_size
    for f in FIELDS:
        assert env.observation_space[f].shape == (2 * hidden,)
    obs, info = env.reset(options={"question_index": 0})
    assert env.observation_space.contains(obs)
    assert np.all(obs["mask"] == 1.0)
    np.testing.assert_array_equal(obs["question_embedding"], obs["context_embedding"])  # step 1: same state
    q0 = obs["question_embedding"].copy()
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs["question_embedding"], q0)  # kept for the whole episode
    assert not np.array_equal(obs["context_embedding"], q0)       # the context moved on
    env.close()


def test_content_comes_from_the_generation_pass():
    """step_embedding = mean hidden state over the step's content positions and context_embedding = the state at the
    last context token, both equal to a separate forward pass over context + step (no second pass in the env)."""
    env = _env(content_layers=[2, 6])
    obs, info = env.reset(options={"question_index": 3})
    r = env.c.reasoner
    state = r.start(env.c.question_text(env.c.questions[3]))
    (step, _), = r.next_step([state])
    ids = list(state.gen.ids) + list(step.token_ids)
    with torch.no_grad():
        out = r.world.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    hs = [h[0].numpy() for h in out.hidden_states]
    n_ctx = len(state.gen.ids)
    header = len(step.token_ids) - len(step.logprobs)  # content tokens + end token carry logprobs
    gen_pos = range(n_ctx + header - 1, n_ctx + len(step.token_ids) - 1)  # inputs that generated them
    want_step = np.concatenate([hs[layer][list(gen_pos)].mean(0) for layer in (2, 6)])
    want_ctx = np.concatenate([hs[layer][n_ctx - 1] for layer in (2, 6)])
    # the record stores half precision
    np.testing.assert_allclose(obs["step_embedding"], want_step, rtol=2e-3, atol=2e-2)
    np.testing.assert_allclose(obs["context_embedding"], want_ctx, rtol=2e-3, atol=2e-2)
    env.close()


def test_content_round_trips_through_the_trajectory_cache(tmp_path):
    cfg = {"cache_path": str(tmp_path / "c.sqlite")}
    fresh = _env(**cfg)
    o1, _ = fresh.reset(options={"question_index": 5})
    o2, *_ = fresh.step(1)
    fresh.close()
    replay = _env(**cfg)
    p1, _ = replay.reset(options={"question_index": 5})
    p2, *_ = replay.step(1)
    assert replay.cache.hits >= 2 and replay.cache.misses == 0
    for f in FIELDS + ("pulse", "mask"):
        np.testing.assert_array_equal(o1[f], p1[f])
        np.testing.assert_array_equal(o2[f], p2[f])
    replay.close()


def test_content_is_masked_without_hidden_states():
    from agents.reasoners.base import Capabilities, Step
    from agents.signals.extractor import SignalExtractor

    ex = SignalExtractor(["step_embedding", "context_embedding"], Capabilities(logprobs=True), backend="openai",
                         context={"n_layers": 4, "hidden_size": 8})
    out = ex(Step(1, "Step 1 : x", "x", False, logprobs=np.zeros(2)))
    assert out["mask"].tolist() == [0.0, 0.0]
    assert out["step_embedding"].shape == (16,) and not out["step_embedding"].any()


def test_content_config_errors():
    from envs.env_config import EnvConfig

    with pytest.raises(ConfigError, match="unknown observation group 'contnet'"):
        EnvConfig.from_dict({"signals": ["pulse", "contnet"]})
    with pytest.raises(ConfigError, match="content_layers"):
        EnvConfig.from_dict({"signals": ["content"], "content_layers": []})
    with pytest.raises(ValueError, match=r"layers \[9\] must lie in \[0, 6\]"):
        _env(content_layers=[9])


def test_new_fields_at_their_defaults_keep_the_namespace(monkeypatch):
    """content_layers, rsus_options and fact_holdout at their defaults leave the namespace as it was before the
    fields existed (old caches stay valid); set, the outcome-relevant ones move it."""
    from envs.components import _namespace
    from envs.env_config import EnvConfig

    cfg = EnvConfig.from_dict({"split": "dev"})
    now = _namespace("micro", ["x"], cfg)
    orig = EnvConfig.to_dict
    new = ("content_layers", "rsus_options", "fact_holdout")
    monkeypatch.setattr(EnvConfig, "to_dict", lambda self: {k: v for k, v in orig(self).items() if k not in new})
    assert _namespace("micro", ["x"], cfg) == now
    monkeypatch.undo()
    assert _namespace("micro", ["x"], cfg.replace(content_layers=[2, 6])) != now
    assert _namespace("micro", ["x"], cfg.replace(rsus_options={"n_samples": 2})) != now
    assert _namespace("micro", ["x"], cfg.replace(fact_holdout={"share": 0.3})) == now  # question selection only


# ---------------------------------------------------------------- the policy-side projection
def _spec(reduce):
    from policies.rl.net import PolicySpec

    return PolicySpec(fields={"step_embedding": 6, "pulse": 2}, arch="mlp", reduce=reduce)


def test_reducer_is_the_pca_of_the_unmasked_rows():
    from policies.rl.net import PolicyNet

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)) @ np.diag([5, 3, 1, 0.1, 0.1, 0.1])
    x = np.vstack([x, np.zeros((50, 6))])  # masked rows: ignored by the fit, mapped to zero
    net = PolicyNet(_spec({"step_embedding": 2}))
    assert net.needs_reducer_fit
    obs = {"step_embedding": torch.tensor(x, dtype=torch.float32), "pulse": torch.zeros(250, 2)}
    net.fit_reducers(obs)
    assert not net.needs_reducer_fit
    proj = net.red_proj_step_embedding.numpy()
    np.testing.assert_allclose(proj.T @ proj, np.eye(2), atol=1e-5)
    _, _, vt = np.linalg.svd(x[:200] - x[:200].mean(0), full_matrices=False)
    np.testing.assert_allclose(np.abs(proj.T @ vt[:2].T), np.eye(2), atol=1e-4)
    red = net._reduced(obs, "step_embedding")
    assert red.shape == (250, 2) and torch.all(red[200:] == 0)
    assert net.proj["step_embedding"].in_features == 2


def test_reducer_travels_with_the_export(tmp_path):
    from policies.rl.export import LearnedTrigger, export_policy, load_policy
    from policies.rl.net import PolicyNet

    net = PolicyNet(_spec({"step_embedding": 3}))
    obs = {"step_embedding": torch.randn(40, 6), "pulse": torch.randn(40, 2)}
    net.fit_reducers(obs)
    net.update_normalizer(obs)
    path = export_policy(net, tmp_path / "p")
    back, meta = load_policy(path)
    assert meta["spec"]["reduce"] == {"step_embedding": 3}
    torch.testing.assert_close(back.red_proj_step_embedding, net.red_proj_step_embedding)
    o = {k: v[:1].numpy()[0] for k, v in obs.items()}
    assert LearnedTrigger(back).probs(o)[0] == pytest.approx(LearnedTrigger(net).probs(o)[0])
    with pytest.raises(ValueError, match="not observation fields"):
        PolicyNet(_spec({"question_embedding": 3}))


def test_module_fits_the_reducer_on_its_first_training_batch():
    import gymnasium as gym
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from policies.rl.module import KairosRLModule

    space = gym.spaces.Dict({"step_embedding": gym.spaces.Box(-9, 9, (6,), np.float32),
                             "pulse": gym.spaces.Box(-1, 1, (2,), np.float32)})
    m = RLModuleSpec(module_class=KairosRLModule, observation_space=space, action_space=gym.spaces.Discrete(2),
                     model_config={"arch": "mlp", "content_dim": 2}).build()
    assert m.net.spec.reduce == {"step_embedding": 2}
    assert m.net.needs_reducer_fit
    m.forward_train({Columns.OBS: {"step_embedding": torch.randn(32, 6), "pulse": torch.randn(32, 2)}})
    assert not m.net.needs_reducer_fit and m.net.red_proj_step_embedding.abs().sum() > 0


# ---------------------------------------------------------------- the fact-disjoint condition
def test_fact_disjoint_split_is_disjoint_on_the_fact_sets():
    from envs.registration import make_env

    hold = {"share": 0.33, "seed": 0}
    tr = make_env("microworld", {"split": "train", "fact_holdout": {**hold, "keep": "train"}})
    te = make_env("microworld", {"split": "dev", "fact_holdout": {**hold, "keep": "test"}})
    task_tr, task_te = tr.c.task, te.c.task
    held = task_tr.held_out
    assert held == task_te.held_out and 0.25 < len(held) / len(task_tr.kb.facts) < 0.4
    train_facts = {f for q in task_tr.questions for f in task_tr.gold_passages(q)}
    assert train_facts and not (train_facts & held)                      # no training chain states a held-out fact
    assert task_te.questions and all(held & set(task_te.gold_passages(q)) for q in task_te.questions)
    spouse = {f.id: f for f in task_tr.kb.facts if f.relation == "spouse"}
    for f in spouse.values():  # a marriage is held out both ways or not at all
        twin = next(g for g in spouse.values() if (g.subject, g.object) == (f.object, f.subject))
        assert (f.id in held) == (twin.id in held)
    assert tr.c.namespace == make_env("microworld", {"split": "train"}).c.namespace  # selection only
    with pytest.raises(ConfigError, match="fact_holdout.share must be in"):
        make_env("microworld", {"fact_holdout": {"share": 1.5}})
    with pytest.raises(ConfigError, match="EnvConfig.fact_holdout: unknown config key 'sede'.*did you mean 'seed'"):
        make_env("microworld", {"fact_holdout": {"share": 0.3, "sede": 1}})
    with pytest.raises(ConfigError, match="max_questions must be >= 1"):
        make_env("microworld", {"max_questions": -5})


def test_minilm_text_content_for_any_backend(tmp_path):
    """signals: [..., text_content]: MiniLM embeddings of the step and the question (384 numbers each, float16 in
    records), real on the micro-world and round-tripped through the trajectory cache."""
    import gymnasium as gym

    import envs  # noqa: F401
    from agents.signals.text import encoder

    cfg = {"split": "dev", "max_questions": 3, "signals": ["output", "text_content"],
           "cache_path": str(tmp_path / "c.sqlite")}
    env = gym.make("kairos/MicroWorld-v0", config=cfg)
    obs, _ = env.reset(seed=0)
    groups = env.unwrapped.groups
    assert obs["step_text_embedding"].shape == (384,) and obs["question_text_embedding"].shape == (384,)
    mask = dict(zip(groups, obs["mask"]))
    assert mask["step_text_embedding"] == 1 and mask["question_text_embedding"] == 1
    q = env.unwrapped.c.question_text(env.unwrapped.ep.q)
    np.testing.assert_allclose(obs["question_text_embedding"], encoder()([q])[0], atol=1e-3)  # float16 storage
    assert abs(float(np.linalg.norm(obs["step_text_embedding"])) - 1.0) < 1e-2
    replay = gym.make("kairos/MicroWorld-v0", config=cfg)
    obs2, _ = replay.reset(seed=0)
    np.testing.assert_array_equal(obs2["step_text_embedding"], obs["step_text_embedding"])
    assert replay.unwrapped.cache.hits > 0
