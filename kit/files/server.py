"""``cells/<arm>-r<k>/server.json``: what the runtime says about the live server (pid and process group,
or container id and its inspect output, secrets removed). Free-form evidence: only the version is kit's."""

from __future__ import annotations

from typing import ClassVar

from kit.files.base import BundleFile


class ServerFile(BundleFile):
    file_pattern: ClassVar[str] = "cells/*/server.json"
