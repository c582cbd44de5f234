"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as the scheduling core sees it."""
