"""Runtime services every layer may use: the cache store (atomic writes, ``weights_only`` loads,
config keys), device and thread choice, the progress-callback convention and shared errors.

Imports nothing from ``gem_core``: it is the bottom layer.
"""
