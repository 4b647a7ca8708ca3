"""The micro-world's world files: knowledge base, questions, step labels, tokenizer, corpus and the artifact
loader (the shipped world lives in ``artifacts/``). Training a world is :mod:`envs.microworld.build`."""
