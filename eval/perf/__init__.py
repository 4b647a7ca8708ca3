"""The performance benchmarks, one ``kairos bench`` subcommand each: drift, efficiency, engine, env, querygen,
reasoner, retrieval, rsus, segmenter, service. Each prints a table and writes JSON; speed claims live here
(docs/design.md §9), measured against a baseline in the same run."""
