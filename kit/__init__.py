"""kit: reproducible A/B experiments for LLM serving engines.

This module must stay import-light: ``kit.engine`` is shipped alone in an image together with
this file, so nothing here may import the rest of kit or any third-party package.
"""

__version__ = "0.1.0"
