"""Generative QueryGen: a small causal LM that writes the retrieval query for a flagged step.

Main flow: :mod:`.data` (flagged steps with the evidence they lack) → :mod:`.train` (SFT warm start, then
RLOO / GRPO with TRL on :mod:`.rewards`) → :mod:`.bench` (Recall@1/@3 and downstream step correctness vs the
fixed query formulations and the mode-selecting head). :mod:`.model` holds the generator and its checkpoint
format; ``gen:<checkpoint>`` makes it a query mode the env and the benchmark take by name.

CLI: ``kairos train querygen --config configs/querygen_microworld.yaml`` and
``kairos bench querygen --config configs/querygen_microworld.yaml``.
"""
