"""``kairos answer``: a trained policy (or any trigger) answers questions over a knowledge source, with its trace.

::

    kairos answer --policy runs/quickstart/train/policy_trigger "Which city was Teimshox 's mother born in ?"
    kairos answer --bench runs/quickstart/bench --method "learned[QueryGen](λ=0.1)" --questions-file qs.txt
    kairos answer --policy DIR --corpus my_corpus.jsonl --reasoner hf --reasoner-option model=… --json - < qs.txt
    kairos answer --policy "minprob<0.3" --env-config configs/env_microworld.yaml "…"

Questions come from the positional arguments (``-`` reads stdin, one per line) and ``--questions-file`` (one per
line, or ``.jsonl`` with a ``question`` field). The answer and a readable trace are printed (rich); ``--json``
prints each :class:`kairos.Answer` as one line of JSON (the full trace) instead. Registered in
:data:`eval.cli.COMMANDS`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("answer", help="answer questions with a trained policy (or a trigger), printing the trace",
                       description=__doc__.split("::")[0].strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("questions", nargs="*", help="questions ('-': read them from stdin, one per line)")
    add_pipeline_args(p)
    p.add_argument("--questions-file", default=None, metavar="FILE",
                   help="questions, one per line (or .jsonl with a 'question' field)")
    p.add_argument("--batch-size", type=int, default=None, help="questions in flight at once (default 16; --bench: "
                                                                "the benchmark's)")
    p.add_argument("--json", action="store_true", help="print each answer with its full trace as one JSON line")
    p.set_defaults(func=run)


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    """The flags that say which pipeline runs (``kairos answer``, ``kairos serve``): the policy (``--policy``, or
    ``--bench`` with ``--method``), the knowledge (``--index``, ``--corpus``) and the env (``--env-config``,
    ``--reasoner``, ``--reasoner-option``, ``--query-mode``, ``--threshold``, ``--cache``) —
    :class:`kairos.config.PipelineSpec`'s fields."""
    src = p.add_argument_group("the policy (one of)")
    src.add_argument("--policy", default=None,
                     help="an exported policy directory (e.g. runs/quickstart/train/policy_trigger), a trigger "
                          "(never, always, single) or a threshold trigger 'SIGNAL<τ' / 'SIGNAL>τ' (e.g. 'minprob<0.3')")
    src.add_argument("--bench", default=None, metavar="OUT_DIR",
                     help="what this benchmark evaluated for --method (snapshot selected on dev, calibrated "
                          "threshold and query mode), e.g. runs/quickstart/bench")
    src.add_argument("--method", default=None, help="--bench: the method's name (e.g. 'learned[QueryGen](λ=0.1)')")
    src.add_argument("--bench-config", default=None, help="--bench: its YAML, for an output directory that records "
                                                          "no config.json")
    kn = p.add_argument_group("knowledge (default: the env's own; the micro-world reasoner: its world's facts)")
    kn.add_argument("--index", default=None, metavar="DIR", help="a prebuilt index (`kairos index build`)")
    kn.add_argument("--corpus", default=None, metavar="FILE",
                    help="a corpus: FlashRAG .jsonl ({\"id\", \"contents\"} per line), .txt (one passage per line) "
                         "or a corpus spec; indexed in memory (BM25) — with --index: the corpus it is checked against")
    env = p.add_argument_group("the env")
    env.add_argument("--env-config", default=None, metavar="YAML",
                     help="env settings (a training, benchmark or env YAML): for a trigger, or an export that "
                          "records no env (default: the policy's own; a trigger: the env defaults)")
    env.add_argument("--reasoner", default=None, help="another reasoner backend (micro, hf, openai, …)")
    env.add_argument("--reasoner-option", action="append", default=[], metavar="KEY=VALUE",
                     help="a backend option (repeatable; values read as YAML), e.g. model=… or base_url=…")
    env.add_argument("--query-mode", default=None, help="a trigger's query formulation (one of the env's query_modes)")
    env.add_argument("--threshold", type=float, default=None, help="a learned policy's retrieve-probability threshold")
    env.add_argument("--lambda", dest="lam", type=float, default=None, metavar="λ",
                     help="the budget: λ of retrieval calls a cost-conditioned policy decides for (e.g. 0.05 retrieves "
                          "more, 0.3 less; a policy trained for one λ refuses it)")
    env.add_argument("--cache", default=None, metavar="SQLITE", help="a trajectory-cache file (default: in memory)")


def read_cli_questions(args: Any, stdin=None) -> list[str]:
    """The questions of the command line: positional arguments (``-``: stdin's lines), then the file's."""
    from envs.ungraded import read_questions

    out: list[str] = []
    for q in args.questions:
        if q == "-":
            out += read_stdin_questions(stdin or sys.stdin)
        else:
            out.append(q)
    if args.questions_file:
        out += read_questions(args.questions_file)
    if not out:
        raise ValueError("no questions: give them as arguments, '-' to read stdin, or --questions-file FILE")
    return out


def read_stdin_questions(stdin) -> list[str]:
    """The non-empty lines of stdin (``-``); stdin closed, unreadable or empty is a one-line ``ValueError``."""
    how = "pipe questions in (echo 'QUESTION' | kairos answer -) or give them as arguments"
    try:  # the bytes, decoded strictly: a stray byte is named here, not as a surrogate deep in the pipeline
        text = None if stdin is None else stdin.buffer.read().decode() if hasattr(stdin, "buffer") else stdin.read()
    except (OSError, ValueError) as e:  # a closed stream, bytes that are not UTF-8
        raise ValueError(f"'-': cannot read questions from stdin ({e}); {how}") from None
    if text is None:
        raise ValueError(f"'-': stdin is closed; {how}")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"'-': stdin held no questions; {how}")
    return lines


def build_pipeline(args: Any):
    """The :class:`kairos.Pipeline` the command line describes (:class:`kairos.config.PipelineSpec`)."""
    from kairos.config import PipelineSpec

    return PipelineSpec.from_args(args).build(batch_size=args.batch_size)


def run(args: Any) -> int:
    questions = read_cli_questions(args)
    pipe = build_pipeline(args)
    try:
        if args.json:
            for ans in pipe.answer_many(questions):
                sys.stdout.write(ans.to_json(ensure_ascii=False) + "\n")
            sys.stdout.flush()
            return 0
        from rich.console import Console

        console = Console()
        log.info("answering %d question(s): %s", len(questions), pipe.describe())
        for ans in pipe.answer_many(questions):
            render_answer(ans, console)
    finally:
        pipe.close()
    return 0


def render_answer(ans, console) -> None:
    """A readable trace: the question, each decision (step, signals, decision, query, passages), the answer."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    t = Table(show_lines=True, expand=True, title_justify="left")
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("step", ratio=3)
    t.add_column("signals", ratio=2)
    t.add_column("decision", ratio=2)
    t.add_column("retrieved", ratio=3)
    for s in ans.steps:
        sig = ", ".join(f"{k} {v:.4g}" for k, v in list(s.signals.items())[:6])
        why = []
        if s.probability is not None:
            why.append(f"p {s.probability:.3f}")
        if s.threshold is not None:
            why.append(f"τ {s.threshold:.4g}")
        if s.details.get("value") is not None:
            why.append(f"{s.details.get('signal')} {s.details['value']:.4g}")
        decision = ("[bold yellow]retrieve[/]" if s.retrieved else "[dim]retrieve (capped)[/]" if s.capped
                    else "go on") + (f"\n{', '.join(why)}" if why else "")
        got = ""
        if s.retrieved:
            got = f"[cyan]{escape(s.query or '')}[/] ({s.query_mode})\n" + "\n".join(
                f"{'→ ' if p.injected else '  '}{escape(p.id)} {p.score:.2f}: {escape(p.text[:80])}" for p in s.passages)
            if s.regenerated is not None:
                got += f"\n[green]regenerated:[/] {escape(s.regenerated)}"
        t.add_row(str(s.index), escape(s.text), escape(sig), decision, got)
    head = (f"[bold]{escape(ans.question)}[/]\n\n[bold green]{escape(str(ans.answer))}[/]  ({ans.answer_status}; "
            f"{ans.calls} retrieval call{'s' if ans.calls != 1 else ''}, {ans.tokens} tokens, {ans.seconds:.2f} s "
            f"generation, policy {escape(ans.policy)}"
            + (f", budget λ {ans.cost_weights['retrieval_calls']:g}" if "retrieval_calls" in ans.cost_weights else "")
            + ")")
    cut = ans.cut_to_window
    if cut:
        head += (f"\n[yellow]the {cut['field']} was cut from {cut['from_tokens']} to {cut['to_tokens']} tokens to fit "
                 f"the reasoner's {cut['window']}-token window[/]")
    console.print(Panel(head, expand=True))
    console.print(t)
