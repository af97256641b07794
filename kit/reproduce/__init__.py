"""`kit reproduce`: from a shared bundle or archive to "reproduced / inconsistent / imprecise", in one command.

One module per job: ``source`` (verify the source into a private copy), ``equivalence`` (the test of no difference and
TOST on a Welch contrast, repeats at no difference), ``decide`` (the rule on one comparison: inconsistent, reproduced
or imprecise), ``verdict`` (every comparison from two summaries, the A/B conclusion), ``identity`` (images or server
commands), ``setup`` (the environment diff, the load client), ``render`` (terminal lines, reproduce.md), ``sealing``
(source files, provenance naming the source), ``dryrun`` and ``run`` (the pipeline). The method: docs/reproduce.md.
"""

from kit.reproduce.run import ReproduceOptions, ReproduceResult, reproduce, seal

__all__ = ["ReproduceOptions", "ReproduceResult", "reproduce", "seal"]
