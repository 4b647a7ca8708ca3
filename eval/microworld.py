"""Competence and speed benchmark of a micro-world artifact (``kairos microworld eval``).

Measures what the micro-world must guarantee to be a useful testbed (issue targets in brackets):
closed-book recall per fact split [KNOWN >= 95%], evidence copy rate per injection mode [step >= 95%],
answer accuracy by hop count and by the kind of fact a question needs [all-KNOWN >= 90%], the step error
ratio, which fact split the erroneous steps belong to [HELD-OUT questions: >= 80% of errors on the
HELD-OUT fact], how often regeneration with the true evidence fixes a wrong step, and generation
throughput with and without signal capture [>= 1,000 tok/s at batch 16 on one thread; overhead <= 10%].
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter, defaultdict
from typing import Any

from envs.core.microworld.kb import parse_sentence
from envs.core.microworld.labels import label_chain
from envs.core.microworld.questions import Question, gold_chain, question_category

log = logging.getLogger(__name__)


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def fact_recall(reasoner, kb) -> dict[str, Any]:
    """Closed-book: ask the 1-hop question of every fact; does step 1 state the true (or trained-false) object?"""
    facts = kb.facts
    qs = [Question(f.subject, (f.relation,)).text for f in facts]
    states = [reasoner.start(q) for q in qs]
    steps = [s for s, _ in reasoner.next_step(states)]
    by: dict[str, Counter] = defaultdict(Counter)
    for f, st in zip(facts, steps):
        p = parse_sentence(st.content)
        c = by[f.split]
        c["n"] += 1
        if p and p[:2] == (f.subject, f.relation):
            c["true"] += p[2] == f.object
            c["false_version"] += f.false_object is not None and p[2] == f.false_object
    return {s: {"n": c["n"], "recall_true": _rate(c["true"], c["n"]),
                "states_trained_false": _rate(c["false_version"], c["n"]) if s in ("mislearned", "conflicting") else None}
            for s, c in sorted(by.items())}


def evidence_copy(reasoner, kb) -> dict[str, Any]:
    """With the true fact as evidence (step mode: right before step 1; front mode: before the question)."""
    facts = kb.facts
    out: dict[str, Any] = {}
    for mode in ("step", "front"):
        states = [reasoner.start(Question(f.subject, (f.relation,)).text) for f in facts]
        res = reasoner.regenerate(states, [[f.sentence] for f in facts], mode=mode)
        by: dict[str, Counter] = defaultdict(Counter)
        for f, (st, _) in zip(facts, res):
            by[f.split]["n"] += 1
            by[f.split]["copied"] += parse_sentence(st.content) == (f.subject, f.relation, f.object)
        tot = sum(c["copied"] for c in by.values()), sum(c["n"] for c in by.values())
        out[mode] = {"all": _rate(*tot), **{s: _rate(c["copied"], c["n"]) for s, c in sorted(by.items())}}
    return out


def chains_eval(reasoner, kb, questions: list[Question]) -> dict[str, Any]:
    """Closed-book chains: answer accuracy, step errors, error kinds, and the fix rate of regeneration."""
    max_steps = max(q.hops for q in questions) + 2
    chains = reasoner.run_chains([q.text for q in questions], max_steps=max_steps)
    acc_hops: dict[int, Counter] = defaultdict(Counter)
    acc_cat: dict[str, Counter] = defaultdict(Counter)
    labels_count: Counter = Counter()
    confusion: dict[str, Counter] = defaultdict(Counter)
    heldout_err = Counter()
    stops = 0
    first_errors = []  # (question index, step index) of the first wrong step, for the fix-rate test
    for qi, (q, chain) in enumerate(zip(questions, chains)):
        answer = next((s.content for s in chain if s.is_answer), None)
        stops += answer is not None
        contents = [s.content for s in chain if not s.is_answer]
        labels, correct = label_chain(kb, q, contents, answer)
        cat = question_category(kb, q)
        acc_hops[q.hops]["n"] += 1
        acc_hops[q.hops]["ok"] += correct
        acc_cat[cat]["n"] += 1
        acc_cat[cat]["ok"] += correct
        gold = gold_chain(kb, q) or []
        first = None
        for i, lab in enumerate(labels):
            labels_count[lab.label] += 1
            if lab.label == "wrong":
                confusion[lab.error_kind or "?"]["steps"] += 1
                if first is None:
                    first = i
            if cat == "held_out" and lab.label == "wrong":
                heldout_err["wrong"] += 1
                heldout_err["on_held_out_fact"] += lab.split == "held_out"
        if first is not None and first < len(gold):
            first_errors.append((qi, first))
    # regeneration with the true evidence at the first wrong step (step mode), from the accepted prefix
    fixed = 0
    if first_errors:
        states = []
        for qi, i in first_errors:
            st = reasoner.start(questions[qi].text)
            for _ in range(i):  # replay the accepted prefix greedily (deterministic)
                (_, st), = reasoner.next_step([st])
            states.append(st)
        evid = [[(gold_chain(kb, questions[qi]) or [])[i].sentence] for qi, i in first_errors]
        res = reasoner.regenerate(states, evid, mode="step")
        for (qi, i), (step, _) in zip(first_errors, res):
            f = (gold_chain(kb, questions[qi]) or [])[i]
            fixed += parse_sentence(step.content) == (f.subject, f.relation, f.object)
    n_steps = sum(labels_count.values())
    return {
        "n_questions": len(questions),
        "answer_accuracy": _rate(sum(c["ok"] for c in acc_cat.values()), len(questions)),
        "accuracy_by_hops": {h: {"n": c["n"], "acc": _rate(c["ok"], c["n"])} for h, c in sorted(acc_hops.items())},
        "accuracy_by_category": {k: {"n": c["n"], "acc": _rate(c["ok"], c["n"])} for k, c in sorted(acc_cat.items())},
        "clean_stop_rate": _rate(stops, len(questions)),
        "step_labels": dict(labels_count),
        "step_error_ratio": _rate(n_steps - labels_count["correct"], n_steps),
        "wrong_steps_by_error_kind": {k: c["steps"] for k, c in sorted(confusion.items())},
        "held_out_questions_errors_on_held_out_fact": _rate(heldout_err["on_held_out_fact"], heldout_err["wrong"]),
        "first_error_fixed_by_step_evidence": _rate(fixed, len(first_errors)),
        "n_first_errors": len(first_errors),
    }


def throughput(reasoner, questions: list[Question], batch_sizes=(1, 16), repeats: int = 3) -> dict[str, Any]:
    """Generated tokens/s of whole greedy chains on the current torch thread count.

    Plain generation and generation with signal capture (per-layer hidden states pooled in the same pass)
    run interleaved (plain, signals, plain, signals, …) ``repeats`` times; medians are reported, and the
    overhead is the median of the per-pair ratios, so machine drift affects both sides alike.
    """
    import statistics

    import torch

    out: dict[str, Any] = {"threads": torch.get_num_threads(), "repeats": repeats}

    def once(qs: list[str], b: int, capture: bool) -> float:
        reasoner.capture_hidden = capture
        toks, secs = 0, 0.0
        for i in range(0, len(qs), b):
            t0 = time.perf_counter()
            chains = reasoner.run_chains(qs[i: i + b], max_steps=7)
            secs += time.perf_counter() - t0
            toks += sum(s.n_tokens for c in chains for s in c)
        return toks / secs

    try:
        for b in batch_sizes:
            qs = [q.text for q in questions[: max(b, 16)]]
            once(qs, b, False)  # warm-up
            plain, sig = [], []
            for _ in range(repeats):
                plain.append(once(qs, b, False))
                sig.append(once(qs, b, True))
            out[f"batch{b}_plain_tok_s"] = round(statistics.median(plain), 1)
            out[f"batch{b}_signals_tok_s"] = round(statistics.median(sig), 1)
            out[f"batch{b}_signal_overhead"] = round(statistics.median(p / s - 1 for p, s in zip(plain, sig)), 4)
    finally:
        reasoner.capture_hidden = True
    return out


def stratified_sample(questions: list[Question], n: int, seed: int = 0) -> list[Question]:
    """Up to ``n`` questions, as balanced over hop counts as the pool allows (deterministic)."""
    rng = random.Random(seed)
    by: dict[int, list[Question]] = defaultdict(list)
    for q in questions:
        by[q.hops].append(q)
    for v in by.values():
        rng.shuffle(v)
    out: list[Question] = []
    hops = sorted(by)
    while len(out) < n and any(by.values()):
        for h in hops:
            if by[h] and len(out) < n:
                out.append(by[h].pop())
    return out


def evaluate_world(world, split: str = "test", n: int = 400, throughput: bool = True, seed: int = 0
                   ) -> dict[str, Any]:
    """All competence metrics (and optionally throughput) of a micro-world."""
    import torch

    from agents.reasoners.micro import MicroReasoner

    torch.set_num_threads(1)
    if split not in world.questions:
        raise ValueError(f"unknown question split '{split}' (valid: {', '.join(world.questions)})")
    kb = world.kb
    reasoner = MicroReasoner(world)
    qs = stratified_sample(world.questions[split], n, seed)
    t0 = time.perf_counter()
    metrics: dict[str, Any] = {
        "artifact": str(world.path) if world.path else None,
        "split": split,
        "facts": kb.split_counts(),
        "fact_recall": fact_recall(reasoner, kb),
        "evidence_copy": evidence_copy(reasoner, kb),
        "chains": chains_eval(reasoner, kb, qs),
    }
    metrics["eval_seconds"] = round(time.perf_counter() - t0, 1)
    if throughput:
        metrics["throughput"] = globals()["throughput"](reasoner, qs[:64])
    metrics["targets"] = _targets(metrics)
    return metrics


def _targets(m: dict[str, Any]) -> dict[str, Any]:
    ch = m["chains"]
    t = {
        "known_recall>=0.95": m["fact_recall"].get("known", {}).get("recall_true"),
        "evidence_copy_step>=0.95": m["evidence_copy"]["step"]["all"],
        "all_known_accuracy>=0.90": ch["accuracy_by_category"].get("all_known", {}).get("acc"),
        "held_out_errors_on_held_out_fact>=0.80": ch["held_out_questions_errors_on_held_out_fact"],
    }
    thr = {"known_recall>=0.95": 0.95, "evidence_copy_step>=0.95": 0.95, "all_known_accuracy>=0.90": 0.90,
           "held_out_errors_on_held_out_fact>=0.80": 0.80}
    out = {k: {"value": v, "met": v is not None and v >= thr[k]} for k, v in t.items()}
    if "throughput" in m:
        v = m["throughput"].get("batch16_plain_tok_s")
        out["batch16_tok_s>=1000"] = {"value": v, "met": v is not None and v >= 1000}
        o = m["throughput"].get("batch16_signal_overhead")
        out["signal_overhead<=0.10"] = {"value": o, "met": o is not None and o <= 0.10}
    return out


def format_metrics(m: dict[str, Any]) -> str:
    """A readable multi-table summary (rich tables rendered to text)."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=110, force_terminal=False)
    t = Table(title="Targets")
    t.add_column("target")
    t.add_column("value", justify="right")
    t.add_column("met")
    for k, v in m["targets"].items():
        t.add_row(k, str(v["value"]), "yes" if v["met"] else "NO")
    con.print(t)
    t = Table(title="Fact recall (closed book) and evidence copy, by fact split")
    for c in ("split", "n", "recall true", "states trained false", "copy (step)", "copy (front)"):
        t.add_column(c, justify="right")
    for s, r in m["fact_recall"].items():
        t.add_row(s, str(r["n"]), str(r["recall_true"]), str(r["states_trained_false"]),
                  str(m["evidence_copy"]["step"].get(s)), str(m["evidence_copy"]["front"].get(s)))
    con.print(t)
    ch = m["chains"]
    t = Table(title=f"Answer accuracy ({ch['n_questions']} {m['split']} questions)")
    t.add_column("group")
    t.add_column("n", justify="right")
    t.add_column("accuracy", justify="right")
    for h, r in ch["accuracy_by_hops"].items():
        t.add_row(f"{h} hops", str(r["n"]), str(r["acc"]))
    for k, r in ch["accuracy_by_category"].items():
        t.add_row(f"needs {k}", str(r["n"]), str(r["acc"]))
    t.add_row("all", str(ch["n_questions"]), str(ch["answer_accuracy"]))
    con.print(t)
    con.print(f"step labels: {ch['step_labels']}  error ratio {ch['step_error_ratio']}  "
              f"wrong steps by kind: {ch['wrong_steps_by_error_kind']}  clean stop {ch['clean_stop_rate']}  "
              f"first error fixed by step evidence: {ch['first_error_fixed_by_step_evidence']} "
              f"(n={ch['n_first_errors']})")
    if "throughput" in m:
        con.print(f"throughput: {m['throughput']}")
    return buf.getvalue()
