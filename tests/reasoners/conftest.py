"""A tiny word-level tokenizer and tiny random Llama models for the reasoner-backend tests."""

from __future__ import annotations

import pytest
import torch

WORDS = ["<pad>", "<eos>", "<unk>", "\n", "Step", "Answer", "Evidence", "Question", ":", "1", "2", "3",
         "a", "b", "c", "d", "e", "f", "g", "h", "x", "y", "z", "Paris", "is", "the", "capital", "?"]


def make_tokenizer():
    """A ``PreTrainedTokenizerFast`` over :data:`WORDS` (space-separated words; newline is its own token)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[ \t]+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
    ])
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def make_model(attn: str = "sdpa", seed: int = 1, script: dict[str, str] | None = None, V: int = len(WORDS)):
    """A 2-layer, hidden-32 ``LlamaForCausalLM``.

    Without ``script`` it is random (untied, init std 0.2: varied tokens, some rows stop early, some run
    to the token cap). With ``script`` (word -> next word)
    it is a bigram machine: one-hot embeddings and an untied output layer make greedy decoding follow the
    script, while small random attention/MLP weights keep hidden states and attentions non-trivial.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=1,
                      initializer_range=0.2 if script is None else 0.02, attn_implementation=attn)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        if script is not None:
            idx = {w: i for i, w in enumerate(WORDS)}
            m.model.embed_tokens.weight.copy_(torch.eye(V, 32) * 3.0 + 0.01 * torch.randn(V, 32))
            W = torch.zeros(V, 32)
            for a, b in script.items():
                W[idx[b], idx[a]] = 0.8
            m.lm_head.weight.copy_(W + 0.05 * torch.randn(V, 32))
    return m


#: every line is "Step 1 : a b", a pending 'x' starts an answer line, 'c' runs away
SCRIPT = {"\n": "Step", "Step": "1", "1": ":", ":": "a", "a": "b", "b": "\n",
          "x": "Answer", "Answer": ":", "c": "c", "?": "\n"}


@pytest.fixture(scope="session")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="session")
def random_model():
    return make_model()


@pytest.fixture(scope="session")
def eager_model():
    return make_model(attn="eager")


@pytest.fixture(scope="session")
def scripted_model():
    return make_model(script=SCRIPT)


@pytest.fixture(scope="session")
def scripted_eager_model():
    return make_model(attn="eager", script=SCRIPT)


#: a model that ignores the step format: free text, each sentence ending in 'z' (its full stop), no 'Step', no
#: newline
FREE_SCRIPT = {"\n": "Paris", "?": "Paris", "Paris": "is", "is": "the", "the": "capital", "capital": "z",
               "z": "a", "a": "b", "b": "z"}


@pytest.fixture(scope="session")
def free_form_model():
    return make_model(script=FREE_SCRIPT)
