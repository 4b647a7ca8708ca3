"""The trace inspector page: plain HTML, JavaScript and CSS, no build step and nothing from the network.

``kairos serve`` serves it at ``/`` (ask a question — streamed step by step —, or open a benchmark's per-question
trace file from ``--traces``); ``index.html`` also opens as a file, standalone, and reads a trace file dropped on
it (``kairos answer --json`` lines, a chat completion's JSON, a benchmark's ``per_question/<split>/<method>.jsonl``).
"""
