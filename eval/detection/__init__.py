"""Step-error and retrieval-benefit detection: the data (`data`), the metrics (`metrics`), RSUS against
its labels (`rsus`), the benchmark (`bench`, ``kairos bench detection``), its report (`report`) and the
retrieval-benefit labels (`labels`, ``python -m eval.detection.labels``)."""
