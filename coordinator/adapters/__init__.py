"""The engine's ports implemented:
on the API server (:mod:`.kube`) and in memory (:mod:`.memory`).
"""
