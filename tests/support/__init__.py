"""Shared test helpers, one of each: ports (``support.ports``), manifests (``support.manifests``) and
synthetic bundles (``support.bundles``). ``tests/`` is on ``sys.path`` (rootdir conftest), so tests
import them as ``from support.ports import free_port``."""
