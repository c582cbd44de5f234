"""The NeuroNetes controller on the API server: watches (:mod:`.controller`), the reads of load
signals over HTTP (:mod:`.scrape`) and one pool's reconcile (:mod:`.reconcile`)."""
