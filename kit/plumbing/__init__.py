"""Plumbing every room shares, written once: clocks, deadlines, files, process groups, ports, HTTP,
Docker connections and log pumps.

Nothing here knows about manifests, bundles or experiments; every other room may import it, and it
imports nothing from kit but ``kit.errors``.
"""
