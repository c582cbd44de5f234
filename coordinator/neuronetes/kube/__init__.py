"""NeuroNetes' I/O: the controller on the API server — watches (:mod:`.controller`), one pool's
reconcile (:mod:`.reconcile`) — and what it reads over HTTP: load signals (:mod:`.scrape`) and
region carbon intensities (:mod:`.carbon_source`). The decisions are
:mod:`coordinator.neuronetes.decide`'s."""
